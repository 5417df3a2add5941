//! [`EndpointStats`]: what a balancer knows of one endpoint, lock-free:
//! calls in flight, a peak-EWMA latency estimate, consecutive failures, a
//! failure rate over a short window, and the ejection state.
//!
//! Time is kept in milliseconds since the statistics were created (their
//! `base`), from the `now` each caller passes in: nothing here reads a
//! clock. Concurrent updates of the latency estimate may lose a sample to a
//! race (last writer wins); counters never lose one.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::PeakEwma;

/// Buckets of the failure-rate window (each a quarter of the window).
const BUCKETS: usize = 4;
/// Tries of a contended bucket update before the sample is dropped.
const CAS_TRIES: usize = 16;

/// Balancing statistics of one endpoint (see the module docs).
///
/// Laid out for the pick: what a P2C comparison and the ejection check read
/// (in flight, the estimate, the ejection end, the base offset: 32 bytes)
/// come first, so a candidate costs one cache line of statistics most of
/// the time. Not line-aligned: that would add ~96 B per leased endpoint.
#[derive(Debug)]
#[repr(C)]
pub struct EndpointStats {
    in_flight: AtomicU32,
    consecutive: AtomicU32,
    /// `stamp_ms (u32, wrapping) << 32 | f32 bits of the estimate in ns`.
    ewma: AtomicU64,
    /// Ejected while `now_ms < ejected_until`; 0: never ejected.
    ejected_until: AtomicU64,
    /// `base` in signed ms from a process-wide anchor (the first statistics'
    /// base): two statistics' stamps align by integer subtraction.
    base_ms: i64,
    base: Instant,
    /// Ejections in a row (the exponent of the ejection time).
    ejections: AtomicU32,
    /// Failure-rate window: `seq (u32) << 32 | ok (u16) << 16 | failed (u16)`.
    window: [AtomicU64; BUCKETS],
}

/// A plain copy of an endpoint's statistics at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatsView {
    /// Calls in flight (leases not dropped).
    pub in_flight: u32,
    /// Failures since the last success.
    pub consecutive_failures: u32,
    /// The latency estimate, decayed to the moment asked.
    pub latency: Duration,
    /// Whether the endpoint is ejected at that moment.
    pub ejected: bool,
    /// Ejections in a row so far.
    pub ejections: u32,
}

/// Whole milliseconds of `d`, saturating (no 128-bit division).
#[inline]
pub(crate) fn millis(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(d.subsec_millis()))
}

/// Milliseconds of `d` as a float.
#[inline]
fn millis_f64(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The process-wide anchor of [`EndpointStats::base_ms`] (any instant
/// serves: only differences are used, and they are signed).
static ANCHOR: OnceLock<Instant> = OnceLock::new();

/// `at` in signed ms from the anchor.
fn anchor_ms(at: Instant) -> i64 {
    let anchor = *ANCHOR.get_or_init(|| at);
    match at.checked_duration_since(anchor) {
        Some(d) => i64::try_from(millis(d)).unwrap_or(i64::MAX),
        None => -i64::try_from(millis(anchor.saturating_duration_since(at))).unwrap_or(i64::MAX),
    }
}

/// `exp(x)` for `x` in `[-100, 100]` (clamped), within ~2e-7 relative: `2^k`
/// from the exponent bits times a degree-6 polynomial of `2^f`, `f` in
/// `[-0.5, 0.5]`. A pick compares two decayed costs; libm's `exp` costs several
/// times this.
#[inline]
pub(crate) fn fast_exp(x: f64) -> f64 {
    let y = x.clamp(-100.0, 100.0) * std::f64::consts::LOG2_E;
    let k = y.round();
    let f = y - k;
    // 2^f = e^(f ln 2), Taylor to degree 6 (error < 2e-7 on [-0.5, 0.5]).
    let t = f * std::f64::consts::LN_2;
    let p = 1.0
        + t * (1.0
            + t * (0.5
                + t * (1.0 / 6.0 + t * (1.0 / 24.0 + t * (1.0 / 120.0 + t * (1.0 / 720.0))))));
    // k in [-145, 145]: a normal exponent.
    let bits = ((k as i64 + 1023) as u64) << 52;
    p * f64::from_bits(bits)
}

fn pack_ewma(stamp_ms: u64, est_ns: f32) -> u64 {
    ((stamp_ms as u32 as u64) << 32) | u64::from(est_ns.to_bits())
}

fn unpack_ewma(v: u64) -> (u32, f32) {
    ((v >> 32) as u32, f32::from_bits(v as u32))
}

impl EndpointStats {
    /// Fresh statistics at `now`, the estimate at `default_rtt`.
    pub fn new(now: Instant, default_rtt: Duration) -> Self {
        Self {
            base: now,
            base_ms: anchor_ms(now),
            in_flight: AtomicU32::new(0),
            consecutive: AtomicU32::new(0),
            ewma: AtomicU64::new(pack_ewma(0, (default_rtt.as_secs_f64() * 1e9) as f32)),
            ejected_until: AtomicU64::new(0),
            ejections: AtomicU32::new(0),
            window: Default::default(),
        }
    }

    /// Milliseconds from `base` to `now` (0 before it).
    #[inline]
    pub(crate) fn ms(&self, now: Instant) -> u64 {
        millis(now.saturating_duration_since(self.base))
    }

    /// Calls in flight.
    #[inline]
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn enter(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// Pairs with one earlier [`EndpointStats::enter`] (a lease's drop).
    pub(crate) fn leave(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// The latency estimate in ns at `now`: the stored estimate decayed by
    /// `exp(-elapsed / decay)` since it was last updated (decay on read,
    /// nothing written).
    #[inline]
    pub fn latency_ns(&self, now: Instant, cfg: &PeakEwma) -> f64 {
        let (stamp, est) = unpack_ewma(self.ewma.load(Ordering::Relaxed));
        let elapsed = (self.ms(now) as u32).wrapping_sub(stamp);
        let decay_ms = millis_f64(cfg.decay);
        if elapsed == 0 || decay_ms <= 0.0 {
            return f64::from(est);
        }
        f64::from(est) * (-f64::from(elapsed) / decay_ms).exp()
    }

    /// Whether this endpoint's peak-EWMA cost per unit of weight is at most
    /// `other`'s: `est * (in flight + 1) / weight`, this endpoint's weight
    /// `wa`, `other`'s `wb` (both > 0; compared cross-multiplied). Both
    /// estimates decay by the same factor up to any common `now`, so the
    /// comparison needs no clock: one side is scaled by
    /// `exp(-(stamp_other - stamp_self) / decay)` (a cheap `exp`, none when
    /// the stamps are equal).
    #[inline]
    pub fn cheaper_or_equal(
        &self,
        wa: u32,
        other: &EndpointStats,
        wb: u32,
        cfg: &PeakEwma,
    ) -> bool {
        let (sa, ea) = unpack_ewma(self.ewma.load(Ordering::Relaxed));
        let (sb, eb) = unpack_ewma(other.ewma.load(Ordering::Relaxed));
        let a = f64::from(ea) * f64::from(self.in_flight().saturating_add(1)) * f64::from(wb);
        let b = f64::from(eb) * f64::from(other.in_flight().saturating_add(1)) * f64::from(wa);
        // Stamps are ms since each statistics' own base: align them.
        let gap = (i64::from(sa) + self.base_ms) - (i64::from(sb) + other.base_ms);
        if gap == 0 {
            return a <= b;
        }
        let decay_ms = millis_f64(cfg.decay).max(1.0);
        // Decayed to a common time: a * exp(gap / decay) vs b, where gap > 0
        // means `self` was updated later (decayed less).
        a * fast_exp(gap as f64 / decay_ms) <= b
    }

    /// The peak-EWMA cost at `now`: estimate * (in flight + 1).
    #[inline]
    pub fn cost(&self, now: Instant, cfg: &PeakEwma) -> f64 {
        self.latency_ns(now, cfg) * f64::from(self.in_flight().saturating_add(1))
    }

    /// Feeds one observed latency at `now`: a sample above the estimate
    /// replaces it at once (the peak); otherwise the estimate moves toward
    /// it with weight `1 - exp(-elapsed / decay)`.
    pub fn observe(&self, latency: Duration, now: Instant, cfg: &PeakEwma) {
        let rtt = latency.as_secs_f64() * 1e9;
        let now_ms = self.ms(now);
        let (stamp, est) = unpack_ewma(self.ewma.load(Ordering::Relaxed));
        let est = f64::from(est);
        let next = if rtt > est {
            rtt
        } else {
            let elapsed = f64::from((now_ms as u32).wrapping_sub(stamp));
            let decay_ms = millis_f64(cfg.decay).max(1.0);
            let w = (-elapsed / decay_ms).exp();
            est * w + rtt * (1.0 - w)
        };
        self.ewma
            .store(pack_ewma(now_ms, next as f32), Ordering::Relaxed);
    }

    /// Records a success: the failure run ends; counted in the window.
    pub(crate) fn record_success(&self, now: Instant, window: Duration) {
        self.consecutive.store(0, Ordering::Relaxed);
        self.count(now, window, true);
    }

    /// Records a failure; returns the failures in a row now.
    pub(crate) fn record_failure(&self, now: Instant, window: Duration) -> u32 {
        self.count(now, window, false);
        self.consecutive
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1)
    }

    fn seq(&self, now: Instant, window: Duration) -> u32 {
        let width = (millis(window) / BUCKETS as u64).max(1);
        (self.ms(now) / width) as u32
    }

    fn count(&self, now: Instant, window: Duration, ok: bool) {
        let seq = self.seq(now, window);
        let slot = &self.window[seq as usize % BUCKETS];
        for _ in 0..CAS_TRIES {
            let cur = slot.load(Ordering::Relaxed);
            let (s, mut good, mut bad) = ((cur >> 32) as u32, (cur >> 16) as u16, cur as u16);
            if s != seq {
                (good, bad) = (0, 0);
            }
            if ok {
                good = good.saturating_add(1);
            } else {
                bad = bad.saturating_add(1);
            }
            let next = (u64::from(seq) << 32) | (u64::from(good) << 16) | u64::from(bad);
            if slot
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Successes and failures counted over the window ending at `now`.
    pub fn window_counts(&self, now: Instant, window: Duration) -> (u32, u32) {
        let seq = self.seq(now, window);
        let (mut good, mut bad) = (0u32, 0u32);
        for slot in &self.window {
            let v = slot.load(Ordering::Relaxed);
            let s = (v >> 32) as u32;
            if seq.wrapping_sub(s) < BUCKETS as u32 {
                good = good.saturating_add(u32::from((v >> 16) as u16));
                bad = bad.saturating_add(u32::from(v as u16));
            }
        }
        (good, bad)
    }

    /// Whether the endpoint is ejected at `now`.
    #[inline]
    pub fn is_ejected(&self, now: Instant) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && self.ms(now) < until
    }

    /// Ejects the endpoint at `now` for `base * 2^(k-1)` (capped at
    /// `max`), `k` the ejections in a row: the run starts over when the
    /// previous ejection ended more than `max` ago. Resets the failure run
    /// and the window. Returns the ejection time, or `None` when the
    /// endpoint is ejected already.
    pub(crate) fn eject(&self, now: Instant, base: Duration, max: Duration) -> Option<Duration> {
        let now_ms = self.ms(now);
        let prev = self.ejected_until.load(Ordering::Relaxed);
        if prev != 0 && now_ms < prev {
            return None;
        }
        let max_ms = millis(max);
        let k = if prev == 0 || now_ms.saturating_sub(prev) > max_ms {
            1
        } else {
            self.ejections.load(Ordering::Relaxed).saturating_add(1)
        };
        self.ejections.store(k, Ordering::Relaxed);
        let factor = 1u32.checked_shl(k.saturating_sub(1)).unwrap_or(u32::MAX);
        let time = base.saturating_mul(factor).min(max);
        let until = now_ms.saturating_add(millis(time)).max(1);
        self.ejected_until.store(until, Ordering::Relaxed);
        self.consecutive.store(0, Ordering::Relaxed);
        for slot in &self.window {
            slot.store(0, Ordering::Relaxed);
        }
        Some(time)
    }

    /// A plain copy of the statistics at `now`.
    pub fn view(&self, now: Instant, cfg: &PeakEwma) -> StatsView {
        StatsView {
            in_flight: self.in_flight(),
            consecutive_failures: self.consecutive.load(Ordering::Relaxed),
            latency: Duration::try_from_secs_f64(self.latency_ns(now, cfg).max(0.0) / 1e9)
                .unwrap_or(Duration::MAX),
            ejected: self.is_ejected(now),
            ejections: self.ejections.load(Ordering::Relaxed),
        }
    }
}
