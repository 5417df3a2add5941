//! Engine configuration with the defaults a production consumer wants.

use std::time::Duration;

use steadfast_core::BackoffPolicy;

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
    /// Deadline of each registry or publisher call the engine makes for an
    /// export (register, closing announcement, unregister, publish,
    /// withdraw). Default 5 s.
    pub registry_call_timeout: Duration,
    /// Longest `Engine::shutdown` waits for exports to announce closing and
    /// unregister before it stops every actor anyway. Default 15 s.
    pub shutdown_timeout: Duration,
    /// Seed of every random choice (jitter, endpoint selection).
    pub seed: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            backoff: BackoffPolicy::default(),
            registry_backoff: BackoffPolicy::default(),
            metadata_max_attempts: None,
            cache_capacity: 1024,
            fetch_timeout: Duration::from_secs(5),
            registry_call_timeout: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(15),
            seed: rand::random(),
        }
    }
}
