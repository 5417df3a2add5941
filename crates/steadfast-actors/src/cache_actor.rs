//! The metadata cache actor, shared by every resolver of an engine. It owns
//! the [`MetadataCache`] machine and the [`FetchMemory`], and runs one
//! flight per (app, revision): a spawned future that performs a
//! [`FetchPlan`] (candidates hedged under one whole-fetch deadline, each
//! call's panics contained) and whose result comes back into the actor.
//!
//! Every handler body runs under `contain`: a panic there is counted and
//! stops the actor under its supervisor, which re-creates it from its inputs
//! (restart clean, `CacheActor::recreate`) and re-runs the flights its
//! waiters still expect.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use futures::future::{self, Either};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt as _;
use steadfast_core::{
    check_metadata, fetch_contained, panic_message, CacheKey, FetchAction, FetchError, FetchMemory,
    FetchPlan, FetchPolicy, Lookup, MetadataCache, MetadataFetcher, MetadataInfo, ServiceInstance,
};
use tracing::Instrument as _;

use crate::contain::Contain;
use crate::messages::{AbandonMetadata, FetchMetadata, MetadataFetched, Shutdown};
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

struct Waiter {
    resolver: u64,
    token: u64,
    reply: WeakRecipient<MetadataFetched>,
}

struct FlightRecord {
    id: u64,
    candidates: Arc<Vec<ServiceInstance>>,
    handle: Option<SpawnHandle>,
}

/// Owns the shared metadata cache and the flights that fill it.
pub struct CacheActor {
    cache: MetadataCache<Waiter>,
    /// The cache's capacity (a replacement gets the same).
    capacity: usize,
    flights: HashMap<CacheKey, FlightRecord>,
    fetcher: Arc<dyn MetadataFetcher>,
    policy: FetchPolicy,
    memory: FetchMemory,
    stats: Arc<EngineStats>,
    terminated: bool,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

impl CacheActor {
    /// A cache of `capacity` revisions fetching through `fetcher`, each
    /// fetch of a revision planned by `policy` (whole-fetch deadline,
    /// hedging, call budgets).
    pub fn new(
        fetcher: Arc<dyn MetadataFetcher>,
        capacity: usize,
        policy: FetchPolicy,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            cache: MetadataCache::new(capacity),
            capacity,
            flights: HashMap::new(),
            fetcher,
            memory: FetchMemory::new(&policy),
            policy,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
            terminated: false,
        }
    }

    fn spawn_flight(&mut self, key: CacheKey, ctx: &mut Context<Self>) {
        let Some(rec) = self.flights.get(&key) else {
            return;
        };
        let (id, candidates) = (rec.id, rec.candidates.clone());
        let now = timer::now();
        let order = self.memory.order(&candidates, now);
        let retry = self.memory.is_retry(&key, now);
        EngineStats::bump(&self.stats.flights_started);
        let flight = Flight {
            fetcher: self.fetcher.clone(),
            app: key.0.clone(),
            revision: key.1.clone(),
            candidates,
            stats: self.stats.clone(),
        };
        // One span per revision resolution (flight); its fetch attempts are
        // child spans.
        let span = tracing::info_span!("resolve", app = %key.0, revision = %key.1, retry);
        let fut = AssertUnwindSafe(flight.run(self.policy, order, retry).instrument(span))
            .catch_unwind()
            .map(|r| r.unwrap_or_else(|p| Outcome::failed(panicked(p))));
        let k = key.clone();
        let handle = ctx.spawn(fut.into_actor(self).map(move |outcome, act, ctx| {
            act.contained(ctx, |act, _| act.on_flight_done(k, id, outcome));
        }));
        if let Some(rec) = self.flights.get_mut(&key) {
            rec.handle = Some(handle);
        }
    }

    fn on_flight_done(&mut self, key: CacheKey, id: u64, outcome: Outcome) {
        if self.flights.get(&key).map(|r| r.id) == Some(id) {
            if let Some(rec) = self.flights.remove(&key) {
                self.remember(&key, &rec.candidates, &outcome);
            }
        }
        for w in self.cache.complete(&key, id, &outcome.result) {
            reply(&w, &key, outcome.result.clone());
        }
    }

    fn remember(&mut self, key: &CacheKey, candidates: &[ServiceInstance], outcome: &Outcome) {
        let now = timer::now();
        for c in outcome.failed.iter().filter_map(|i| candidates.get(*i)) {
            self.memory.instance_failed(&c.id, now);
        }
        if let Some(c) = outcome.answered.and_then(|i| candidates.get(i)) {
            self.memory.instance_answered(&c.id);
        }
        match outcome.result {
            Ok(_) => self.memory.flight_resolved(key),
            Err(_) => self.memory.flight_failed(key, now),
        }
    }

    /// Restart clean: a new actor from the same inputs, with a fresh
    /// cache machine and fresh flight records. Carried over: the metadata
    /// learned (immutable, checked values, re-seeded in recency order), the
    /// providers' failure memory (so a restart never lifts the load
    /// bounds of retries), the panic schedule and the shut-down flag. Every
    /// waiter of a flight under way asks the new machine again (one flight
    /// per revision, re-run in `started`); a waiter whose flight record the
    /// panic kept from being written is answered with an error, so its
    /// resolver retries on schedule.
    fn recreate(&mut self) -> Self {
        let mut fresh = Self::new(
            self.fetcher.clone(),
            self.capacity,
            self.policy,
            self.stats.clone(),
        );
        for (key, info) in self.cache.entries() {
            fresh.cache.seed(key, info);
        }
        fresh.memory = std::mem::replace(&mut self.memory, FetchMemory::new(&self.policy));
        let candidates: HashMap<CacheKey, Arc<Vec<ServiceInstance>>> = self
            .flights
            .drain()
            .map(|(k, rec)| (k, rec.candidates))
            .collect();
        for (key, waiter) in self.cache.drain_flights() {
            let Some(c) = candidates.get(&key) else {
                let err = Err(FetchError::Panicked("metadata cache restarted".into()));
                reply(&waiter, &key, err);
                continue;
            };
            match fresh.cache.request(key.clone(), waiter) {
                Lookup::Start(id) => {
                    let rec = FlightRecord {
                        id,
                        candidates: c.clone(),
                        handle: None,
                    };
                    fresh.flights.insert(key, rec);
                }
                Lookup::Joined => {}
                Lookup::Hit(info, w) => reply(&w, &key, Ok(info)),
            }
        }
        fresh.containment = std::mem::take(&mut self.containment);
        fresh.terminated = self.terminated;
        fresh
    }
}

fn panicked(payload: Box<dyn std::any::Any + Send>) -> FetchError {
    FetchError::Panicked(panic_message(payload.as_ref()))
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

/// What a flight ended with, and what it learned about its candidates.
struct Outcome {
    result: Result<Arc<MetadataInfo>, FetchError>,
    /// Candidates that failed, hung or were overtaken.
    failed: Vec<usize>,
    /// The candidate that answered.
    answered: Option<usize>,
}

impl Outcome {
    fn failed(err: FetchError) -> Self {
        Self {
            result: Err(err),
            failed: Vec::new(),
            answered: None,
        }
    }
}

/// One flight: performs the actions of a [`FetchPlan`].
struct Flight {
    fetcher: Arc<dyn MetadataFetcher>,
    app: String,
    revision: String,
    candidates: Arc<Vec<ServiceInstance>>,
    stats: Arc<EngineStats>,
}

impl Flight {
    async fn run(self, policy: FetchPolicy, order: Vec<usize>, retry: bool) -> Outcome {
        let _in_flight = LiveGuard::new(&self.stats, Live::Flight);
        let (mut plan, mut actions) = FetchPlan::start(&policy, order, retry, timer::now());
        let mut calls = FuturesUnordered::new();
        let mut wake = plan.deadline();
        let mut out = Outcome::failed(FetchError::Timeout);
        let mut answer: Option<MetadataInfo> = None;
        let mut expired = false;
        // Bounded in time: the plan gives its verdict by its deadline (each
        // turn takes one answer or waits for the plan's next wake-up). A
        // plan that ends, or outlives its deadline, without a verdict is a
        // bug, reported as one below, never as a provider's timeout.
        let deadline = plan.deadline();
        let overdue = deadline
            .checked_add(std::time::Duration::from_secs(1))
            .unwrap_or(deadline);
        loop {
            for action in std::mem::take(&mut actions) {
                match action {
                    FetchAction::Start { candidate, hedged } => {
                        let Some(instance) = self.candidates.get(candidate) else {
                            continue;
                        };
                        EngineStats::bump(&self.stats.fetch_attempts);
                        if hedged {
                            EngineStats::bump(&self.stats.fetch_hedged);
                        }
                        let span = tracing::debug_span!(
                            "fetch",
                            candidate = %instance.id,
                            hedged,
                            outcome = tracing::field::Empty
                        );
                        let call = fetch_contained(self.fetcher.as_ref(), instance, &self.revision)
                            .instrument(span.clone());
                        calls.push(call.map(move |r| {
                            span.record("outcome", r.as_ref().map_or_else(|e| e.label(), |_| "ok"));
                            tracing::trace!(parent: &span, "metadata fetch attempt ended");
                            (candidate, r)
                        }));
                    }
                    FetchAction::WakeAt(at) => wake = at,
                    FetchAction::TimedOut(c) => {
                        expired = true;
                        self.failure(c, &FetchError::Timeout, &mut out);
                    }
                    FetchAction::Abandoned { candidate, slow } => {
                        if slow {
                            out.failed.push(candidate);
                        }
                    }
                    FetchAction::Resolved(c) => {
                        if retry {
                            tracing::info!(app = %self.app, revision = %self.revision, "metadata resolved after failures");
                        }
                        out.answered = Some(c);
                        out.result = answer.take().map(Arc::new).ok_or(FetchError::NoCandidates);
                        return out;
                    }
                    FetchAction::Failed(e) => {
                        if expired {
                            EngineStats::bump(&self.stats.fetch_deadlines);
                        }
                        // Warn once per state change: the first failed
                        // flight of a revision; its retries log at debug.
                        if retry {
                            tracing::debug!(app = %self.app, revision = %self.revision, error = %e, kind = e.label(), "metadata still unresolved; retrying");
                        } else {
                            tracing::warn!(app = %self.app, revision = %self.revision, error = %e, kind = e.label(), "metadata unresolved; retrying with backoff");
                        }
                        out.result = Err(e);
                        return out;
                    }
                }
            }
            if plan.is_done() || timer::now() > overdue {
                break;
            }
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake));
            let next = if calls.is_empty() {
                sleep.await;
                None
            } else {
                futures::pin_mut!(sleep);
                match future::select(calls.next(), sleep).await {
                    Either::Left((answered, _)) => answered,
                    Either::Right(_) => None,
                }
            };
            let now = timer::now();
            actions = match next {
                None => plan.on_wake(now),
                Some((c, result)) => match result.and_then(|info| {
                    check_metadata(&self.app, &self.revision, &info).map(|()| info)
                }) {
                    Ok(info) => {
                        answer = Some(info);
                        plan.on_success(c, now)
                    }
                    Err(e) => {
                        self.failure(c, &e, &mut out);
                        plan.on_failure(c, e, now)
                    }
                },
            };
        }
        tracing::error!(app = %self.app, revision = %self.revision, "fetch plan ended without a verdict (a bug)");
        out.result = Err(FetchError::Panicked(
            "fetch plan ended without a verdict".into(),
        ));
        out
    }

    /// Counts and logs (at debug: the flight's end warns once per state
    /// change) the failure of candidate `c` as it happens.
    fn failure(&self, c: usize, e: &FetchError, out: &mut Outcome) {
        self.stats.record_fetch_failure(e);
        out.failed.push(c);
        let instance = self.candidates.get(c).map_or("?", |i| i.id.as_str());
        tracing::debug!(app = %self.app, revision = %self.revision, instance, error = %e, kind = e.label(), "metadata fetch failed");
    }
}

impl Actor for CacheActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            // Restarted after shutdown while an address was still held:
            // stay idle; the actor ends when its last address drops.
            return;
        }
        // After a restart: run the flights again for the waiters that still
        // expect an answer.
        let keys: Vec<CacheKey> = self.flights.keys().cloned().collect();
        for key in keys {
            self.contained(ctx, |act, ctx| act.spawn_flight(key, ctx));
        }
    }
}

impl Supervised for CacheActor {
    /// Nothing of the old actor's state survives but what
    /// [`CacheActor::recreate`] names; the old context's flights are gone.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        *self = self.recreate();
    }
}

impl Handler<FetchMetadata> for CacheActor {
    type Result = ();
    fn handle(&mut self, msg: FetchMetadata, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        self.contained(ctx, |act, ctx| {
            // A panic here loses the request: the resolver's fetch guard
            // turns that into a timeout and the revision is retried.
            act.containment.drill_point();
            let waiter = Waiter {
                resolver: msg.resolver,
                token: msg.token,
                reply: msg.reply,
            };
            match act.cache.request(msg.key.clone(), waiter) {
                Lookup::Hit(info, w) => {
                    EngineStats::bump(&act.stats.metadata_cache_hits);
                    reply(&w, &msg.key, Ok(info));
                }
                Lookup::Joined => {}
                Lookup::Start(id) => {
                    act.flights.insert(
                        msg.key.clone(),
                        FlightRecord {
                            id,
                            candidates: Arc::new(msg.candidates),
                            handle: None,
                        },
                    );
                    act.spawn_flight(msg.key, ctx);
                }
            }
        });
    }
}

impl Handler<AbandonMetadata> for CacheActor {
    type Result = ();
    fn handle(&mut self, msg: AbandonMetadata, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let keys = match msg.key {
                Some(key) => vec![key],
                None => act.flights.keys().cloned().collect(),
            };
            for key in keys {
                let orphaned = act.cache.abandon(&key, |w| {
                    w.resolver == msg.resolver && msg.tokens.contains(&w.token)
                });
                let Some(id) = orphaned else { continue };
                if act.flights.get(&key).is_some_and(|r| r.id == id) {
                    if let Some(h) = act.flights.remove(&key).and_then(|r| r.handle) {
                        ctx.cancel_future(h);
                    }
                }
            }
        });
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

crate::contain::contained_actor!(CacheActor, "cache");

impl Handler<crate::messages::RecallMetadata> for CacheActor {
    type Result = MessageResult<crate::messages::RecallMetadata>;
    fn handle(
        &mut self,
        msg: crate::messages::RecallMetadata,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        let known = self.contained(ctx, |act, _| act.cache.of_app(&msg.app));
        MessageResult(known.unwrap_or_default())
    }
}

impl Handler<crate::messages::SeedMetadata> for CacheActor {
    type Result = ();
    fn handle(&mut self, msg: crate::messages::SeedMetadata, ctx: &mut Self::Context) {
        self.contained(ctx, |act, _| {
            act.cache.seed(msg.key, msg.info);
        });
    }
}
#[cfg(test)]
mod tests;
