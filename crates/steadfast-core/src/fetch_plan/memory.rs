//! [`FetchMemory`]: what earlier flights taught about instances (which ones
//! failed or hung recently) and revisions (whose last flight failed, so the
//! next one is a retry). Bounded LRUs; time is an input.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use lru::LruCache;

use super::FetchPolicy;
use crate::metadata_cache::CacheKey;
use crate::model::ServiceInstance;

/// Instances and revisions remembered at most (each).
const CAPACITY: usize = 4096;

/// Memory of past flights, shared by every flight of an engine.
#[derive(Debug)]
pub struct FetchMemory {
    /// Instance id -> when it last failed, hung or was overtaken.
    instances: LruCache<String, Instant>,
    /// Revision -> when its last flight failed.
    revisions: LruCache<CacheKey, Instant>,
    instance_window: Duration,
    revision_window: Duration,
}

impl FetchMemory {
    /// An empty memory with the windows of `policy`.
    pub fn new(policy: &FetchPolicy) -> Self {
        let cap = NonZeroUsize::new(CAPACITY).unwrap_or(NonZeroUsize::MIN);
        Self {
            instances: LruCache::new(cap),
            revisions: LruCache::new(cap),
            instance_window: policy.instance_memory,
            revision_window: policy.revision_memory,
        }
    }

    /// The order to try `candidates` in at `now`: those with no recent
    /// failure first, in the given order; then those that failed within the
    /// window, the least recently failed first.
    pub fn order(&self, candidates: &[ServiceInstance], now: Instant) -> Vec<usize> {
        let mut healthy = Vec::with_capacity(candidates.len());
        let mut failed = Vec::new();
        for (i, c) in candidates.iter().enumerate() {
            match self.instances.peek(&c.id) {
                Some(at) if now.saturating_duration_since(*at) <= self.instance_window => {
                    failed.push((*at, i))
                }
                _ => healthy.push(i),
            }
        }
        failed.sort();
        healthy.extend(failed.into_iter().map(|(_, i)| i));
        healthy
    }

    /// Whether a flight of `key` starting at `now` is a retry: the previous
    /// flight of the revision failed within the window.
    pub fn is_retry(&self, key: &CacheKey, now: Instant) -> bool {
        self.revisions
            .peek(key)
            .is_some_and(|at| now.saturating_duration_since(*at) <= self.revision_window)
    }

    /// Instance `id` failed, hung or was overtaken at `now`.
    pub fn instance_failed(&mut self, id: &str, now: Instant) {
        self.instances.put(id.to_string(), now);
    }

    /// Instance `id` answered with the right metadata.
    pub fn instance_answered(&mut self, id: &str) {
        self.instances.pop(id);
    }

    /// The flight of `key` failed at `now`.
    pub fn flight_failed(&mut self, key: &CacheKey, now: Instant) {
        self.revisions.put(key.clone(), now);
    }

    /// The flight of `key` resolved it.
    pub fn flight_resolved(&mut self, key: &CacheKey) {
        self.revisions.pop(key);
    }
}
