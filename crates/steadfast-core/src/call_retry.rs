//! The retry decision of one call, sans-IO: after a failed attempt, retry
//! (on another endpoint, after a short delay) or give up, and why.
//!
//! Three things are kept apart:
//! - whether the failure may be retried at all is the caller's
//!   classification (its error says retryable or final);
//! - how long to wait and how many attempts is the one retry primitive,
//!   [`Recover`] on a [`RecoverPolicy`] (by default 3 attempts, 10 ms
//!   doubling to 100 ms, +0-25 % jitter: the next attempt goes to ANOTHER
//!   endpoint, so it need not wait for this one to heal);
//! - whether the fleet can afford a retry is the shared [`RetryBudget`]
//!   (20 % of the calls + 10/s), asked last so that a retry refused for
//!   another reason costs nothing.
//!
//! Every retry must also end before the call's deadline. Time and
//! randomness are inputs.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::backoff::BackoffPolicy;
use crate::error::ErrorClass;
use crate::recover::{Recover, RecoverPolicy, Retry};
use crate::retry_budget::RetryBudget;

/// Attempts and delays of one call's retries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallRetryPolicy {
    /// Attempts in all (first + retries) and the delay between them.
    pub recover: RecoverPolicy,
    /// The longest a retry waits for ANOTHER endpoint to appear when every
    /// endpoint left is one the call failed on (a replacement registering,
    /// an ejection ending), within the call's deadline. Default 2 s: long
    /// enough for a restarted provider to register, short enough that a
    /// dead single endpoint fails its callers fast.
    pub other_endpoint_wait: Duration,
}

impl Default for CallRetryPolicy {
    /// 3 attempts, 10 ms doubling to 100 ms, +0-25 % jitter; a retry
    /// waits at most 2 s for another endpoint.
    fn default() -> Self {
        Self {
            recover: RecoverPolicy::new(BackoffPolicy {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(100),
                multiplier: 2.0,
                jitter: 0.25,
            })
            .with_max_attempts(Some(3)),
            other_endpoint_wait: Duration::from_secs(2),
        }
    }
}

/// Why a call stopped retrying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// The failure is final (not retryable).
    Final,
    /// Every attempt of the policy was used.
    Attempts,
    /// The retry budget is spent (too many retries by this Caller lately).
    Budget,
    /// The retry could not start before the call's deadline.
    Deadline,
    /// No endpoint other than those the call failed on appeared within the
    /// policy's `other_endpoint_wait` (or the directory closed).
    NoOtherEndpoint,
}

impl std::fmt::Display for GiveUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GiveUp::Final => "the failure is not retryable",
            GiveUp::Attempts => "no attempt left",
            GiveUp::Budget => "the retry budget is spent",
            GiveUp::Deadline => "the call's deadline passed",
            GiveUp::NoOtherEndpoint => "no other endpoint to retry on",
        })
    }
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallStep {
    /// Retry on another endpoint after `after` (a retry was withdrawn from
    /// the budget).
    Retry {
        /// The delay before the next attempt.
        after: Duration,
    },
    /// Stop and report the last failure.
    GiveUp(GiveUp),
}

/// The retry state of one call.
#[derive(Clone, Debug)]
pub struct CallRetry {
    recover: Recover,
    deadline: Instant,
    attempts: u32,
}

impl CallRetry {
    /// A call starting at `now` that must end by `deadline`: deposits the
    /// call's share into `budget`.
    pub fn start(budget: &mut RetryBudget, now: Instant, deadline: Instant) -> Self {
        budget.deposit(now);
        Self {
            recover: Recover::new(),
            deadline,
            attempts: 0,
        }
    }

    /// The next attempt starts: returns its number (1-based).
    pub fn begin_attempt(&mut self) -> u32 {
        self.attempts = self.attempts.saturating_add(1);
        self.attempts
    }

    /// Attempts begun so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The call's deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Until when the pick of a retry starting at `now` may wait for
    /// another endpoint: `other_endpoint_wait` from now, never past the
    /// call's deadline.
    pub fn other_endpoint_until(&self, policy: &CallRetryPolicy, now: Instant) -> Instant {
        now.checked_add(policy.other_endpoint_wait)
            .map_or(self.deadline, |t| t.min(self.deadline))
    }

    /// Time left at `now` (zero once past).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// The attempt failed at `now`; `retryable` is the failure's class.
    pub fn on_failure(
        &mut self,
        policy: &CallRetryPolicy,
        retryable: bool,
        budget: &mut RetryBudget,
        now: Instant,
        rng: &mut impl Rng,
    ) -> CallStep {
        let class = if retryable {
            ErrorClass::Transient
        } else {
            ErrorClass::Final
        };
        let after = match self.recover.on_failure(&policy.recover, class, now, rng) {
            Retry::After(d) => d,
            Retry::GiveUp if !retryable => return CallStep::GiveUp(GiveUp::Final),
            Retry::GiveUp => return CallStep::GiveUp(GiveUp::Attempts),
        };
        match now.checked_add(after) {
            Some(at) if at < self.deadline => {}
            _ => return CallStep::GiveUp(GiveUp::Deadline),
        }
        if !budget.try_withdraw(now) {
            return CallStep::GiveUp(GiveUp::Budget);
        }
        CallStep::Retry { after }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry_budget::RetryBudgetConfig;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const MS: Duration = Duration::from_millis(1);

    fn setup() -> (CallRetryPolicy, RetryBudget, StdRng, Instant) {
        (
            CallRetryPolicy::default(),
            RetryBudget::new(RetryBudgetConfig::default()),
            StdRng::seed_from_u64(1),
            Instant::now(),
        )
    }

    #[test]
    fn retries_twice_then_runs_out_of_attempts() {
        let (p, mut b, mut rng, t0) = setup();
        let mut c = CallRetry::start(&mut b, t0, t0 + 1000 * MS);
        assert_eq!(c.begin_attempt(), 1);
        let CallStep::Retry { after } = c.on_failure(&p, true, &mut b, t0, &mut rng) else {
            panic!("first failure retries");
        };
        assert!(after >= 10 * MS && after <= 13 * MS, "{after:?}");
        c.begin_attempt();
        assert!(matches!(
            c.on_failure(&p, true, &mut b, t0, &mut rng),
            CallStep::Retry { .. }
        ));
        c.begin_attempt();
        assert_eq!(
            c.on_failure(&p, true, &mut b, t0, &mut rng),
            CallStep::GiveUp(GiveUp::Attempts)
        );
        assert_eq!(c.attempts(), 3);
        assert_eq!(b.counts().1, 2, "two retries withdrawn");
    }

    #[test]
    fn a_retry_waits_for_another_endpoint_at_most_the_policy_wait_within_the_deadline() {
        let (p, mut b, _, t0) = setup();
        let c = CallRetry::start(&mut b, t0, t0 + 10_000 * MS);
        assert_eq!(c.other_endpoint_until(&p, t0), t0 + 2000 * MS);
        assert_eq!(
            c.other_endpoint_until(&p, t0 + 9000 * MS),
            t0 + 10_000 * MS,
            "never past the deadline"
        );
        let long = CallRetryPolicy {
            other_endpoint_wait: Duration::MAX,
            ..p
        };
        assert_eq!(c.other_endpoint_until(&long, t0), t0 + 10_000 * MS);
    }

    #[test]
    fn a_final_failure_is_not_retried_and_costs_no_budget() {
        let (p, mut b, mut rng, t0) = setup();
        let mut c = CallRetry::start(&mut b, t0, t0 + 1000 * MS);
        c.begin_attempt();
        assert_eq!(
            c.on_failure(&p, false, &mut b, t0, &mut rng),
            CallStep::GiveUp(GiveUp::Final)
        );
        assert_eq!(b.counts(), (1, 0, 0));
    }

    #[test]
    fn no_retry_past_the_deadline_and_none_beyond_the_budget() {
        let (p, mut b, mut rng, t0) = setup();
        let mut c = CallRetry::start(&mut b, t0, t0 + 5 * MS);
        c.begin_attempt();
        assert_eq!(
            c.on_failure(&p, true, &mut b, t0, &mut rng),
            CallStep::GiveUp(GiveUp::Deadline),
            "a 10 ms delay does not fit in 5 ms"
        );
        assert_eq!(b.counts().1, 0, "the deadline is checked before the budget");
        let mut none = RetryBudget::new(RetryBudgetConfig::none());
        let mut c = CallRetry::start(&mut none, t0, t0 + 1000 * MS);
        c.begin_attempt();
        assert_eq!(
            c.on_failure(&p, true, &mut none, t0, &mut rng),
            CallStep::GiveUp(GiveUp::Budget)
        );
        assert_eq!(c.remaining(t0 + 2000 * MS), Duration::ZERO);
    }
}
