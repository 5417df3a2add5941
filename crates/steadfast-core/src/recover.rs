//! The one retry primitive of the engine, sans-IO: every retry loop (metadata
//! resolution, registry watch, export and registration, etcd watch resume,
//! keepalive) keeps a [`Recover`] per key and asks it what to do next.
//!
//! - the error's [`ErrorClass`] decides retry or final (classification is
//!   the error's business, not the schedule's);
//! - the [`BackoffPolicy`] decides how long to wait (capped exponential,
//!   jittered, randomness an input);
//! - a success resets the schedule;
//! - while a source is down, an optional probe cadence lets a cheap check
//!   run more often than the (grown) backoff, so recovery is noticed fast
//!   without the expensive operation stampeding;
//! - [`RecoverMemory`] parks the schedule of a key that went away, so a key
//!   that flaps back within a window resumes where it was instead of
//!   starting over.
//!
//! Time is an input (`now`), so every schedule replays deterministically.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::backoff::{BackoffError, BackoffPolicy};
use crate::error::ErrorClass;

/// How one retry loop recovers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecoverPolicy {
    /// Delays between attempts.
    pub backoff: BackoffPolicy,
    /// Attempts before giving up (`None`: never, the self-healing default).
    pub max_attempts: Option<u32>,
    /// While the source is down, run a cheap probe this often (`None`: no
    /// probe; the backoff alone decides).
    pub probe_interval: Option<Duration>,
}

impl RecoverPolicy {
    /// Unlimited retries on `backoff`, no probe.
    pub fn new(backoff: BackoffPolicy) -> Self {
        Self {
            backoff,
            max_attempts: None,
            probe_interval: None,
        }
    }

    /// Gives up after `attempts` failures (`None` or 0: never).
    pub fn with_max_attempts(mut self, attempts: Option<u32>) -> Self {
        self.max_attempts = attempts.filter(|a| *a > 0);
        self
    }

    /// Probes a down source every `interval`.
    pub fn with_probe(mut self, interval: Duration) -> Self {
        self.probe_interval = Some(interval);
        self
    }

    /// Checks the backoff (see [`BackoffPolicy::validate`]) and that a probe
    /// interval, if any, is not zero.
    pub fn validate(&self) -> Result<(), BackoffError> {
        self.backoff.validate()?;
        if self.probe_interval.is_some_and(|p| p.is_zero()) {
            return Err(BackoffError::ZeroProbe);
        }
        Ok(())
    }

    /// How long a parked schedule is remembered: twice the backoff cap.
    pub fn memory_window(&self) -> Duration {
        self.backoff.cap().saturating_mul(2)
    }
}

impl Default for RecoverPolicy {
    fn default() -> Self {
        Self::new(BackoffPolicy::default())
    }
}

/// What to do after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Try again after this delay (the attempt is `failures` 0-based).
    After(Duration),
    /// Stop: the error is final, or the attempts are used up.
    GiveUp,
}

/// The retry state of one key: consecutive failures, since when the source
/// is down, and when the next attempt is due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recover {
    failures: u32,
    down_since: Option<Instant>,
    due: Option<Instant>,
    gave_up: bool,
}

impl Recover {
    /// A fresh schedule: the next failure waits the initial delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a failure of class `class` at `now` and says what to do.
    pub fn on_failure(
        &mut self,
        policy: &RecoverPolicy,
        class: ErrorClass,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Retry {
        let attempt = self.failures;
        self.failures = self.failures.saturating_add(1);
        self.down_since.get_or_insert(now);
        let exhausted = policy.max_attempts.is_some_and(|m| self.failures >= m);
        if class == ErrorClass::Final || exhausted {
            self.gave_up = true;
            self.due = None;
            return Retry::GiveUp;
        }
        let delay = policy.backoff.delay(attempt, class, rng);
        self.due = now.checked_add(delay);
        Retry::After(delay)
    }

    /// Records a success: the schedule starts over.
    pub fn on_success(&mut self) {
        *self = Self::default();
    }

    /// A probe found the source answering again: the next attempt may run
    /// at once, and its failure (if any) continues the grown schedule.
    pub fn on_probe_ok(&mut self) {
        self.due = None;
    }

    /// Consecutive failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When the first of the current run of failures happened.
    pub fn down_since(&self) -> Option<Instant> {
        self.down_since
    }

    /// When the next attempt is due (`None`: now, or never after giving up).
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// How long from `now` until the next attempt may run.
    pub fn wait(&self, now: Instant) -> Duration {
        self.due
            .map(|d| d.saturating_duration_since(now))
            .unwrap_or_default()
    }

    /// Whether the schedule gave up.
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// While down, the delay to the next cheap probe, if the policy has a
    /// probe and it comes before the next attempt; jittered by up to the
    /// backoff's jitter fraction so a fleet does not probe in step.
    pub fn probe_delay(
        &self,
        policy: &RecoverPolicy,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Option<Duration> {
        let interval = policy.probe_interval?;
        if self.down_since.is_none() || self.gave_up {
            return None;
        }
        let jitter = policy.backoff.jitter;
        let extra = if jitter.is_finite() && jitter > 0.0 {
            rng.gen_range(0.0..=jitter.min(1.0))
        } else {
            0.0
        };
        let probe =
            Duration::try_from_secs_f64(interval.as_secs_f64() * (1.0 + extra)).unwrap_or(interval);
        (probe < self.wait(now)).then_some(probe)
    }
}

/// Schedules of keys that went away, remembered for a window so a key that
/// comes back resumes its schedule (a flapping instance does not reset its
/// backoff). Bounded: entries older than the window are dropped on every
/// call.
#[derive(Debug)]
pub struct RecoverMemory<K> {
    parked: HashMap<K, (Recover, Instant)>,
    window: Duration,
}

impl<K: Hash + Eq> RecoverMemory<K> {
    /// A memory keeping schedules for `window` after they were parked.
    pub fn new(window: Duration) -> Self {
        Self {
            parked: HashMap::new(),
            window,
        }
    }

    /// Parks `state` of `key` at `now` (a fresh schedule is not worth keeping).
    pub fn park(&mut self, key: K, state: Recover, now: Instant) {
        self.expire(now);
        if state != Recover::default() {
            self.parked.insert(key, (state, now));
        }
    }

    /// Takes the schedule of `key` back if it was parked within the window.
    pub fn recall(&mut self, key: &K, now: Instant) -> Option<Recover> {
        self.expire(now);
        self.parked.remove(key).map(|(state, _)| state)
    }

    /// Drops every entry parked longer than the window ago.
    pub fn expire(&mut self, now: Instant) {
        let window = self.window;
        self.parked
            .retain(|_, (_, at)| now.saturating_duration_since(*at) <= window);
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.parked.clear();
    }

    /// Number of parked schedules.
    pub fn len(&self) -> usize {
        self.parked.len()
    }

    /// Whether nothing is parked.
    pub fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn policy() -> RecoverPolicy {
        RecoverPolicy::new(BackoffPolicy {
            jitter: 0.0,
            ..BackoffPolicy::default()
        })
    }

    #[test]
    fn grows_caps_and_resets_on_success() {
        let (p, mut rng, t0) = (policy(), StdRng::seed_from_u64(1), Instant::now());
        let mut r = Recover::new();
        let delays: Vec<Retry> = (0..7)
            .map(|_| r.on_failure(&p, ErrorClass::Transient, t0, &mut rng))
            .collect();
        let secs = |s| Retry::After(Duration::from_secs(s));
        assert_eq!(
            delays,
            vec![
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(16),
                secs(30),
                secs(30)
            ]
        );
        assert_eq!(r.failures(), 7);
        assert_eq!(r.down_since(), Some(t0));
        assert_eq!(r.due(), Some(t0 + Duration::from_secs(30)));
        r.on_success();
        assert_eq!(r, Recover::new());
        assert_eq!(
            r.on_failure(&p, ErrorClass::Transient, t0, &mut rng),
            secs(1)
        );
    }

    #[test]
    fn final_errors_and_exhausted_attempts_give_up() {
        let (mut rng, t0) = (StdRng::seed_from_u64(1), Instant::now());
        let mut r = Recover::new();
        assert_eq!(
            r.on_failure(&policy(), ErrorClass::Final, t0, &mut rng),
            Retry::GiveUp
        );
        assert!(r.gave_up());
        let p = policy().with_max_attempts(Some(2));
        let mut r = Recover::new();
        assert!(matches!(
            r.on_failure(&p, ErrorClass::Transient, t0, &mut rng),
            Retry::After(_)
        ));
        assert_eq!(
            r.on_failure(&p, ErrorClass::Transient, t0, &mut rng),
            Retry::GiveUp
        );
    }

    #[test]
    fn probes_run_only_while_down_and_before_the_next_attempt() {
        let p = policy().with_probe(Duration::from_secs(1));
        let (mut rng, t0) = (StdRng::seed_from_u64(1), Instant::now());
        let mut r = Recover::new();
        assert_eq!(r.probe_delay(&p, t0, &mut rng), None, "not down");
        r.on_failure(&p, ErrorClass::Transient, t0, &mut rng); // due in 1 s
        assert_eq!(r.probe_delay(&p, t0, &mut rng), None, "attempt comes first");
        for _ in 0..5 {
            r.on_failure(&p, ErrorClass::Transient, t0, &mut rng);
        }
        assert_eq!(
            r.probe_delay(&p, t0, &mut rng),
            Some(Duration::from_secs(1))
        );
        r.on_probe_ok();
        assert_eq!(r.wait(t0), Duration::ZERO);
        assert_eq!(r.failures(), 6, "the grown schedule continues");
    }

    #[test]
    fn memory_resumes_within_the_window_only() {
        let p = policy();
        let (mut rng, t0) = (StdRng::seed_from_u64(1), Instant::now());
        let mut m = RecoverMemory::new(p.memory_window());
        let mut r = Recover::new();
        r.on_failure(&p, ErrorClass::Transient, t0, &mut rng);
        m.park("a", r, t0);
        m.park("fresh", Recover::new(), t0);
        assert_eq!(m.len(), 1, "a fresh schedule is not kept");
        assert_eq!(m.recall(&"a", t0 + Duration::from_secs(59)), Some(r));
        m.park("a", r, t0);
        assert_eq!(m.recall(&"a", t0 + Duration::from_secs(61)), None);
        assert!(m.is_empty());
    }
}
