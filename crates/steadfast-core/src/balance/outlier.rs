//! Passive outlier detection: [`OutlierPolicy`] says when an endpoint's
//! reported failures eject it and for how long; [`EjectionLedger`] counts a
//! directory's ejected endpoints so that never more than
//! `max_ejection_percent` of it is ejected.
//!
//! An ejected endpoint is routed around, never removed from the set; it
//! comes back by itself when its ejection time ends. The ledger is touched
//! only on ejections (a short mutex, off the pick path); picks read two
//! atomics.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::stats::{millis, EndpointStats, FailureStats};
use super::FailureClass;

/// A failure-rate trigger: eject when, over `window`, at least
/// `min_requests` outcomes were reported and at least `percent` % failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FailureRate {
    /// Failure share that ejects, in percent (1..=100). Default 50.
    pub percent: u8,
    /// Fewest outcomes in the window before the rate counts. Default 20.
    pub min_requests: u32,
    /// Length of the window (counted in 4 buckets). Default 10 s.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for FailureRate {
    fn default() -> Self {
        Self {
            percent: 50,
            min_requests: 20,
            window: Duration::from_secs(10),
        }
    }
}

/// When reported failures eject an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutlierPolicy {
    /// Failures in a row that eject (0: off). Default 5.
    pub consecutive_failures: u32,
    /// The failure-rate trigger (`None`: off). Default `Some(FailureRate::default())`.
    pub failure_rate: Option<FailureRate>,
    /// First ejection time, doubled at each ejection in a row. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub base_ejection_time: Duration,
    /// Longest ejection time; an endpoint readmitted for longer than this
    /// starts its doubling over. Default 300 s.
    #[serde(with = "humantime_serde")]
    pub max_ejection_time: Duration,
    /// Most of a directory's endpoints ejected at once, in percent
    /// (0..=100): ejections past it are refused, and picks ignore ejection
    /// while the ejected share is above it (panic mode). Default 50.
    pub max_ejection_percent: u8,
}

impl Default for OutlierPolicy {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            failure_rate: Some(FailureRate::default()),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 50,
        }
    }
}

/// Why a failure ejected its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A connection-refused or closing failure: at once.
    Immediate,
    /// `consecutive_failures` failures in a row.
    Consecutive,
    /// The failure rate over the window.
    Rate,
}

impl OutlierPolicy {
    /// The window the statistics count outcomes over.
    pub fn window(&self) -> Duration {
        self.failure_rate
            .map_or(Duration::from_secs(10), |r| r.window)
    }

    /// Records a failure of `class` in `stats` at `now`; says whether it
    /// trips a trigger.
    pub fn on_failure(
        &self,
        stats: &EndpointStats,
        class: FailureClass,
        now: Instant,
    ) -> Option<Trigger> {
        let run = stats.record_failure(now, self.window());
        if class.ejects_at_once() {
            return Some(Trigger::Immediate);
        }
        if self.consecutive_failures > 0 && run >= self.consecutive_failures {
            return Some(Trigger::Consecutive);
        }
        let rate = self.failure_rate?;
        let (ok, failed) = stats.window_counts(now, rate.window);
        let total = ok.saturating_add(failed);
        let over = u64::from(failed) * 100 >= u64::from(rate.percent) * u64::from(total);
        (total >= rate.min_requests.max(1) && over).then_some(Trigger::Rate)
    }

    /// Whether `ejected` of `endpoints` is above the maximum share (then
    /// picks ignore ejection).
    #[inline]
    pub fn panics(&self, ejected: usize, endpoints: usize) -> bool {
        ejected > 0
            && ejected as u128 * 100 > u128::from(self.max_ejection_percent) * endpoints as u128
    }

    /// Whether one more ejection keeps `ejected` of `endpoints` within the
    /// maximum share.
    pub fn admits(&self, ejected: usize, endpoints: usize) -> bool {
        (ejected as u128 + 1) * 100 <= u128::from(self.max_ejection_percent) * endpoints as u128
    }
}

/// What an ejection attempt did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ejection {
    /// Ejected for this long.
    Ejected(Duration),
    /// Already ejected: nothing changed.
    Already,
    /// Refused: the directory's ejected share would pass the maximum.
    Refused,
}

/// Counts a directory's ejected endpoints (see the module docs).
#[derive(Debug, Default)]
pub struct EjectionLedger {
    /// The time of the first ejection: times are counted from it.
    base: OnceLock<Instant>,
    count: AtomicUsize,
    /// Earliest end of an ejection counted, in ms since `base` (`u64::MAX`: none).
    next_end: AtomicU64,
    /// The failure records ejected (shared by every record of an
    /// endpoint's incarnation, so a weight change does not lose count).
    entries: Mutex<Vec<(Weak<FailureStats>, u64)>>,
}

impl EjectionLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self {
            base: OnceLock::new(),
            count: AtomicUsize::new(0),
            next_end: AtomicU64::new(u64::MAX),
            entries: Mutex::new(Vec::new()),
        }
    }

    fn ms(&self, now: Instant) -> u64 {
        let base = *self.base.get_or_init(|| now);
        millis(now.saturating_duration_since(base))
    }

    /// Endpoints ejected at `now`. Lock-free; when an ejection has ended it
    /// recounts, unless another thread is at it (then the count is at most
    /// briefly high, which only makes the panic check stricter).
    #[inline]
    pub fn ejected(&self, now: Instant) -> usize {
        let n = self.count.load(Ordering::Acquire);
        if n > 0 && self.ms(now) >= self.next_end.load(Ordering::Acquire) {
            if let Ok(mut entries) = self.entries.try_lock() {
                return self.prune(&mut entries, now);
            }
        }
        n
    }

    fn prune(&self, entries: &mut Vec<(Weak<FailureStats>, u64)>, now: Instant) -> usize {
        let now_ms = self.ms(now);
        entries.retain(|(w, end)| *end > now_ms && w.strong_count() > 0);
        let next = entries.iter().map(|(_, e)| *e).min().unwrap_or(u64::MAX);
        self.next_end.store(next, Ordering::Release);
        self.count.store(entries.len(), Ordering::Release);
        entries.len()
    }

    /// Ejects `stats` at `now` under `policy`, `endpoints` being the
    /// directory's size: refused when it would pass the maximum share.
    pub fn eject(
        &self,
        stats: &EndpointStats,
        now: Instant,
        endpoints: usize,
        policy: &OutlierPolicy,
    ) -> Ejection {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let ejected = self.prune(&mut entries, now);
        let failures = stats.failures_or_init();
        if failures.is_ejected(now) {
            return Ejection::Already;
        }
        if !policy.admits(ejected, endpoints) {
            return Ejection::Refused;
        }
        let Some(time) = failures.eject(now, policy.base_ejection_time, policy.max_ejection_time)
        else {
            return Ejection::Already;
        };
        let end = self.ms(now).saturating_add(millis(time));
        entries.push((Arc::downgrade(failures), end));
        self.prune(&mut entries, now);
        Ejection::Ejected(time)
    }
}
