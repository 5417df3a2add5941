//! [`ProbeThrottle`]: when a directory may ask its resolvers to retry their
//! unresolved metadata now, on behalf of callers waiting on it. Sans-IO: the
//! caller passes the time and the interval in force (read live from the
//! configuration), and the throttle says yes at most once per interval,
//! whatever the number of callers asking.
//!
//! Waiting callers ask every interval while they wait, so a directory whose
//! metadata service heals serves again within one interval plus one fetch,
//! however far its retry backoff has grown, and a thousand waiters cost the
//! resolver one early fetch per interval.

use std::time::{Duration, Instant};

/// Demand-driven probes of one directory: at most one per interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeThrottle {
    /// When the last probe was allowed.
    last: Option<Instant>,
    /// Probes allowed so far.
    allowed: u64,
    /// Asks refused because a probe ran less than an interval ago.
    refused: u64,
}

impl ProbeThrottle {
    /// A throttle that allows its first probe at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// A caller waits at `now`: true when a probe may run (and it is then
    /// recorded), false when the last one ran less than `interval` ago. A
    /// clock that went backwards counts as no time passed.
    pub fn ask(&mut self, now: Instant, interval: Duration) -> bool {
        let due = match self.last {
            None => true,
            Some(last) => now.saturating_duration_since(last) >= interval,
        };
        if due {
            self.last = Some(now);
            self.allowed = self.allowed.saturating_add(1);
        } else {
            self.refused = self.refused.saturating_add(1);
        }
        due
    }

    /// When the next probe may run, given `interval` (`None`: at once).
    pub fn next_at(&self, interval: Duration) -> Option<Instant> {
        self.last.and_then(|l| l.checked_add(interval))
    }

    /// Probes allowed so far.
    pub fn allowed(&self) -> u64 {
        self.allowed
    }

    /// Asks refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn first_ask_probes_then_one_per_interval_whatever_the_askers() {
        let t0 = Instant::now();
        let mut t = ProbeThrottle::new();
        assert_eq!(t.next_at(SEC), None);
        assert!(t.ask(t0, SEC), "the first waiter probes at once");
        // A thousand waiters within the same interval: no more probes.
        let mut allowed = 0;
        for i in 0..1000u64 {
            let now = t0 + Duration::from_micros(i * 999);
            allowed += u64::from(t.ask(now, SEC));
        }
        assert_eq!(allowed, 0);
        assert_eq!(t.next_at(SEC), Some(t0 + SEC));
        assert!(t.ask(t0 + SEC, SEC), "due exactly one interval later");
        assert!(!t.ask(t0 + SEC + Duration::from_millis(999), SEC));
        assert!(t.ask(t0 + SEC * 2, SEC));
        assert_eq!((t.allowed(), t.refused()), (3, 1001));
    }

    #[test]
    fn a_shorter_interval_applies_from_the_next_ask() {
        let t0 = Instant::now();
        let mut t = ProbeThrottle::new();
        assert!(t.ask(t0, SEC * 10));
        assert!(!t.ask(t0 + SEC, SEC * 10));
        // The interval is read live: lowered to 1 s, the next ask probes.
        assert!(t.ask(t0 + SEC, SEC));
    }

    #[test]
    fn a_clock_going_backwards_never_probes_early() {
        let t0 = Instant::now() + SEC * 5;
        let mut t = ProbeThrottle::new();
        assert!(t.ask(t0, SEC));
        assert!(!t.ask(t0 - SEC * 3, SEC));
        assert!(t.ask(t0 + SEC, SEC));
    }
}
