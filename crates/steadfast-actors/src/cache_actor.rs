//! The metadata cache actor, shared by every resolver of an engine. It owns
//! the [`MetadataCache`] machine and runs one flight per (app, revision):
//! a spawned future that tries the candidates in turn, each under a
//! deadline, and whose result comes back into the actor as a message.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakRecipient;
use steadfast_core::{
    check_metadata, CacheKey, ErrorClass, FetchError, Lookup, MetadataCache, MetadataFetcher,
    MetadataInfo, ServiceInstance,
};

use crate::messages::{AbandonMetadata, FetchMetadata, ForceRestart, MetadataFetched, Shutdown};
use crate::stats::{EngineStats, Live, LiveGuard};

struct Waiter {
    resolver: u64,
    token: u64,
    reply: WeakRecipient<MetadataFetched>,
}

struct FlightRecord {
    id: u64,
    candidates: Vec<ServiceInstance>,
    handle: Option<SpawnHandle>,
}

/// Owns the shared metadata cache and the flights that fill it.
pub struct CacheActor {
    cache: MetadataCache<Waiter>,
    flights: HashMap<CacheKey, FlightRecord>,
    fetcher: Arc<dyn MetadataFetcher>,
    fetch_timeout: Duration,
    stats: Arc<EngineStats>,
    terminated: bool,
    _alive: LiveGuard,
}

impl CacheActor {
    /// A cache of `capacity` revisions fetching through `fetcher`, each
    /// attempt bounded by `fetch_timeout`.
    pub fn new(
        fetcher: Arc<dyn MetadataFetcher>,
        capacity: usize,
        fetch_timeout: Duration,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            cache: MetadataCache::new(capacity),
            flights: HashMap::new(),
            fetcher,
            fetch_timeout,
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
            terminated: false,
        }
    }

    fn spawn_flight(&mut self, key: CacheKey, ctx: &mut Context<Self>) {
        let Some(rec) = self.flights.get(&key) else {
            return;
        };
        let id = rec.id;
        let candidates = rec.candidates.clone();
        EngineStats::bump(&self.stats.flights_started);
        let fut = fetch_first(
            self.fetcher.clone(),
            key.clone(),
            candidates,
            self.fetch_timeout,
            self.stats.clone(),
        );
        let k = key.clone();
        let handle = ctx.spawn(
            fut.into_actor(self)
                .map(move |res, act, _ctx| act.on_flight_done(k, id, res)),
        );
        if let Some(rec) = self.flights.get_mut(&key) {
            rec.handle = Some(handle);
        }
    }

    fn on_flight_done(
        &mut self,
        key: CacheKey,
        id: u64,
        result: Result<Arc<MetadataInfo>, FetchError>,
    ) {
        if self.flights.get(&key).map(|r| r.id) == Some(id) {
            self.flights.remove(&key);
        }
        for w in self.cache.complete(&key, id, &result) {
            reply(&w, &key, result.clone());
        }
    }
}

fn reply(w: &Waiter, key: &CacheKey, result: Result<Arc<MetadataInfo>, FetchError>) {
    if let Some(r) = w.reply.upgrade() {
        r.do_send(MetadataFetched {
            revision: key.1.clone(),
            token: w.token,
            result,
        });
    }
}

/// Tries `candidates` in turn until one serves the right metadata. Each
/// attempt is bounded by `deadline`; the last error is returned.
async fn fetch_first(
    fetcher: Arc<dyn MetadataFetcher>,
    key: CacheKey,
    candidates: Vec<ServiceInstance>,
    deadline: Duration,
    stats: Arc<EngineStats>,
) -> Result<Arc<MetadataInfo>, FetchError> {
    let _in_flight = LiveGuard::new(&stats, Live::Flight);
    let (app, revision) = key;
    // The error reported when every candidate fails: a transient one if any
    // candidate failed transiently, so one broken instance does not push
    // the whole revision to the capped delay while others may recover soon.
    let mut last = FetchError::NoCandidates;
    let mut transient: Option<FetchError> = None;
    for instance in &candidates {
        EngineStats::bump(&stats.fetch_attempts);
        let outcome = match tokio::time::timeout(deadline, fetcher.fetch(instance, &revision)).await
        {
            Ok(Ok(info)) => check_metadata(&app, &revision, &info).map(|_| info),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(FetchError::Timeout),
        };
        match outcome {
            Ok(info) => return Ok(Arc::new(info)),
            Err(e) => {
                stats.record_fetch_failure(&e);
                tracing::warn!(app, revision, instance = %instance.id, error = %e, kind = e.label(), "metadata fetch failed");
                if e.class() == ErrorClass::Transient {
                    transient = Some(e.clone());
                }
                last = e;
            }
        }
    }
    Err(transient.unwrap_or(last))
}

impl Actor for CacheActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            // Restarted after shutdown while an address was still held:
            // stay idle; the actor ends when its last address drops.
            return;
        }
        // After a restart the flights' futures are gone: run them again for
        // the waiters that still expect an answer.
        let keys: Vec<CacheKey> = self.flights.keys().cloned().collect();
        for key in keys {
            self.spawn_flight(key, ctx);
        }
    }
}

impl Supervised for CacheActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        for rec in self.flights.values_mut() {
            rec.handle = None;
        }
    }
}

impl Handler<FetchMetadata> for CacheActor {
    type Result = ();
    fn handle(&mut self, msg: FetchMetadata, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        let waiter = Waiter {
            resolver: msg.resolver,
            token: msg.token,
            reply: msg.reply,
        };
        match self.cache.request(msg.key.clone(), waiter) {
            Lookup::Hit(info, w) => reply(&w, &msg.key, Ok(info)),
            Lookup::Joined => {}
            Lookup::Start(id) => {
                self.flights.insert(
                    msg.key.clone(),
                    FlightRecord {
                        id,
                        candidates: msg.candidates,
                        handle: None,
                    },
                );
                self.spawn_flight(msg.key, ctx);
            }
        }
    }
}

impl Handler<AbandonMetadata> for CacheActor {
    type Result = ();
    fn handle(&mut self, msg: AbandonMetadata, ctx: &mut Self::Context) {
        let orphaned = self.cache.abandon(&msg.key, |w| {
            w.resolver == msg.resolver && w.token == msg.token
        });
        if let Some(id) = orphaned {
            if let Some(rec) = self.flights.remove(&msg.key) {
                debug_assert_eq!(rec.id, id);
                if let Some(h) = rec.handle {
                    ctx.cancel_future(h);
                }
            }
        }
    }
}

impl Handler<Shutdown> for CacheActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        for (_, rec) in self.flights.drain() {
            if let Some(h) = rec.handle {
                ctx.cancel_future(h);
            }
        }
        self.cache.drain_flights();
        ctx.stop();
    }
}

impl Handler<ForceRestart> for CacheActor {
    type Result = ();
    fn handle(&mut self, _: ForceRestart, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl crate::contain::Contain for CacheActor {
    const NAME: &'static str = "cache";
    fn engine_stats(&self) -> &Arc<EngineStats> {
        &self.stats
    }
}

impl Handler<crate::contain::DrillPanic> for CacheActor {
    type Result = ();
    fn handle(&mut self, _: crate::contain::DrillPanic, ctx: &mut Self::Context) {
        crate::contain::drill(self, ctx);
    }
}
