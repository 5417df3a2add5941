//! [`EndpointStats`]: what a balancer knows of one endpoint, lock-free and
//! inline in its [`ServiceUrl`] (32 bytes, no allocation of its own): calls
//! in flight, a peak-EWMA latency estimate and, from the endpoint's first
//! reported failure on, its [`FailureStats`] (failures in a row, a
//! failure-rate window, the ejection state), shared by every record of the
//! same incarnation.
//!
//! Time is kept in milliseconds since a process-wide anchor (the first
//! `now` any statistics saw), from the `now` each caller passes in: nothing
//! here reads a clock. Concurrent updates of the latency estimate may lose a
//! sample to a race (last writer wins); counters never lose one.
//!
//! # Carry-over
//! A directory that replaces a URL by a new record of the same instance id
//! and incarnation (a weight or metadata change, a rebuild) calls
//! [`carry`]: the new URL takes the estimate, shares the failure record,
//! and takes over the calls in flight. The old URL is *sealed* (a high bit
//! of its in-flight word) and forwards to the new one, so a lease taken on
//! it before the carry leaves, and reports its outcome, on the new record:
//! nothing is counted twice or lost, whichever side of the carry a lease
//! starts or ends on.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use once_cell::race::OnceBox;

use super::PeakEwma;
use crate::url::Endpoint;

/// Buckets of the failure-rate window (each a quarter of the window).
const BUCKETS: usize = 4;
/// Tries of a contended bucket update before the sample is dropped.
const CAS_TRIES: usize = 16;
/// The in-flight word's seal: the statistics were carried over to the
/// record this one forwards to.
const SEALED: u32 = 1 << 30;
/// A sealed word: the seal plus a margin, so that the +1 / -1 of leases
/// racing the seal (each undone at once) never reach the seal bit.
const SEALED_WORD: u32 = SEALED | (1 << 29);
/// `ejected_until` of an endpoint never ejected.
const NEVER: i64 = i64::MIN;

/// Balancing statistics of one endpoint, inline in its URL (see the module
/// docs). What a pick reads (in flight and the estimate) shares the URL's
/// first cache line with its reference count.
pub struct EndpointStats {
    /// Calls in flight (leases not dropped); [`SEALED_WORD`] (plus or
    /// minus stragglers) once carried over.
    in_flight: AtomicU32,
    /// `stamp_ms (u32, wrapping) << 32 | f32 bits of the estimate in ns`;
    /// 0: no outcome yet (the estimate is the configured default).
    ewma: AtomicU64,
    /// Failures and ejection, from the first reported failure on.
    failures: OnceBox<Arc<FailureStats>>,
    /// Where a sealed record's leases report (set once, before the seal;
    /// allocated only then, and dropping an unset one costs nothing).
    forward: OnceBox<Endpoint>,
}

/// What an endpoint that failed keeps: failures in a row, the failure-rate
/// window, and its ejection (shared by every record of its incarnation, and
/// what the directory's ejection ledger follows).
#[derive(Debug)]
pub struct FailureStats {
    consecutive: AtomicU32,
    /// Ejections in a row (the exponent of the ejection time).
    ejections: AtomicU32,
    /// Ejected while `now_ms < ejected_until`; [`NEVER`]: never ejected.
    ejected_until: AtomicI64,
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

/// The process-wide anchor of every statistics' times (any instant serves:
/// only differences are used, and they are signed).
static ANCHOR: OnceLock<Instant> = OnceLock::new();

/// `at` in signed whole ms from the anchor, rounded down on both sides of
/// it (so that differences of stamps never depend on which side of the
/// anchor the instants fall).
#[inline]
pub(crate) fn stamp(at: Instant) -> i64 {
    let anchor = *ANCHOR.get_or_init(|| at);
    match at.checked_duration_since(anchor) {
        Some(d) => i64::try_from(millis(d)).unwrap_or(i64::MAX),
        None => {
            let d = anchor.saturating_duration_since(at);
            let ms = d.as_nanos().div_ceil(1_000_000);
            i64::try_from(ms).map_or(i64::MIN, |m| -m)
        }
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

/// The estimate word of `est_ns` at `stamp_ms` (never 0: that means none).
#[inline]
fn pack_ewma(stamp_ms: i64, est_ns: f64) -> u64 {
    let est = (est_ns.max(1.0) as f32).to_bits();
    ((stamp_ms as u32 as u64) << 32) | u64::from(est)
}

#[inline]
fn unpack_ewma(v: u64) -> (u32, f32) {
    ((v >> 32) as u32, f32::from_bits(v as u32))
}

/// The default estimate, in ns.
#[inline]
fn default_ns(cfg: &PeakEwma) -> f64 {
    cfg.default_rtt.as_secs_f64() * 1e9
}

impl Default for EndpointStats {
    fn default() -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            ewma: AtomicU64::new(0),
            failures: OnceBox::new(),
            forward: OnceBox::new(),
        }
    }
}

impl std::fmt::Debug for EndpointStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointStats")
            .field("in_flight", &self.in_flight())
            .field("sealed", &self.is_sealed())
            .field("ewma", &unpack_ewma(self.ewma.load(Ordering::Relaxed)))
            .field("failures", &self.failures.get())
            .finish()
    }
}

impl EndpointStats {
    /// A copy for a copied URL: the estimate and the failure record, no
    /// call in flight, not forwarding.
    pub(crate) fn copied(&self) -> Self {
        let copy = Self::default();
        copy.ewma
            .store(self.ewma.load(Ordering::Relaxed), Ordering::Relaxed);
        if let Some(f) = self.failures.get() {
            let _ = copy.failures.set(Box::new(f.clone()));
        }
        copy
    }

    /// Calls in flight on this record (0 once sealed: they moved on with
    /// the carry).
    #[inline]
    pub fn in_flight(&self) -> u32 {
        let v = self.in_flight.load(Ordering::Relaxed);
        if v & SEALED == 0 {
            v
        } else {
            0
        }
    }

    /// Whether the statistics were carried over to a newer record.
    pub fn is_sealed(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) & SEALED != 0
    }

    /// Whether a newer record of the endpoint would take anything over
    /// (something was recorded, and nothing was carried away yet).
    #[inline]
    pub(crate) fn carries(&self) -> bool {
        !self.is_sealed() && self.is_used()
    }

    /// Whether anything was ever recorded (an outcome, a failure, a call).
    fn is_used(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) != 0
            || self.ewma.load(Ordering::Relaxed) != 0
            || self.failures.get().is_some()
    }

    /// The failure record, if the endpoint ever failed.
    pub fn failures(&self) -> Option<&Arc<FailureStats>> {
        self.failures.get()
    }

    pub(crate) fn failures_or_init(&self) -> &Arc<FailureStats> {
        self.failures
            .get_or_init(|| Box::new(Arc::new(FailureStats::new())))
    }

    /// One more call in flight on this record or, once sealed, on the
    /// record it forwards to.
    #[inline]
    pub(crate) fn enter(&self) {
        if !self.try_enter() {
            self.along_forward(Self::try_enter);
        }
    }

    /// Runs `step` on the records this one forwards to, newest last, until
    /// one takes it (chains are as long as the carries made while a lease
    /// was out).
    #[cold]
    fn along_forward(&self, step: impl Fn(&EndpointStats) -> bool) {
        let mut next = self.forward.get();
        while let Some(url) = next {
            if step(url.stats()) {
                return;
            }
            next = url.stats().forward.get();
        }
    }

    #[inline]
    fn try_enter(&self) -> bool {
        let was = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if was & SEALED == 0 {
            return true;
        }
        // Sealed: the count moved on; this straggler's increment is undone.
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// Pairs with one earlier [`EndpointStats::enter`] (a lease's drop): on
    /// this record, or where its calls were carried.
    #[inline]
    pub(crate) fn leave(&self) {
        if !self.try_leave() {
            self.along_forward(Self::try_leave);
        }
    }

    #[inline]
    fn try_leave(&self) -> bool {
        let was = self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if was & SEALED == 0 && was > 0 {
            return true;
        }
        // Sealed (the count moved on), or nothing to leave (never for a
        // paired leave): undone.
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        was == 0
    }

    /// Runs `f` on the statistics outcomes go to: these, or (once sealed)
    /// the newest record's they were carried to.
    pub(crate) fn with_live<R>(&self, f: impl FnOnce(&EndpointStats) -> R) -> R {
        if !self.is_sealed() {
            return f(self);
        }
        let Some(mut url) = self.forward.get() else {
            return f(self);
        };
        // Bounded by the records carried while one lease was out.
        while url.stats().is_sealed() {
            match url.stats().forward.get() {
                Some(next) => url = next,
                None => break,
            }
        }
        f(url.stats())
    }

    /// Whether a latency sample was ever recorded.
    pub fn has_estimate(&self) -> bool {
        self.ewma.load(Ordering::Relaxed) != 0
    }

    /// The latency estimate in ns at `now`: the stored estimate decayed by
    /// `exp(-elapsed / decay)` since it was last updated (decay on read,
    /// nothing written); the default when nothing was recorded.
    #[inline]
    pub fn latency_ns(&self, now: Instant, cfg: &PeakEwma) -> f64 {
        let word = self.ewma.load(Ordering::Relaxed);
        if word == 0 {
            return default_ns(cfg);
        }
        let (at, est) = unpack_ewma(word);
        let elapsed = (stamp(now) as u32).wrapping_sub(at);
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
    /// the stamps are equal). `None` when either has no estimate yet (its
    /// default does not decay: compare costs at a given time instead).
    #[inline]
    pub fn cheaper_or_equal(
        &self,
        wa: u32,
        other: &EndpointStats,
        wb: u32,
        cfg: &PeakEwma,
    ) -> Option<bool> {
        let (wa_word, wb_word) = (
            self.ewma.load(Ordering::Relaxed),
            other.ewma.load(Ordering::Relaxed),
        );
        if wa_word == 0 || wb_word == 0 {
            return None;
        }
        let (sa, ea) = unpack_ewma(wa_word);
        let (sb, eb) = unpack_ewma(wb_word);
        let a = f64::from(ea) * f64::from(self.in_flight().saturating_add(1)) * f64::from(wb);
        let b = f64::from(eb) * f64::from(other.in_flight().saturating_add(1)) * f64::from(wa);
        let gap = sa.wrapping_sub(sb) as i32;
        if gap == 0 {
            return Some(a <= b);
        }
        let decay_ms = millis_f64(cfg.decay).max(1.0);
        // Decayed to a common time: a * exp(gap / decay) vs b, where gap > 0
        // means `self` was updated later (decayed less).
        Some(a * fast_exp(f64::from(gap) / decay_ms) <= b)
    }

    /// The peak-EWMA cost at `now`: estimate * (in flight + 1).
    #[inline]
    pub fn cost(&self, now: Instant, cfg: &PeakEwma) -> f64 {
        self.latency_ns(now, cfg) * f64::from(self.in_flight().saturating_add(1))
    }

    /// Feeds one observed latency at `now`: a sample above the estimate
    /// replaces it at once (the peak); otherwise the estimate moves toward
    /// it with weight `1 - exp(-elapsed / decay)` (the first sample moves
    /// from the default estimate).
    pub fn observe(&self, latency: Duration, now: Instant, cfg: &PeakEwma) {
        let rtt = latency.as_secs_f64() * 1e9;
        let now_ms = stamp(now);
        let word = self.ewma.load(Ordering::Relaxed);
        let (est, elapsed) = if word == 0 {
            (default_ns(cfg), 0.0)
        } else {
            let (at, est) = unpack_ewma(word);
            (f64::from(est), f64::from((now_ms as u32).wrapping_sub(at)))
        };
        let next = if rtt > est {
            rtt
        } else {
            let decay_ms = millis_f64(cfg.decay).max(1.0);
            let w = (-elapsed / decay_ms).exp();
            est * w + rtt * (1.0 - w)
        };
        self.ewma.store(pack_ewma(now_ms, next), Ordering::Relaxed);
    }

    /// Records a success: the failure run ends; counted in the window (of
    /// an endpoint that ever failed).
    pub(crate) fn record_success(&self, now: Instant, window: Duration) {
        if let Some(f) = self.failures.get() {
            f.consecutive.store(0, Ordering::Relaxed);
            f.count(now, window, true);
        }
    }

    /// Records a failure; returns the failures in a row now.
    pub(crate) fn record_failure(&self, now: Instant, window: Duration) -> u32 {
        let f = self.failures_or_init();
        f.count(now, window, false);
        f.consecutive
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1)
    }

    /// Successes and failures counted over the window ending at `now` (from
    /// the endpoint's first failure on).
    pub fn window_counts(&self, now: Instant, window: Duration) -> (u32, u32) {
        self.failures
            .get()
            .map_or((0, 0), |f| f.window_counts(now, window))
    }

    /// Whether the endpoint is ejected at `now`.
    #[inline]
    pub fn is_ejected(&self, now: Instant) -> bool {
        self.failures.get().is_some_and(|f| f.is_ejected(now))
    }

    /// A plain copy of the statistics at `now`.
    pub fn view(&self, now: Instant, cfg: &PeakEwma) -> StatsView {
        let f = self.failures.get();
        StatsView {
            in_flight: self.in_flight(),
            consecutive_failures: f.map_or(0, |f| f.consecutive.load(Ordering::Relaxed)),
            latency: Duration::try_from_secs_f64(self.latency_ns(now, cfg).max(0.0) / 1e9)
                .unwrap_or(Duration::MAX),
            ejected: self.is_ejected(now),
            ejections: f.map_or(0, |f| f.ejections.load(Ordering::Relaxed)),
        }
    }
}

impl FailureStats {
    fn new() -> Self {
        Self {
            consecutive: AtomicU32::new(0),
            ejections: AtomicU32::new(0),
            ejected_until: AtomicI64::new(NEVER),
            window: Default::default(),
        }
    }

    fn seq(now: Instant, window: Duration) -> u32 {
        let width = i64::try_from((millis(window) / BUCKETS as u64).max(1)).unwrap_or(i64::MAX);
        stamp(now).div_euclid(width) as u32
    }

    fn count(&self, now: Instant, window: Duration, ok: bool) {
        let seq = Self::seq(now, window);
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

    fn window_counts(&self, now: Instant, window: Duration) -> (u32, u32) {
        let seq = Self::seq(now, window);
        let (mut good, mut bad) = (0u32, 0u32);
        for slot in &self.window {
            let v = slot.load(Ordering::Relaxed);
            let s = (v >> 32) as u32;
            if v != 0 && seq.wrapping_sub(s) < BUCKETS as u32 {
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
        until != NEVER && stamp(now) < until
    }

    /// Ejects the endpoint at `now` for `base * 2^(k-1)` (capped at
    /// `max`), `k` the ejections in a row: the run starts over when the
    /// previous ejection ended more than `max` ago. Resets the failure run
    /// and the window. Returns the ejection time, or `None` when the
    /// endpoint is ejected already.
    pub(crate) fn eject(&self, now: Instant, base: Duration, max: Duration) -> Option<Duration> {
        let now_ms = stamp(now);
        let prev = self.ejected_until.load(Ordering::Relaxed);
        if prev != NEVER && now_ms < prev {
            return None;
        }
        let max_ms = i64::try_from(millis(max)).unwrap_or(i64::MAX);
        let k = if prev == NEVER || now_ms.saturating_sub(prev) > max_ms {
            1
        } else {
            self.ejections.load(Ordering::Relaxed).saturating_add(1)
        };
        self.ejections.store(k, Ordering::Relaxed);
        let factor = 1u32.checked_shl(k.saturating_sub(1)).unwrap_or(u32::MAX);
        let time = base.saturating_mul(factor).min(max);
        let until = now_ms.saturating_add(i64::try_from(millis(time)).unwrap_or(i64::MAX));
        self.ejected_until.store(until, Ordering::Relaxed);
        self.consecutive.store(0, Ordering::Relaxed);
        for slot in &self.window {
            slot.store(0, Ordering::Relaxed);
        }
        Some(time)
    }
}

/// Carries `old`'s statistics over to `new`, a new record of the same
/// instance id and incarnation replacing it (see the module docs): the
/// estimate is copied, the failure record shared, and the calls in flight
/// move with a seal that forwards `old`'s later leaves and outcomes to
/// `new`. Nothing when `old` recorded nothing, when both are the same
/// record, when they differ in id or incarnation (a restart starts afresh),
/// or when either was carried already (so forwarding never loops).
pub(crate) fn carry(old: &Endpoint, new: &Endpoint) {
    let (from, to) = (old.stats(), new.stats());
    if Arc::ptr_eq(old, new)
        || !from.carries()
        || to.is_sealed()
        || old.instance_id() != new.instance_id()
        || old.incarnation() != new.incarnation()
    {
        return;
    }
    let word = from.ewma.load(Ordering::Relaxed);
    if word != 0 && to.ewma.load(Ordering::Relaxed) == 0 {
        to.ewma.store(word, Ordering::Relaxed);
    }
    if let Some(f) = from.failures.get() {
        let _ = to.failures.set(Box::new(f.clone()));
    }
    // The forward first, then the seal: whoever sees the seal finds it.
    if from.forward.set(Box::new(new.clone())).is_err() {
        return;
    }
    let moved = from.in_flight.swap(SEALED_WORD, Ordering::AcqRel);
    if moved > 0 && moved & SEALED == 0 {
        to.in_flight.fetch_add(moved, Ordering::AcqRel);
    }
}
