//! [`ExportMachine`]: the sans-IO registration schedule of one exported
//! provider instance. It decides when to (re)publish and register, how long
//! to wait after a failure (the one retry primitive, [`Recover`]), and what a
//! graceful stop must do. The actor shell performs its actions.
//!
//! Rules:
//! - an attempt publishes the metadata everywhere; once it succeeded the
//!   shell hands the record to the engine's failback registrar
//!   ([`crate::registrar::RegistrarMachine`]), which registers it and keeps
//!   it registered (so "registered" here means "published and handed off");
//! - a failure is retried on the policy's schedule (final errors give up and
//!   say so); a success resets the schedule;
//! - after a supervised restart the metadata is published again and the
//!   record handed to the registrar again (which holds the intent as the
//!   source of truth: an intent it already settled costs no registry call),
//!   and old tokens are dead;
//! - a stop cancels the retry timer, waits for an attempt already on the wire
//!   (so it cannot land after the unregister), announces closing only if the
//!   record may be registered, then unregisters.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::error::ErrorClass;
use crate::recover::{Recover, RecoverPolicy, Retry};

/// Identifies one attempt or one timer; stale ones are ignored.
pub type ExportToken = u64;

/// What the actor shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportAction {
    /// Publish the metadata (then hand the record to the registrar);
    /// report with `token`.
    Attempt {
        /// Token of the attempt.
        token: ExportToken,
    },
    /// Call [`ExportMachine::on_timer`] with `token` after `delay`.
    ArmTimer {
        /// Token of the timer.
        token: ExportToken,
        /// Delay from now.
        delay: Duration,
    },
    /// The timer with `token` must not fire.
    CancelTimer {
        /// Its token.
        token: ExportToken,
    },
}

/// Where the export stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportPhase {
    /// Publishing and registering (or waiting to retry).
    Syncing,
    /// The record is registered.
    Registered,
    /// A final error stopped the retries; the message says which.
    GaveUp(String),
    /// Stopped for good.
    Closed,
}

/// What a graceful stop must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopPlan {
    /// A retry timer to cancel.
    pub cancel_timer: Option<ExportToken>,
    /// Wait (bounded) for the attempt already under way before anything else.
    pub wait_for_attempt: bool,
    /// Announce closing first (the record may be registered).
    pub announce_closing: bool,
}

/// The registration schedule of one exported instance.
#[derive(Debug)]
pub struct ExportMachine {
    policy: RecoverPolicy,
    recover: Recover,
    rng: StdRng,
    phase: ExportPhase,
    attempt: Option<ExportToken>,
    timer: Option<ExportToken>,
    next_token: ExportToken,
    last_error: Option<String>,
}

impl ExportMachine {
    /// A machine retrying on `policy`, its jitter seeded by `seed`.
    pub fn new(policy: RecoverPolicy, seed: u64) -> Self {
        Self {
            policy,
            recover: Recover::new(),
            rng: StdRng::seed_from_u64(seed),
            phase: ExportPhase::Syncing,
            attempt: None,
            timer: None,
            next_token: 1,
            last_error: None,
        }
    }

    fn token(&mut self) -> ExportToken {
        let t = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        t
    }

    fn attempt_now(&mut self) -> Vec<ExportAction> {
        let token = self.token();
        self.attempt = Some(token);
        vec![ExportAction::Attempt { token }]
    }

    /// The actor started: asserts the record unless stopped.
    pub fn start(&mut self) -> Vec<ExportAction> {
        self.attempt = None;
        self.timer = None;
        if matches!(self.phase, ExportPhase::Closed | ExportPhase::GaveUp(_)) {
            return Vec::new();
        }
        self.phase = ExportPhase::Syncing;
        self.attempt_now()
    }

    /// The attempt with `token` ended; `Err` carries the error's class and
    /// its message.
    pub fn on_attempt_done(
        &mut self,
        token: ExportToken,
        result: Result<(), (ErrorClass, String)>,
        now: Instant,
    ) -> Vec<ExportAction> {
        if self.attempt != Some(token) || self.phase == ExportPhase::Closed {
            return Vec::new();
        }
        self.attempt = None;
        match result {
            Ok(()) => {
                self.recover.on_success();
                self.last_error = None;
                self.phase = ExportPhase::Registered;
                Vec::new()
            }
            Err((class, message)) => {
                self.last_error = Some(message.clone());
                match self
                    .recover
                    .on_failure(&self.policy, class, now, &mut self.rng)
                {
                    Retry::After(delay) => {
                        let token = self.token();
                        self.timer = Some(token);
                        vec![ExportAction::ArmTimer { token, delay }]
                    }
                    Retry::GiveUp => {
                        self.phase = ExportPhase::GaveUp(message);
                        Vec::new()
                    }
                }
            }
        }
    }

    /// The retry timer with `token` fired.
    pub fn on_timer(&mut self, token: ExportToken) -> Vec<ExportAction> {
        if self.timer != Some(token) || self.phase != ExportPhase::Syncing {
            return Vec::new();
        }
        self.timer = None;
        self.attempt_now()
    }

    /// Stops for good and says what the graceful stop must do.
    pub fn stop(&mut self) -> StopPlan {
        let wait_for_attempt = self.attempt.take().is_some();
        let plan = StopPlan {
            cancel_timer: self.timer.take(),
            wait_for_attempt,
            // A record may be registered once an attempt succeeded, or when
            // one is on the wire now.
            announce_closing: wait_for_attempt || self.phase == ExportPhase::Registered,
        };
        self.phase = ExportPhase::Closed;
        plan
    }

    /// Where the export stands.
    pub fn phase(&self) -> &ExportPhase {
        &self.phase
    }

    /// Whether the record is registered.
    pub fn is_registered(&self) -> bool {
        self.phase == ExportPhase::Registered
    }

    /// Consecutive failed attempts.
    pub fn failures(&self) -> u32 {
        self.recover.failures()
    }

    /// The latest failure's message, until an attempt succeeds.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::BackoffPolicy;

    fn machine() -> ExportMachine {
        let policy = RecoverPolicy::new(BackoffPolicy {
            jitter: 0.0,
            ..BackoffPolicy::default()
        });
        ExportMachine::new(policy, 1)
    }

    fn attempt(actions: &[ExportAction]) -> ExportToken {
        match actions {
            [ExportAction::Attempt { token }] => *token,
            other => panic!("expected one attempt, got {other:?}"),
        }
    }

    fn timer(actions: &[ExportAction]) -> (ExportToken, Duration) {
        match actions {
            [ExportAction::ArmTimer { token, delay }] => (*token, *delay),
            other => panic!("expected one timer, got {other:?}"),
        }
    }

    fn fail(class: ErrorClass) -> Result<(), (ErrorClass, String)> {
        Err((class, "registry down".into()))
    }

    #[test]
    fn retries_on_the_schedule_until_it_lands_then_resets() {
        let mut m = machine();
        let t0 = Instant::now();
        let a = attempt(&m.start());
        let (t, d) = timer(&m.on_attempt_done(a, fail(ErrorClass::Transient), t0));
        assert_eq!(d, Duration::from_secs(1));
        assert_eq!(m.last_error(), Some("registry down"));
        let a = attempt(&m.on_timer(t));
        assert!(m.on_timer(t).is_empty(), "a timer fires once");
        let (t, d) = timer(&m.on_attempt_done(a, fail(ErrorClass::Transient), t0));
        assert_eq!(d, Duration::from_secs(2));
        let a = attempt(&m.on_timer(t));
        assert!(m.on_attempt_done(a, Ok(()), t0).is_empty());
        assert!(m.is_registered());
        assert_eq!((m.failures(), m.last_error()), (0, None));
        assert!(m.on_attempt_done(a, Ok(()), t0).is_empty(), "stale result");
    }

    #[test]
    fn a_restart_asserts_the_record_again_and_kills_old_tokens() {
        let mut m = machine();
        let t0 = Instant::now();
        let a = attempt(&m.start());
        m.on_attempt_done(a, Ok(()), t0);
        let b = attempt(&m.start());
        assert_ne!(a, b);
        assert!(!m.is_registered(), "syncing again after a restart");
        assert!(m
            .on_attempt_done(a, fail(ErrorClass::Transient), t0)
            .is_empty());
        m.on_attempt_done(b, Ok(()), t0);
        assert!(m.is_registered());
    }

    #[test]
    fn final_errors_give_up_and_say_why() {
        let mut m = machine();
        let a = attempt(&m.start());
        assert!(m
            .on_attempt_done(a, fail(ErrorClass::Final), Instant::now())
            .is_empty());
        assert_eq!(m.phase(), &ExportPhase::GaveUp("registry down".into()));
        assert!(
            m.start().is_empty(),
            "a restart does not revive a final error"
        );
    }

    #[test]
    fn stop_plans_by_what_may_be_registered() {
        let t0 = Instant::now();
        // Waiting for a retry: nothing registered, cancel the timer.
        let mut m = machine();
        let a = attempt(&m.start());
        let (t, _) = timer(&m.on_attempt_done(a, fail(ErrorClass::Transient), t0));
        assert_eq!(
            m.stop(),
            StopPlan {
                cancel_timer: Some(t),
                wait_for_attempt: false,
                announce_closing: false
            }
        );
        assert!(
            m.on_timer(t).is_empty() && m.start().is_empty(),
            "closed for good"
        );
        // An attempt on the wire: wait for it and announce.
        let mut m = machine();
        m.start();
        let plan = m.stop();
        assert!(plan.wait_for_attempt && plan.announce_closing);
        // Registered: announce, nothing to wait for.
        let mut m = machine();
        let a = attempt(&m.start());
        m.on_attempt_done(a, Ok(()), t0);
        let plan = m.stop();
        assert!(!plan.wait_for_attempt && plan.announce_closing);
        assert!(m.on_attempt_done(a, Ok(()), t0).is_empty());
        assert_eq!(m.phase(), &ExportPhase::Closed);
    }
}
