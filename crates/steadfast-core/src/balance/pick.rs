//! The strategies' picks over a [`DirectorySnapshot`] (see the module docs
//! of [`balance`](super)). Each candidate's statistics are loaded once and
//! serve the ejection check, the comparison and the lease.

use std::sync::Arc;
use std::time::Instant;

use super::stats::EndpointStats;
use super::{BalanceConfig, DirectoryBalance, Lease, PeakEwma, Strategy};
use crate::endpoint_set::DirectorySnapshot;
use crate::url::Endpoint;

/// Weighted redraws when a draw lands on an ejected endpoint, before a scan.
const REDRAWS: usize = 8;

/// Why a pick found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PickError {
    /// No endpoint may take traffic (none, or all of weight 0).
    #[error("no endpoint")]
    Empty,
    /// Every endpoint is ejected (only when `max_ejection_percent` is 100).
    #[error("all {endpoints} endpoint(s) ejected")]
    AllEjected {
        /// Endpoints held.
        endpoints: usize,
    },
}

/// An endpoint under consideration, with its (inline) statistics.
pub(crate) struct Candidate<'s> {
    pub(crate) ep: &'s Endpoint,
    pub(crate) stats: &'s EndpointStats,
    weight: u32,
}

impl<'s> Candidate<'s> {
    #[inline]
    fn of(ep: &'s Endpoint) -> Self {
        Self::weighted(ep, ep.weight())
    }

    /// With the weight the snapshot's running totals give.
    #[inline]
    fn weighted(ep: &'s Endpoint, weight: u32) -> Self {
        Self {
            ep,
            stats: ep.stats(),
            weight,
        }
    }

    #[inline]
    fn ejected(&self, now: Instant) -> bool {
        self.stats.is_ejected(now)
    }

    #[inline]
    fn eligible(&self, honor: bool, now: Instant) -> bool {
        self.weight > 0 && !(honor && self.ejected(now))
    }

    #[inline]
    fn cost(&self, now: Instant, cfg: &PeakEwma) -> f64 {
        self.stats.cost(now, cfg)
    }

    #[inline]
    fn in_flight(&self) -> u32 {
        self.stats.in_flight()
    }
}

/// One weighted draw, redrawn while it lands on an ejected endpoint.
#[inline]
fn draw<'s>(
    snapshot: &'s DirectorySnapshot,
    honor: bool,
    now: Instant,
    rng: &mut impl FnMut() -> u64,
) -> Option<Candidate<'s>> {
    for _ in 0..REDRAWS {
        let c = Candidate::of(snapshot.pick(rng())?);
        if !honor || !c.ejected(now) {
            return Some(c);
        }
    }
    None
}

/// The first eligible endpoint from slot `start` on, wrapping, other than
/// `not`.
fn scan<'s>(
    snapshot: &'s DirectorySnapshot,
    start: usize,
    honor: bool,
    now: Instant,
    not: Option<&Endpoint>,
) -> Option<Candidate<'s>> {
    let n = snapshot.len();
    (0..n)
        .filter_map(|k| snapshot.get((start % n.max(1) + k) % n))
        .filter(|ep| not.is_none_or(|x| !Arc::ptr_eq(x, ep)))
        .map(Candidate::of)
        .find(|c| c.eligible(honor, now))
}

impl DirectoryBalance {
    /// Picks an endpoint of `snapshot` with `strategy` at `now`, drawing
    /// from `rng`; skips ejected endpoints unless more than the maximum
    /// share is ejected (panic mode).
    pub fn pick<'s>(
        &self,
        snapshot: &'s DirectorySnapshot,
        strategy: Strategy,
        cfg: &BalanceConfig,
        now: Instant,
        rng: &mut impl FnMut() -> u64,
    ) -> Result<&'s Endpoint, PickError> {
        self.candidate(snapshot, strategy, cfg, now, rng)
            .map(|c| c.ep)
    }

    pub(crate) fn candidate<'s>(
        &self,
        snapshot: &'s DirectorySnapshot,
        strategy: Strategy,
        cfg: &BalanceConfig,
        now: Instant,
        rng: &mut impl FnMut() -> u64,
    ) -> Result<Candidate<'s>, PickError> {
        let n = snapshot.len();
        if n == 0 || snapshot.total_weight() == 0 {
            return Err(PickError::Empty);
        }
        let honor = !cfg.outlier.panics(self.ledger().ejected(now), n);
        let picked = match strategy {
            Strategy::RoundRobin => scan(snapshot, self.next_cursor(), honor, now, None),
            Strategy::WeightedRandom => draw(snapshot, honor, now, rng),
            Strategy::LeastInFlight | Strategy::PeakEwma => {
                p2c(snapshot, strategy, cfg, honor, now, rng)
            }
        };
        if let Some(c) = picked {
            return Ok(c);
        }
        let start = (rng() % n as u64) as usize;
        if let Some(c) = scan(snapshot, start, honor, now, None) {
            return Ok(c);
        }
        // Every endpoint that may take traffic is ejected.
        if cfg.outlier.max_ejection_percent >= 100 {
            return Err(PickError::AllEjected { endpoints: n });
        }
        // Ejected elsewhere (statistics are shared by the directories
        // serving one endpoint) past this directory's share: panic mode.
        scan(snapshot, start, false, now, None).ok_or(PickError::Empty)
    }

    /// Picks like [`DirectoryBalance::pick`] and leases the endpoint: it is
    /// counted in flight until the lease drops (its statistics are created
    /// now if it had none).
    #[inline]
    pub fn lease(
        &self,
        snapshot: &DirectorySnapshot,
        strategy: Strategy,
        cfg: &BalanceConfig,
        now: Instant,
        rng: &mut impl FnMut() -> u64,
    ) -> Result<Lease<'_>, PickError> {
        let c = self.candidate(snapshot, strategy, cfg, now, rng)?;
        Ok(Lease::new(c, self, snapshot.len(), now))
    }
}

/// A uniform slot of `0..n` for a uniform `r` (multiply-shift, no division).
#[inline]
fn slot(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

/// One uniform draw by slot index, redrawn while it lands on an endpoint
/// that may not take traffic (weight 0, or ejected when `honor`); `not`:
/// the slot to avoid (the other P2C candidate), drawn around in O(1).
#[inline]
fn draw_uniform<'s>(
    snapshot: &'s DirectorySnapshot,
    honor: bool,
    now: Instant,
    not: Option<usize>,
    rng: &mut impl FnMut() -> u64,
) -> Option<(usize, Candidate<'s>)> {
    let n = snapshot.len();
    let span = n.checked_sub(usize::from(not.is_some()))?;
    if span == 0 {
        return None;
    }
    for _ in 0..REDRAWS {
        let mut i = slot(rng(), span);
        if not.is_some_and(|x| i >= x) {
            i += 1;
        }
        let (ep, weight) = snapshot.get_weighted(i)?;
        let c = Candidate::weighted(ep, weight);
        if c.eligible(honor, now) {
            return Some((i, c));
        }
    }
    None
}

/// Power of two choices, as Finagle and Envoy draw: two distinct slots
/// uniformly in O(1) (no weighted search), the weight folded into the
/// cost (`cost / weight`, compared cross-multiplied), so that a heavier
/// endpoint wins ties and takes proportionally more load before it loses.
/// Weighted random stays its own strategy.
fn p2c<'s>(
    snapshot: &'s DirectorySnapshot,
    strategy: Strategy,
    cfg: &BalanceConfig,
    honor: bool,
    now: Instant,
    rng: &mut impl FnMut() -> u64,
) -> Option<Candidate<'s>> {
    let n = snapshot.len();
    let (a, b) = match first_pair(snapshot, n, honor, now, rng) {
        Some(pair) => pair,
        None => draw_pair(snapshot, honor, now, rng)?,
    };
    let Some(b) = b else {
        return Some(a);
    };
    let (wa, wb) = (a.weight, b.weight);
    let ewma = &cfg.peak_ewma;
    let a_wins = match strategy {
        Strategy::LeastInFlight => {
            u64::from(a.in_flight().saturating_add(1)) * u64::from(wb)
                <= u64::from(b.in_flight().saturating_add(1)) * u64::from(wa)
        }
        _ => a
            .stats
            .cheaper_or_equal(wa, b.stats, wb, ewma)
            .unwrap_or_else(|| {
                a.cost(now, ewma) * f64::from(wb) <= b.cost(now, ewma) * f64::from(wa)
            }),
    };
    Some(if a_wins { a } else { b })
}

/// The common case in one go: two distinct uniform slots, both loaded
/// before either is checked (so that the two candidates' memory loads
/// overlap), both eligible; `None` sends the pick to [`draw_pair`].
#[inline]
fn first_pair<'s>(
    snapshot: &'s DirectorySnapshot,
    n: usize,
    honor: bool,
    now: Instant,
    rng: &mut impl FnMut() -> u64,
) -> Option<(Candidate<'s>, Option<Candidate<'s>>)> {
    if n < 2 {
        return None;
    }
    let i = slot(rng(), n);
    let mut j = slot(rng(), n - 1);
    if j >= i {
        j += 1;
    }
    let (ea, wa) = snapshot.get_weighted(i)?;
    let (eb, wb) = snapshot.get_weighted(j)?;
    let (a, b) = (Candidate::weighted(ea, wa), Candidate::weighted(eb, wb));
    (a.eligible(honor, now) && b.eligible(honor, now)).then_some((a, Some(b)))
}

/// Two candidates drawn one after the other, each redrawn while it may not
/// take traffic, the second distinct from the first (or, failing that, the
/// next eligible other endpoint; `None` when there is no other).
#[cold]
fn draw_pair<'s>(
    snapshot: &'s DirectorySnapshot,
    honor: bool,
    now: Instant,
    rng: &mut impl FnMut() -> u64,
) -> Option<(Candidate<'s>, Option<Candidate<'s>>)> {
    let (i, a) = draw_uniform(snapshot, honor, now, None, rng)?;
    let b = match draw_uniform(snapshot, honor, now, Some(i), rng) {
        Some((_, b)) => Some(b),
        // Rare (most endpoints ejected or of weight 0): the next eligible
        // other endpoint from a random slot, so two are compared when two
        // exist.
        None if snapshot.len() > 1 => {
            let start = (rng() % snapshot.len() as u64) as usize;
            scan(snapshot, start, honor, now, Some(a.ep))
        }
        None => None,
    };
    Some((a, b))
}

mod avoiding;
