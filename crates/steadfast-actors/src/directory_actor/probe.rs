//! Demand-driven re-resolve: callers waiting on an empty directory whose
//! metadata is unresolved ask, through [`DirectoryShared::ask_probe`], at
//! most once per `min_probe_interval` (the decision is the core's
//! [`ProbeThrottle`]); the directory then asks each of its resolvers to
//! retry its unresolved revisions now ([`RetryNow`]).

use std::time::{Duration, Instant};

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::ProbeThrottle;

use super::{DirectoryActor, DirectoryShared};
use crate::messages::{DemandProbe, RetryNow};
use crate::stats::EngineStats;

/// The shortest probe interval honoured, whatever the live setting says
/// (a zero set at run time must not make waiters spin).
pub(crate) const MIN_PROBE_FLOOR: Duration = Duration::from_millis(10);

impl DirectoryShared {
    /// The probe interval in force now (at least [`MIN_PROBE_FLOOR`]).
    pub(crate) fn probe_interval(&self) -> Duration {
        self.config.load().min_probe_interval.max(MIN_PROBE_FLOOR)
    }

    /// A caller waits at `now` with the probe interval `interval` in force:
    /// true when this caller's ask is the one of this interval.
    pub(crate) fn ask_probe(&self, now: Instant, interval: Duration) -> bool {
        let mut throttle = self
            .probe
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ProbeThrottle::ask(&mut throttle, now, interval)
    }
}

/// Sends a demand probe to `addr` if the throttle of `shared` allows one at
/// `now`; true when sent.
pub(crate) fn demand(
    shared: &DirectoryShared,
    addr: &WeakAddr<DirectoryActor>,
    now: Instant,
) -> bool {
    let interval = shared.probe_interval();
    if !shared.ask_probe(now, interval) {
        return false;
    }
    match addr.upgrade() {
        Some(a) => {
            a.do_send(DemandProbe);
            true
        }
        None => false,
    }
}

impl Handler<DemandProbe> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, _: DemandProbe, _ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        EngineStats::bump(&self.stats.demand_probes);
        for r in self.resolvers.iter().filter_map(WeakAddr::upgrade) {
            r.do_send(RetryNow);
        }
    }
}
