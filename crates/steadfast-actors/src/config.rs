//! Engine configuration with the defaults a production consumer wants.

use std::time::Duration;

use steadfast_core::subscription::DEFAULT_PROBE_INTERVAL;
use steadfast_core::{BackoffPolicy, RecoverPolicy, SubscriptionConfig};

/// Tunables of one engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Retry schedule of unresolved metadata revisions (per revision).
    pub backoff: BackoffPolicy,
    /// Re-subscribe schedule of failed registry watches.
    pub registry_backoff: BackoffPolicy,
    /// Fetch attempts per revision before giving up (`None`: unlimited, the
    /// default — every transient fault heals on its own).
    pub metadata_max_attempts: Option<u32>,
    /// Revisions kept in the shared metadata cache.
    pub cache_capacity: usize,
    /// Deadline of one metadata fetch attempt from one instance.
    pub fetch_timeout: Duration,
    /// Seed of every random choice (jitter, endpoint selection).
    pub seed: u64,
    /// While the registry is down, one cheap probe (`list`) per engine this
    /// often, so the watch is re-opened as soon as the registry answers
    /// instead of after the grown `registry_backoff` (default 1 s, jittered
    /// like the backoff; `None`: no probe).
    pub registry_probe_interval: Option<Duration>,
    /// Deadline of every registry call of the subscription (watch open,
    /// list) (default 5 s).
    pub registry_call_timeout: Duration,
    /// Full re-read of every subscribed app, applying what the watch missed
    /// (default 5 min, jittered ±20 %; zero: only on resume after an outage).
    pub reconcile_interval: Duration,
    /// How long instances removed in a mass expiry right after a registry
    /// recovery are still served while their providers re-register
    /// (default 3 s; zero: never held).
    pub mass_removal_grace: Duration,
}

impl EngineConfig {
    /// The registry subscription machine's configuration.
    pub fn subscription(&self) -> SubscriptionConfig {
        let mut recover = RecoverPolicy::new(self.registry_backoff);
        if let Some(probe) = self.registry_probe_interval.filter(|p| !p.is_zero()) {
            recover = recover.with_probe(probe);
        }
        SubscriptionConfig {
            recover,
            reconcile_interval: self.reconcile_interval,
            mass_removal_grace: self.mass_removal_grace,
            call_timeout: self.registry_call_timeout,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            backoff: BackoffPolicy::default(),
            registry_backoff: BackoffPolicy::default(),
            metadata_max_attempts: None,
            cache_capacity: 1024,
            fetch_timeout: Duration::from_secs(5),
            seed: rand::random(),
            registry_probe_interval: Some(DEFAULT_PROBE_INTERVAL),
            registry_call_timeout: Duration::from_secs(5),
            reconcile_interval: Duration::from_secs(300),
            mass_removal_grace: Duration::from_secs(3),
        }
    }
}
