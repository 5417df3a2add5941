//! [`Lease`]: one picked endpoint, counted in flight until dropped, taking
//! the call's outcome.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::outlier::{Ejection, Trigger};
use super::pick::Candidate;
use super::stats::EndpointStats;
use super::{BalanceConfig, FailureClass, Stripe};
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
pub struct Lease {
    endpoint: Endpoint,
    /// The directory's ledger and environment, through this thread's stripe.
    balance: Arc<Stripe>,
    picked_at: Instant,
    /// The directory's size at the pick (for the ejection share).
    endpoints: usize,
}

impl Lease {
    pub(crate) fn new(
        picked: Candidate<'_>,
        balance: Arc<Stripe>,
        endpoints: usize,
        cfg: &BalanceConfig,
        now: Instant,
    ) -> Self {
        let stats = match picked.stats {
            Some(s) => s,
            None => picked
                .ep
                .stats_or_init(|| EndpointStats::new(now, cfg.peak_ewma.default_rtt)),
        };
        stats.enter();
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

    /// The endpoint's statistics (created by the pick, never replaced:
    /// the URL's own).
    pub fn stats(&self) -> &Arc<EndpointStats> {
        let ep: &ServiceUrl = &self.endpoint;
        ep.stats_or_init(|| EndpointStats::new(self.picked_at, Default::default()))
    }

    /// When the endpoint was picked.
    pub fn picked_at(&self) -> Instant {
        self.picked_at
    }

    fn now(&self) -> Instant {
        self.balance.0.env().map_or(self.picked_at, |e| e.now())
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
        let env = self.balance.0.env();
        let stats = self.stats();
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
                    report.ejection = Some(self.balance.0.ledger().eject(
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

impl Deref for Lease {
    type Target = ServiceUrl;
    fn deref(&self) -> &ServiceUrl {
        &self.endpoint
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stats().leave();
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("endpoint", &self.endpoint.to_string())
            .field("in_flight", &self.stats().in_flight())
            .finish()
    }
}
