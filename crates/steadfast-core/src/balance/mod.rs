//! Balancing: the strategies a directory picks endpoints with, the lease a
//! pick hands out (in flight until dropped, taking the call's outcome), and
//! passive outlier ejection fed by those outcomes.
//!
//! Everything works on a published
//! [`DirectorySnapshot`](crate::DirectorySnapshot) without messaging any
//! actor, and is sans-IO: the time of a pick and its randomness are inputs;
//! a lease reads the time of its outcome through the [`BalanceEnv`] the
//! directory installed.
//!
//! | strategy | pick | cost |
//! |---|---|---|
//! | [`Strategy::RoundRobin`] | next slot of a per-directory counter, skipping weight 0 | O(1) |
//! | [`Strategy::WeightedRandom`] | one weighted draw | O(log n) |
//! | [`Strategy::LeastInFlight`] | two uniform draws, lower `(in flight + 1) / weight` wins | O(1) |
//! | [`Strategy::PeakEwma`] (default) | two uniform draws, lower `latency * (in flight + 1) / weight` wins | O(1) |
//!
//! The two P2C strategies draw their two distinct candidates uniformly by
//! slot, as Finagle and Envoy do, and fold the weight into the cost: a
//! weight-2 endpoint costs half as much per call as a weight-1 endpoint of
//! the same latency and load, so it wins their comparisons until it carries
//! about twice the calls. Under no load at all (every cost equal but for
//! the weight) the heavier of the two always wins, so idle shares follow
//! weight rank rather than weight; use [`Strategy::WeightedRandom`] for
//! shares exactly proportional to weight.
//!
//! Ejected endpoints are skipped (up to 8 redraws, then a scan), except in
//! panic mode, when more than `max_ejection_percent` of the directory is
//! ejected.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::url::ServiceUrl;

mod lease;
mod outlier;
mod pick;
mod stats;
#[cfg(test)]
mod tests;

pub use lease::{Lease, Outcome, Report};
pub use outlier::{Ejection, EjectionLedger, FailureRate, OutlierPolicy, Trigger};
pub use pick::PickError;
pub(crate) use stats::carry;
pub use stats::{EndpointStats, FailureStats, StatsView};

/// How a directory picks an endpoint.
///
/// Deserializes from `"round_robin"`, `"weighted_random"`,
/// `"least_in_flight"` or `"peak_ewma"`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// In turn, over the slots of the directory (weight 0 skipped; other
    /// weights ignored).
    RoundRobin,
    /// At random, by weight.
    WeightedRandom,
    /// Power of two choices (two uniform draws): fewer calls in flight per
    /// unit of weight.
    LeastInFlight,
    /// Power of two choices over peak-EWMA latency, as linkerd2-proxy and
    /// Finagle: lower `latency estimate * (in flight + 1) / weight`.
    #[default]
    PeakEwma,
}

impl Strategy {
    fn code(self) -> u8 {
        match self {
            Strategy::RoundRobin => 1,
            Strategy::WeightedRandom => 2,
            Strategy::LeastInFlight => 3,
            Strategy::PeakEwma => 4,
        }
    }

    fn of_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Strategy::RoundRobin,
            2 => Strategy::WeightedRandom,
            3 => Strategy::LeastInFlight,
            4 => Strategy::PeakEwma,
            _ => return None,
        })
    }

    /// Every strategy.
    pub const ALL: [Strategy; 4] = [
        Strategy::RoundRobin,
        Strategy::WeightedRandom,
        Strategy::LeastInFlight,
        Strategy::PeakEwma,
    ];
}

/// Peak-EWMA latency settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeakEwma {
    /// The estimate of an endpoint with no outcome yet. Default 30 ms.
    #[serde(with = "humantime_serde")]
    pub default_rtt: Duration,
    /// Decay time constant: the estimate falls by `1/e` per `decay` without
    /// new samples, and a sample's weight is `1 - exp(-elapsed / decay)`.
    /// Default 10 s.
    #[serde(with = "humantime_serde")]
    pub decay: Duration,
    /// Latency a failure counts as at least, so that fast failures do not
    /// draw traffic. Default 250 ms.
    #[serde(with = "humantime_serde")]
    pub failure_penalty: Duration,
}

impl Default for PeakEwma {
    fn default() -> Self {
        Self {
            default_rtt: Duration::from_millis(30),
            decay: Duration::from_secs(10),
            failure_penalty: Duration::from_millis(250),
        }
    }
}

/// Everything a pick and an outcome report need to know (a copy of the
/// engine's live settings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BalanceConfig {
    /// The strategy of directories that do not override it.
    pub strategy: Strategy,
    /// Peak-EWMA settings.
    pub peak_ewma: PeakEwma,
    /// Outlier ejection.
    pub outlier: OutlierPolicy,
}

/// How a call failed, as the caller saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// The connection was refused (nothing listens): ejects at once.
    ConnectionRefused,
    /// The provider answered that it is closing (graceful shutdown): ejects
    /// at once and tells the directory, which tombstones the endpoint.
    Closing,
    /// The call timed out.
    Timeout,
    /// Any other failure of the provider or the transport (5xx, reset).
    Server,
}

impl FailureClass {
    /// Whether one such failure ejects the endpoint.
    pub fn ejects_at_once(self) -> bool {
        matches!(
            self,
            FailureClass::ConnectionRefused | FailureClass::Closing
        )
    }
}

/// What a directory's leases call back into: its clock, its live settings,
/// and where closing notices go. Installed once per directory by its shell.
pub trait BalanceEnv: Send + Sync {
    /// Now, on the clock the directory's picks use.
    fn now(&self) -> Instant;
    /// The settings now.
    fn config(&self) -> BalanceConfig;
    /// A call on `endpoint` failed with a closing-type error: the shell
    /// sends the directory a
    /// [`Closing`](crate::Closing)`::of(endpoint, service key, ClosingSource::Call)`.
    fn closing(&self, endpoint: &ServiceUrl);
}

/// Per-directory balancing state shared by every handle of a directory: the
/// round-robin cursor, the strategy override, the ejection ledger and the
/// environment leases report through. A [`Lease`] borrows it (no reference
/// count is touched by a pick).
pub struct DirectoryBalance {
    cursor: AtomicUsize,
    strategy: AtomicU8,
    ledger: EjectionLedger,
    env: OnceLock<Box<dyn BalanceEnv>>,
}

impl std::fmt::Debug for DirectoryBalance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryBalance")
            .field("strategy", &self.strategy())
            .field("ledger", self.ledger())
            .finish()
    }
}

impl Default for DirectoryBalance {
    fn default() -> Self {
        Self::new()
    }
}

impl DirectoryBalance {
    /// Fresh state: no override, nothing ejected, no environment.
    pub fn new() -> Self {
        Self {
            cursor: AtomicUsize::new(0),
            strategy: AtomicU8::new(0),
            ledger: EjectionLedger::new(),
            env: OnceLock::new(),
        }
    }

    /// Installs the environment (the first install wins; returns whether
    /// this one did).
    pub fn install(&self, env: Box<dyn BalanceEnv>) -> bool {
        self.env.set(env).is_ok()
    }

    /// The environment leases report through, once installed.
    pub(crate) fn env(&self) -> Option<&dyn BalanceEnv> {
        self.env.get().map(|b| b.as_ref())
    }

    /// The directory's own strategy, if it overrides the engine's.
    pub fn strategy(&self) -> Option<Strategy> {
        Strategy::of_code(self.strategy.load(Ordering::Relaxed))
    }

    /// Overrides the engine's strategy for this directory (`None`: follow
    /// the engine's again).
    pub fn set_strategy(&self, strategy: Option<Strategy>) {
        self.strategy
            .store(strategy.map_or(0, Strategy::code), Ordering::Relaxed);
    }

    /// The ejection ledger.
    pub fn ledger(&self) -> &EjectionLedger {
        &self.ledger
    }

    pub(crate) fn next_cursor(&self) -> usize {
        self.cursor.fetch_add(1, Ordering::Relaxed)
    }
}
