//! The caller-side settings an engine reads at the moment it needs them
//! (not frozen at start): [`CallerConfig`], shared by the engine and every
//! directory through one [`LiveConfig`] slot that
//! [`Engine::set_caller_config`](crate::Engine::set_caller_config) swaps.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

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
}

impl Default for CallerConfig {
    fn default() -> Self {
        Self {
            tombstone_ttl: Duration::from_secs(30),
            min_probe_interval: Duration::from_secs(1),
            unsubscribe_linger: Some(Duration::from_secs(30)),
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

    /// Replaces the settings; readers see them from their next read.
    pub fn store(&self, config: CallerConfig) {
        self.0.store(Arc::new(config));
    }
}
