//! Engine configuration with the defaults a production consumer wants.

use std::time::Duration;

use steadfast_core::{BackoffPolicy, FetchPolicy};

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
    /// Deadline of one whole metadata fetch of a revision (default 5 s):
    /// every candidate instance it tries, hedged ones included, answers by
    /// then or counts as a timeout, and the fetch reports its failure then.
    pub fetch_timeout: Duration,
    /// A fetch with no answer after this long starts its remaining
    /// candidates in parallel (default 250 ms).
    pub fetch_hedge_delay: Duration,
    /// Candidate instances the first fetch of a revision may try (default 16).
    pub fetch_fanout: usize,
    /// Candidate instances each retry of a revision may try (default 2).
    pub fetch_retry_calls: usize,
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
            fetch_hedge_delay: Duration::from_millis(250),
            fetch_fanout: 16,
            fetch_retry_calls: 2,
            seed: rand::random(),
        }
    }
}

impl EngineConfig {
    /// The fetch budget these settings give: their deadline, hedge delay and
    /// budgets; a failed revision's next fetch counts as a retry for 5 min,
    /// or twice the backoff cap when that is longer.
    pub fn fetch_policy(&self) -> FetchPolicy {
        let d = FetchPolicy::default();
        FetchPolicy {
            deadline: self.fetch_timeout,
            hedge_delay: self.fetch_hedge_delay,
            fanout: self.fetch_fanout,
            retry_calls: self.fetch_retry_calls,
            revision_memory: d.revision_memory.max(self.backoff.cap().saturating_mul(2)),
            ..d
        }
    }
}
