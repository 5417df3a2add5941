//! The strategies' picks over a [`DirectorySnapshot`] (see the module docs
//! of [`balance`](super)).

use std::sync::Arc;
use std::time::Instant;

use super::{BalanceConfig, DirectoryBalance, Lease, PeakEwma, Strategy};
use crate::endpoint_set::DirectorySnapshot;
use crate::url::Endpoint;

/// Weighted redraws when a draw lands on an ejected endpoint, before a scan.
const REDRAWS: usize = 8;
/// Redraws of the second P2C candidate when it equals the first.
const DISTINCT_REDRAWS: usize = 3;

/// Why a pick found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
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

#[inline]
fn ejected(ep: &Endpoint, now: Instant) -> bool {
    ep.stats_slot()
        .load()
        .as_ref()
        .is_some_and(|s| s.is_ejected(now))
}

#[inline]
fn eligible(ep: &Endpoint, honor: bool, now: Instant) -> bool {
    ep.weight() > 0 && !(honor && ejected(ep, now))
}

/// One weighted draw, redrawn while it lands on an ejected endpoint.
#[inline]
fn draw<'s>(
    snapshot: &'s DirectorySnapshot,
    honor: bool,
    now: Instant,
    rng: &mut impl FnMut() -> u64,
) -> Option<&'s Endpoint> {
    for _ in 0..REDRAWS {
        let ep = snapshot.pick(rng())?;
        if !honor || !ejected(ep, now) {
            return Some(ep);
        }
    }
    None
}

/// The first eligible endpoint from slot `start` on, wrapping.
fn scan(
    snapshot: &DirectorySnapshot,
    start: usize,
    honor: bool,
    now: Instant,
) -> Option<&Endpoint> {
    let n = snapshot.len();
    (0..n)
        .filter_map(|k| snapshot.get((start % n.max(1) + k) % n))
        .find(|ep| eligible(ep, honor, now))
}

#[inline]
fn cost(ep: &Endpoint, now: Instant, cfg: &PeakEwma) -> f64 {
    match &*ep.stats_slot().load() {
        Some(s) => s.cost(now, cfg),
        None => cfg.default_rtt.as_nanos() as f64,
    }
}

#[inline]
fn in_flight(ep: &Endpoint) -> u32 {
    ep.stats_slot().load().as_ref().map_or(0, |s| s.in_flight())
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
        let n = snapshot.len();
        if n == 0 || snapshot.total_weight() == 0 {
            return Err(PickError::Empty);
        }
        let honor = !cfg.outlier.panics(self.ledger().ejected(now), n);
        let picked = match strategy {
            Strategy::RoundRobin => scan(snapshot, self.next_cursor(), honor, now),
            Strategy::WeightedRandom => draw(snapshot, honor, now, rng),
            Strategy::LeastInFlight | Strategy::PeakEwma => {
                p2c(snapshot, strategy, cfg, honor, now, rng)
            }
        };
        if let Some(ep) = picked {
            return Ok(ep);
        }
        let start = (rng() % n as u64) as usize;
        if let Some(ep) = scan(snapshot, start, honor, now) {
            return Ok(ep);
        }
        // Every endpoint that may take traffic is ejected.
        if cfg.outlier.max_ejection_percent >= 100 {
            return Err(PickError::AllEjected { endpoints: n });
        }
        // Ejected elsewhere (statistics are shared by the directories
        // serving one endpoint) past this directory's share: panic mode.
        scan(snapshot, start, false, now).ok_or(PickError::Empty)
    }

    /// Picks like [`DirectoryBalance::pick`] and leases the endpoint: it is
    /// counted in flight until the lease drops (its statistics are created
    /// now if it had none).
    pub fn lease(
        self: &Arc<Self>,
        snapshot: &DirectorySnapshot,
        strategy: Strategy,
        cfg: &BalanceConfig,
        now: Instant,
        rng: &mut impl FnMut() -> u64,
    ) -> Result<Lease, PickError> {
        let ep = self.pick(snapshot, strategy, cfg, now, rng)?;
        Ok(Lease::new(
            ep.clone(),
            self.clone(),
            snapshot.len(),
            cfg,
            now,
        ))
    }
}

fn p2c<'s>(
    snapshot: &'s DirectorySnapshot,
    strategy: Strategy,
    cfg: &BalanceConfig,
    honor: bool,
    now: Instant,
    rng: &mut impl FnMut() -> u64,
) -> Option<&'s Endpoint> {
    let a = draw(snapshot, honor, now, rng)?;
    let mut b = draw(snapshot, honor, now, rng);
    // Two distinct candidates, as far as a few redraws find one.
    for _ in 0..DISTINCT_REDRAWS {
        if snapshot.len() < 2 || !b.is_some_and(|b| Arc::ptr_eq(a, b)) {
            break;
        }
        b = draw(snapshot, honor, now, rng);
    }
    let b = match b.filter(|b| !Arc::ptr_eq(a, b)) {
        Some(b) => Some(b),
        // Rare (a dominant weight, or few endpoints): the next eligible
        // other endpoint from a random slot, so two are always compared.
        None if snapshot.len() > 1 => {
            let n = snapshot.len();
            let start = (rng() % n as u64) as usize;
            (0..n)
                .filter_map(|k| snapshot.get((start + k) % n))
                .find(|ep| !Arc::ptr_eq(a, ep) && eligible(ep, honor, now))
        }
        None => None,
    };
    let Some(b) = b else {
        return Some(a);
    };
    let a_wins = match strategy {
        Strategy::LeastInFlight => in_flight(a) <= in_flight(b),
        _ => cost(a, now, &cfg.peak_ewma) <= cost(b, now, &cfg.peak_ewma),
    };
    Some(if a_wins { a } else { b })
}
