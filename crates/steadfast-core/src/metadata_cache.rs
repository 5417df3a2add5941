//! Sans-IO metadata cache shared by every resolver of an engine: a bounded
//! LRU keyed by (app, revision) plus a table of in-flight fetches, so
//! concurrent requests for one key share one flight.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;

use crate::error::FetchError;
use crate::model::MetadataInfo;

/// Cache key: (app, revision).
pub type CacheKey = (String, String);

/// Identifies one flight so a late completion of a cancelled flight is ignored.
pub type FlightId = u64;

/// What to do with a request.
#[derive(Debug)]
pub enum Lookup<W> {
    /// The metadata is cached: answer the waiter (handed back) now.
    Hit(Arc<MetadataInfo>, W),
    /// A flight for the key is under way; the waiter joined it.
    Joined,
    /// No flight: start one with this id.
    Start(FlightId),
}

struct Flight<W> {
    id: FlightId,
    waiters: Vec<W>,
}

/// Bounded metadata LRU with one flight per key. `W` identifies a waiter.
pub struct MetadataCache<W> {
    lru: LruCache<CacheKey, Arc<MetadataInfo>>,
    flights: HashMap<CacheKey, Flight<W>>,
    next_flight: FlightId,
}

impl<W> MetadataCache<W> {
    /// A cache holding at most `capacity` revisions (at least one).
    pub fn new(capacity: usize) -> Self {
        let cap = NonZeroUsize::new(capacity.max(1)).expect("capacity is at least one");
        Self {
            lru: LruCache::new(cap),
            flights: HashMap::new(),
            next_flight: 1,
        }
    }

    /// Caches `info` for `key` unless it is cached already (metadata known
    /// from a disk snapshot). Returns whether it was inserted.
    pub fn seed(&mut self, key: CacheKey, info: Arc<MetadataInfo>) -> bool {
        if self.lru.contains(&key) {
            return false;
        }
        self.lru.put(key, info);
        true
    }

    /// Every cached revision with its metadata, least recently used first
    /// (so seeding them in order into a new cache keeps their recency).
    pub fn entries(&self) -> Vec<(CacheKey, Arc<MetadataInfo>)> {
        self.lru
            .iter()
            .rev()
            .map(|(k, info)| (k.clone(), info.clone()))
            .collect()
    }

    /// Every revision of `app` cached, with its metadata (no use is
    /// recorded: a recall by a re-created resolver, `resolver/resume.rs`).
    pub fn of_app(&self, app: &str) -> Vec<(String, Arc<MetadataInfo>)> {
        self.lru
            .iter()
            .filter(|((a, _), _)| a == app)
            .map(|((_, rev), info)| (rev.clone(), info.clone()))
            .collect()
    }

    /// Looks `key` up for `waiter`.
    pub fn request(&mut self, key: CacheKey, waiter: W) -> Lookup<W> {
        if let Some(hit) = self.lru.get(&key) {
            return Lookup::Hit(hit.clone(), waiter);
        }
        if let Some(f) = self.flights.get_mut(&key) {
            f.waiters.push(waiter);
            return Lookup::Joined;
        }
        let id = self.next_flight;
        self.next_flight = self.next_flight.wrapping_add(1).max(1);
        self.flights.insert(
            key,
            Flight {
                id,
                waiters: vec![waiter],
            },
        );
        Lookup::Start(id)
    }

    /// Records the end of flight `id` for `key`: caches a success and returns
    /// the waiters to answer. A completion of an unknown flight returns none.
    pub fn complete(
        &mut self,
        key: &CacheKey,
        id: FlightId,
        result: &Result<Arc<MetadataInfo>, FetchError>,
    ) -> Vec<W> {
        match self.flights.get(key) {
            Some(f) if f.id == id => {}
            _ => return Vec::new(),
        }
        let Some(flight) = self.flights.remove(key) else {
            return Vec::new();
        };
        if let Ok(info) = result {
            self.lru.put(key.clone(), info.clone());
        }
        flight.waiters
    }

    /// Removes the waiters matching `is_waiter` from the flight of `key`.
    /// Returns the flight id when no waiter is left, so the caller cancels it.
    pub fn abandon(&mut self, key: &CacheKey, is_waiter: impl Fn(&W) -> bool) -> Option<FlightId> {
        let f = self.flights.get_mut(key)?;
        f.waiters.retain(|w| !is_waiter(w));
        if f.waiters.is_empty() {
            let id = f.id;
            self.flights.remove(key);
            Some(id)
        } else {
            None
        }
    }

    /// Drops every flight (their futures are gone, e.g. after a restart) and
    /// returns their waiters so they can be told.
    pub fn drain_flights(&mut self) -> Vec<(CacheKey, W)> {
        self.flights
            .drain()
            .flat_map(|(k, f)| f.waiters.into_iter().map(move |w| (k.clone(), w)))
            .collect()
    }

    /// Number of cached revisions.
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.lru.is_empty()
    }

    /// Number of flights under way.
    pub fn flights(&self) -> usize {
        self.flights.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(rev: &str) -> Arc<MetadataInfo> {
        Arc::new(MetadataInfo {
            app: "a".into(),
            revision: rev.into(),
            services: Default::default(),
        })
    }

    fn key(rev: &str) -> CacheKey {
        ("a".into(), rev.into())
    }

    #[test]
    fn one_flight_per_key_and_hits_after_success() {
        let mut c: MetadataCache<u32> = MetadataCache::new(2);
        let Lookup::Start(id) = c.request(key("r1"), 1) else {
            panic!()
        };
        assert!(matches!(c.request(key("r1"), 2), Lookup::Joined));
        assert_eq!(c.complete(&key("r1"), id, &Ok(info("r1"))), vec![1, 2]);
        assert!(matches!(c.request(key("r1"), 3), Lookup::Hit(..)));
    }

    #[test]
    fn failures_are_not_cached_and_lru_is_bounded() {
        let mut c: MetadataCache<u32> = MetadataCache::new(2);
        let Lookup::Start(id) = c.request(key("r1"), 1) else {
            panic!()
        };
        c.complete(&key("r1"), id, &Err(FetchError::Timeout));
        assert!(matches!(c.request(key("r1"), 1), Lookup::Start(_)));
        for r in ["x", "y", "z"] {
            let Lookup::Start(id) = c.request(key(r), 1) else {
                panic!()
            };
            c.complete(&key(r), id, &Ok(info(r)));
        }
        assert_eq!(c.len(), 2);
        assert!(matches!(c.request(key("x"), 1), Lookup::Start(_)));
    }

    #[test]
    fn abandon_cancels_only_orphaned_flights_and_stale_completion_is_ignored() {
        let mut c: MetadataCache<u32> = MetadataCache::new(2);
        let Lookup::Start(id) = c.request(key("r"), 1) else {
            panic!()
        };
        c.request(key("r"), 2);
        assert_eq!(c.abandon(&key("r"), |w| *w == 1), None);
        assert_eq!(c.abandon(&key("r"), |w| *w == 2), Some(id));
        assert!(c.complete(&key("r"), id, &Ok(info("r"))).is_empty());
        assert!(c.is_empty());
    }

    #[test]
    fn entries_list_least_recent_first_so_a_new_cache_keeps_their_recency() {
        let mut c: MetadataCache<u32> = MetadataCache::new(2);
        c.seed(key("a"), info("a"));
        c.seed(key("b"), info("b"));
        let Lookup::Hit(..) = c.request(key("a"), 1) else {
            panic!("a is cached")
        };
        let entries = c.entries();
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.1.as_str()).collect();
        assert_eq!(keys, ["b", "a"], "a was used last");
        let mut fresh: MetadataCache<u32> = MetadataCache::new(2);
        for (k, info) in entries {
            fresh.seed(k, info);
        }
        fresh.seed(key("c"), info("c"));
        assert!(
            matches!(fresh.request(key("a"), 1), Lookup::Hit(..)),
            "kept"
        );
        assert!(
            matches!(fresh.request(key("b"), 1), Lookup::Start(_)),
            "evicted first"
        );
    }
}
