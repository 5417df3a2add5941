//! [`KeeperMachine`]: the sans-IO decisions of one registration's keepalive.
//!
//! * healthy: a round (lease keepalive + key check) every `period` (TTL/3);
//! * a round finding the lease gone or the key vanished asks for a
//!   re-registration at once;
//! * a round or re-registration that fails goes through [`Recover`]: the
//!   backoff says when this keeper tries again on its own, and it asks the
//!   shared prober to watch etcd ([`KeeperAction::ReportDown`]);
//! * when etcd answers again (the client's shared signal), a failing keeper
//!   retries at a random point within `spread`, however long its backoff
//!   grew, so a fleet of registrations comes back fast but not all at once.
//!
//! Time and randomness are inputs (`now`, a seeded `StdRng`).

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use steadfast_core::{ErrorClass, Recover, RecoverPolicy, Retry, MAX_BACKOFF};

/// Shortest keepalive period, whatever the TTL.
pub const MIN_PERIOD: Duration = Duration::from_millis(200);

/// Shortest retry delay after a failed round, whatever the backoff says (a
/// zero backoff would otherwise retry in a tight loop).
pub const MIN_RETRY: Duration = Duration::from_millis(10);

/// Longest wait the machine ever schedules (a TTL or spread beyond reason
/// is clamped, so no `Instant` arithmetic can overflow): core's one-day
/// limit.
const MAX_WAIT: Duration = MAX_BACKOFF;

/// `now + d`, with `d` clamped to [`MAX_WAIT`].
fn at(now: Instant, d: Duration) -> Instant {
    now.checked_add(d.min(MAX_WAIT)).unwrap_or(now)
}

/// How a keeper keeps its registration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeeperPolicy {
    /// Time between rounds while healthy.
    pub period: Duration,
    /// Retry schedule of failed rounds.
    pub recover: RecoverPolicy,
    /// Window over which failing keepers retry once etcd answers again.
    pub spread: Duration,
}

impl KeeperPolicy {
    /// A round every TTL/3 (at least [`MIN_PERIOD`]), `recover` for
    /// failures, `spread` on recovery.
    pub fn for_ttl(ttl_secs: i64, recover: RecoverPolicy, spread: Duration) -> Self {
        let ttl = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0));
        Self {
            period: (ttl / 3).max(MIN_PERIOD),
            recover,
            spread,
        }
    }
}

/// What one keepalive round found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundOutcome {
    /// The lease lives and the key is there.
    Alive,
    /// etcd says the lease is gone (expired, revoked, wiped store).
    LeaseGone,
    /// The lease lives but the key is gone (deleted behind our back, or it
    /// was attached to another publisher's lease that expired).
    KeyVanished,
    /// etcd could not be asked.
    Failed(ErrorClass),
}

/// Why a registration must be redone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Grant a new lease and put the record with it.
    LeaseGone,
    /// Put the record again under the current lease.
    KeyVanished,
}

/// What the IO shell does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeeperAction {
    /// Sleep until [`KeeperMachine::due`] (or the shared signal).
    Wait,
    /// Run a keepalive round now.
    Round,
    /// Redo the registration now; report its result.
    Reregister(Lost),
    /// Tell the shared prober etcd is not answering, then wait.
    ReportDown,
}

/// The keepalive state of one registration.
#[derive(Debug)]
pub struct KeeperMachine {
    policy: KeeperPolicy,
    recover: Recover,
    due: Instant,
    rng: StdRng,
}

impl KeeperMachine {
    /// A keeper registered at `now`: its first round is one period away.
    pub fn new(policy: KeeperPolicy, now: Instant, rng: StdRng) -> Self {
        Self {
            due: at(now, policy.period),
            policy,
            recover: Recover::new(),
            rng,
        }
    }

    /// When the next round is due.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// Whether the last round or re-registration failed.
    pub fn failing(&self) -> bool {
        self.recover.failures() > 0
    }

    /// Consecutive failures.
    pub fn failures(&self) -> u32 {
        self.recover.failures()
    }

    /// The wake-up fired at `now`.
    pub fn on_wake(&mut self, now: Instant) -> KeeperAction {
        if now >= self.due {
            KeeperAction::Round
        } else {
            KeeperAction::Wait
        }
    }

    /// A round finished at `now` with `outcome`.
    pub fn on_round(&mut self, outcome: RoundOutcome, now: Instant) -> KeeperAction {
        match outcome {
            RoundOutcome::Alive => self.succeeded(now),
            RoundOutcome::LeaseGone => KeeperAction::Reregister(Lost::LeaseGone),
            RoundOutcome::KeyVanished => KeeperAction::Reregister(Lost::KeyVanished),
            RoundOutcome::Failed(class) => self.failed(class, now),
        }
    }

    /// A re-registration finished at `now`.
    pub fn on_reregistered(
        &mut self,
        result: Result<(), ErrorClass>,
        now: Instant,
    ) -> KeeperAction {
        match result {
            Ok(()) => self.succeeded(now),
            Err(class) => self.failed(class, now),
        }
    }

    /// etcd answered again (the shared signal) at `now`: a failing keeper
    /// retries within the spread window, not on its grown backoff.
    pub fn on_answered(&mut self, now: Instant) -> KeeperAction {
        if !self.failing() {
            return KeeperAction::Wait;
        }
        self.recover.on_probe_ok();
        let spread = self.policy.spread.min(MAX_WAIT);
        let f: f64 = self.rng.gen_range(0.0..1.0);
        let offset = Duration::try_from_secs_f64(spread.as_secs_f64() * f).unwrap_or(spread);
        self.due = self.due.min(at(now, offset));
        KeeperAction::Wait
    }

    fn succeeded(&mut self, now: Instant) -> KeeperAction {
        self.recover.on_success();
        self.due = at(now, self.policy.period);
        KeeperAction::Wait
    }

    fn failed(&mut self, class: ErrorClass, now: Instant) -> KeeperAction {
        // A keeper never gives up while its registration stands.
        let class = match class {
            ErrorClass::Final => ErrorClass::Persistent,
            c => c,
        };
        let delay = match self
            .recover
            .on_failure(&self.policy.recover, class, now, &mut self.rng)
        {
            Retry::After(d) => d,
            Retry::GiveUp => self.policy.recover.backoff.cap(),
        };
        self.due = at(now, delay.max(MIN_RETRY));
        KeeperAction::ReportDown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use steadfast_core::BackoffPolicy;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn machine(t0: Instant) -> KeeperMachine {
        let backoff = BackoffPolicy {
            initial: MS(250),
            max: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: 0.0,
        };
        let policy = KeeperPolicy::for_ttl(10, RecoverPolicy::new(backoff), MS(250));
        KeeperMachine::new(policy, t0, StdRng::seed_from_u64(9))
    }

    #[test]
    fn healthy_rounds_every_ttl_third_and_lost_registrations_are_redone_at_once() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        let period = Duration::from_secs(10) / 3;
        assert_eq!(m.due(), t0 + period);
        assert_eq!(m.on_wake(t0 + MS(10)), KeeperAction::Wait, "not due yet");
        let t1 = t0 + period;
        assert_eq!(m.on_wake(t1), KeeperAction::Round);
        assert_eq!(m.on_round(RoundOutcome::Alive, t1), KeeperAction::Wait);
        assert_eq!(m.due(), t1 + period);
        assert_eq!(
            m.on_round(RoundOutcome::LeaseGone, t1),
            KeeperAction::Reregister(Lost::LeaseGone)
        );
        assert_eq!(
            m.on_round(RoundOutcome::KeyVanished, t1),
            KeeperAction::Reregister(Lost::KeyVanished)
        );
        assert_eq!(m.on_reregistered(Ok(()), t1), KeeperAction::Wait);
        assert!(!m.failing());
        // A tiny TTL still waits the minimum period.
        let p = KeeperPolicy::for_ttl(0, RecoverPolicy::default(), MS(1));
        assert_eq!(p.period, MIN_PERIOD);
        let p = KeeperPolicy::for_ttl(-5, RecoverPolicy::default(), MS(1));
        assert_eq!(p.period, MIN_PERIOD);
    }

    #[test]
    fn failures_back_off_report_down_and_etcd_answering_again_retries_within_the_spread() {
        let t0 = Instant::now();
        let mut m = machine(t0);
        let mut t = t0;
        // Eight failed rounds: the backoff grows to its 10 s cap.
        for _ in 0..8 {
            t = m.due();
            assert_eq!(m.on_wake(t), KeeperAction::Round);
            let a = m.on_round(RoundOutcome::Failed(ErrorClass::Transient), t);
            assert_eq!(a, KeeperAction::ReportDown);
        }
        assert_eq!(m.failures(), 8);
        assert_eq!(m.due(), t + Duration::from_secs(10));
        // etcd answers 1 s later: the retry comes within 250 ms, not 9 s.
        let back = t + Duration::from_secs(1);
        assert_eq!(m.on_answered(back), KeeperAction::Wait);
        assert!(
            m.due() >= back && m.due() < back + MS(250),
            "{:?}",
            m.due() - back
        );
        assert_eq!(m.on_wake(m.due()), KeeperAction::Round);
        let a = m.on_round(RoundOutcome::LeaseGone, m.due());
        assert_eq!(a, KeeperAction::Reregister(Lost::LeaseGone));
        // The re-registration fails once more: the grown schedule goes on.
        let a = m.on_reregistered(Err(ErrorClass::Transient), back);
        assert_eq!(a, KeeperAction::ReportDown);
        assert_eq!(m.due(), back + Duration::from_secs(10));
        assert_eq!(m.on_reregistered(Ok(()), back), KeeperAction::Wait);
        assert_eq!(m.due(), back + Duration::from_secs(10) / 3);
        // A healthy keeper ignores the signal.
        let due = m.due();
        m.on_answered(back);
        assert_eq!(m.due(), due);
        // A final error never stops the keeper.
        assert_eq!(
            m.on_round(RoundOutcome::Failed(ErrorClass::Final), back),
            KeeperAction::ReportDown
        );
        assert!(m.due() > back);
    }

    #[test]
    fn a_zero_backoff_never_retries_in_a_tight_loop() {
        let t0 = Instant::now();
        let zero = BackoffPolicy {
            initial: Duration::ZERO,
            max: Duration::ZERO,
            multiplier: f64::NAN,
            jitter: f64::NAN,
        };
        let policy = KeeperPolicy::for_ttl(10, RecoverPolicy::new(zero), Duration::ZERO);
        let mut m = KeeperMachine::new(policy, t0, StdRng::seed_from_u64(1));
        for _ in 0..5 {
            m.on_round(RoundOutcome::Failed(ErrorClass::Transient), t0);
            assert!(m.due() >= t0 + MIN_RETRY, "{:?}", m.due() - t0);
        }
    }

    #[test]
    fn a_fleet_answering_again_is_spread_over_the_window() {
        let t0 = Instant::now();
        let mut dues: Vec<Duration> = (0..200)
            .map(|seed| {
                let mut m = machine(t0);
                m.rng = StdRng::seed_from_u64(seed);
                m.on_round(RoundOutcome::Failed(ErrorClass::Transient), t0);
                m.on_answered(t0);
                m.due() - t0
            })
            .collect();
        dues.sort();
        assert!(dues.iter().all(|d| *d < MS(250)));
        // Spread: no 25 ms slice holds more than a quarter of the fleet.
        for w in 0..10u64 {
            let n = dues
                .iter()
                .filter(|d| **d >= MS(25 * w) && **d < MS(25 * (w + 1)))
                .count();
            assert!(n < 50, "slice {w} holds {n}");
        }
    }
}
