//! The caller-side settings an engine reads at the moment it needs them
//! (not frozen at start): [`CallerConfig`], shared by the engine and every
//! directory through one [`LiveConfig`] slot that
//! [`Engine::set_caller_config`](crate::Engine::set_caller_config) swaps.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use steadfast_core::balance::{BalanceConfig, OutlierPolicy, PeakEwma, Strategy};

/// Caller-side tunables: closing tombstones, demand-driven probes, handle
/// lifetimes.
#[derive(Clone, Debug, PartialEq)]
pub struct CallerConfig {
    /// How long a closing tombstone vetoes re-adds of the endpoint's
    /// incarnation (read when the tombstone is written). Default 30 s.
    pub tombstone_ttl: Duration,
    /// Fewest time between two demand-driven re-resolves a directory asks
    /// of its resolvers, whatever the number of waiting callers. Default 1 s.
    pub min_probe_interval: Duration,
    /// How long a reference whose last handle was dropped stays subscribed
    /// (`None`: until `unsubscribe` or shutdown). Default 30 s.
    pub unsubscribe_linger: Option<Duration>,
    /// How directories pick endpoints unless one overrides it
    /// ([`Directory::set_strategy`](crate::Directory::set_strategy)).
    /// Default [`Strategy::PeakEwma`] (P2C over peak-EWMA latency).
    pub strategy: Strategy,
    /// Peak-EWMA settings: default RTT 30 ms, decay 10 s, a failure counts
    /// as at least 250 ms.
    pub peak_ewma: PeakEwma,
    /// Passive outlier ejection from reported outcomes: 5 failures in a
    /// row, or >= 50 % of >= 20 outcomes over 10 s, eject for 30 s doubling
    /// per ejection in a row up to 300 s; at most 50 % of a directory
    /// ejected. Connection refused and closing eject at once.
    pub outlier: OutlierPolicy,
}

impl CallerConfig {
    /// The balancing settings (a copy).
    pub fn balance(&self) -> BalanceConfig {
        BalanceConfig {
            strategy: self.strategy,
            peak_ewma: self.peak_ewma,
            outlier: self.outlier,
        }
    }
}

impl Default for CallerConfig {
    fn default() -> Self {
        Self {
            tombstone_ttl: Duration::from_secs(30),
            min_probe_interval: Duration::from_secs(1),
            unsubscribe_linger: Some(Duration::from_secs(30)),
            strategy: Strategy::default(),
            peak_ewma: PeakEwma::default(),
            outlier: OutlierPolicy::default(),
        }
    }
}

/// The shared, swappable [`CallerConfig`] of one engine (cheap to clone;
/// reads are lock-free).
#[derive(Clone, Debug, Default)]
pub struct LiveConfig(Arc<ArcSwap<CallerConfig>>);

impl LiveConfig {
    /// A slot holding `config`.
    pub fn new(config: CallerConfig) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(config)))
    }

    /// The settings now.
    pub fn load(&self) -> Arc<CallerConfig> {
        self.0.load_full()
    }

    /// A short-lived guard on the settings now (no reference count touched
    /// on the fast path; for per-pick reads).
    #[inline]
    pub fn peek(&self) -> arc_swap::Guard<Arc<CallerConfig>> {
        self.0.load()
    }

    /// Replaces the settings; readers see them from their next read.
    pub fn store(&self, config: CallerConfig) {
        self.0.store(Arc::new(config));
    }
}
