//! [`Lease`]: one picked endpoint, counted in flight until dropped, taking
//! the call's outcome.

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, Instant};

use super::outlier::{Ejection, Trigger};
use super::pick::Candidate;
use super::stats::EndpointStats;
use super::{DirectoryBalance, FailureClass};
use crate::url::{Endpoint, ServiceUrl};

/// The outcome of a call on a leased endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The call succeeded after `latency` (`None`: since the pick).
    Success(Option<Duration>),
    /// The call failed with `class` after `latency` (`None`: since the pick).
    Failure(FailureClass, Option<Duration>),
}

/// What reporting an outcome did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// The trigger the failure tripped, if any.
    pub trigger: Option<Trigger>,
    /// What the ejection attempt did, when a trigger tripped.
    pub ejection: Option<Ejection>,
    /// Whether a closing notice went to the directory.
    pub closing_sent: bool,
}

/// One endpoint picked for one call: derefs to the [`ServiceUrl`], counts
/// the call in flight until dropped, and takes the outcome
/// ([`Lease::success`], [`Lease::failure`], or [`Lease::report_at`] with
/// an explicit time). Dropped without an outcome, it only leaves the
/// in-flight count (a cancelled call teaches nothing).
///
/// A lease borrows the directory it was picked from (its ejection ledger
/// and environment), so taking and dropping one touches no reference count
/// but the endpoint's own: keep the directory handle for the call (it is
/// cheap to clone into a task that picks for itself).
pub struct Lease<'d> {
    endpoint: Endpoint,
    /// The directory's ledger and environment.
    balance: &'d DirectoryBalance,
    picked_at: Instant,
    /// The directory's size at the pick (for the ejection share).
    endpoints: usize,
}

impl<'d> Lease<'d> {
    #[inline]
    pub(crate) fn new(
        picked: Candidate<'_>,
        balance: &'d DirectoryBalance,
        endpoints: usize,
        now: Instant,
    ) -> Self {
        picked.ep.stats().enter();
        Self {
            endpoint: picked.ep.clone(),
            balance,
            picked_at: now,
            endpoints,
        }
    }

    /// The endpoint (a shared handle).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The statistics of the endpoint picked (the URL's own; once a newer
    /// record of the same incarnation took them over, the lease's outcome
    /// and its end count there).
    pub fn stats(&self) -> &EndpointStats {
        self.endpoint.stats()
    }

    /// When the endpoint was picked.
    pub fn picked_at(&self) -> Instant {
        self.picked_at
    }

    fn now(&self) -> Instant {
        self.balance.env().map_or(self.picked_at, |e| e.now())
    }

    /// The call succeeded; its latency is the time since the pick.
    pub fn success(self) -> Report {
        let now = self.now();
        self.report_at(Outcome::Success(None), now)
    }

    /// The call succeeded after `latency`.
    pub fn success_in(self, latency: Duration) -> Report {
        let now = self.now();
        self.report_at(Outcome::Success(Some(latency)), now)
    }

    /// The call failed with `class`; its latency is the time since the pick.
    pub fn failure(self, class: FailureClass) -> Report {
        let now = self.now();
        self.report_at(Outcome::Failure(class, None), now)
    }

    /// The call failed with `class` after `latency`.
    pub fn failure_in(self, class: FailureClass, latency: Duration) -> Report {
        let now = self.now();
        self.report_at(Outcome::Failure(class, Some(latency)), now)
    }

    /// Reports `outcome` at `now` (sans-IO: the time is given) under the
    /// directory's live settings (defaults when no environment is
    /// installed), then ends the lease.
    pub fn report_at(self, outcome: Outcome, now: Instant) -> Report {
        self.endpoint
            .stats()
            .with_live(|stats| self.report_on(stats, outcome, now))
    }

    fn report_on(&self, stats: &EndpointStats, outcome: Outcome, now: Instant) -> Report {
        let env = self.balance.env();
        let cfg = env.map(|e| e.config()).unwrap_or_default();
        let since_pick = now.saturating_duration_since(self.picked_at);
        let mut report = Report {
            trigger: None,
            ejection: None,
            closing_sent: false,
        };
        let window = cfg.outlier.window();
        match outcome {
            Outcome::Success(latency) => {
                stats.observe(latency.unwrap_or(since_pick), now, &cfg.peak_ewma);
                stats.record_success(now, window);
            }
            Outcome::Failure(class, latency) => {
                let latency = latency
                    .unwrap_or(since_pick)
                    .max(cfg.peak_ewma.failure_penalty);
                stats.observe(latency, now, &cfg.peak_ewma);
                report.trigger = cfg.outlier.on_failure(stats, class, now);
                if report.trigger.is_some() {
                    report.ejection = Some(self.balance.ledger().eject(
                        stats,
                        now,
                        self.endpoints,
                        &cfg.outlier,
                    ));
                }
                if class == FailureClass::Closing {
                    if let Some(env) = env {
                        env.closing(&self.endpoint);
                        report.closing_sent = true;
                    }
                }
            }
        }
        report
    }
}

impl Deref for Lease<'_> {
    type Target = ServiceUrl;
    fn deref(&self) -> &ServiceUrl {
        &self.endpoint
    }
}

impl Drop for Lease<'_> {
    #[inline]
    fn drop(&mut self) {
        self.endpoint.stats().leave();
    }
}

impl fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("endpoint", &self.endpoint.to_string())
            .field("in_flight", &self.stats().in_flight())
            .finish()
    }
}
