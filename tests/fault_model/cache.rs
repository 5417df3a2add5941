//! The metadata cache actor's shell, as in `steadfast-actors/src/cache_actor.rs`:
//! the [`MetadataCache`] machine keeps one flight per (app, revision); each
//! flight run performs a [`FetchPlan`] (hedged candidates under one
//! whole-fetch deadline) against the simulated providers, and the
//! [`FetchMemory`] orders candidates and says which flights are retries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use steadfast_core::{
    check_metadata, CacheKey, FetchAction, FetchError, FetchMemory, FetchPlan, FetchPolicy, Lookup,
    MetadataCache, MetadataInfo, ServiceInstance, Token,
};

use super::sim::{Event, Msg, Sim};

/// Revisions the cache holds: small, so evictions make resolvers refetch.
const CACHE_CAPACITY: usize = 3;

/// Who waits for a flight.
pub struct Waiter {
    /// Resolver id.
    pub resolver: u64,
    /// The resolver's fetch token.
    pub token: Token,
}

/// One run of a flight (a restart of the cache starts a new one).
pub struct Run {
    /// Run id (events of older runs are dropped).
    pub id: u64,
    /// The candidate policy.
    pub plan: FetchPlan,
    /// Candidates called and not answered.
    pub calls: BTreeSet<usize>,
    /// Sequence of the latest wake asked for.
    pub wake: u64,
    /// Candidates that failed, hung or were overtaken.
    pub failed: Vec<usize>,
    /// The candidate that answered.
    pub answered: Option<usize>,
    /// Its answer.
    pub answer: Option<MetadataInfo>,
    /// Answers and wakes taken (the shell's loop is bounded).
    pub turns: usize,
    /// Provider calls started.
    pub started: usize,
    /// Provider calls the fetch budget allows this run.
    pub allowed: usize,
    /// A call timed out at the deadline.
    pub expired: bool,
}

/// A flight of the cache machine and its current run.
pub struct FlightRec {
    /// The cache machine's flight id.
    pub id: u64,
    /// Instances to try.
    pub candidates: Arc<Vec<ServiceInstance>>,
    /// The run under way (none between a restart and its re-run).
    pub run: Option<Run>,
}

/// The cache actor.
pub struct CacheShell {
    /// The machine.
    pub cache: MetadataCache<Waiter>,
    /// Flights under way.
    pub flights: BTreeMap<CacheKey, FlightRec>,
    /// Run id -> flight key.
    pub runs: BTreeMap<u64, CacheKey>,
    /// What earlier flights taught.
    pub memory: FetchMemory,
    next_run: u64,
    /// Shut down.
    pub terminated: bool,
}

impl CacheShell {
    /// An empty cache with the memory windows of `policy`.
    pub fn new(policy: &FetchPolicy) -> Self {
        Self {
            cache: MetadataCache::new(CACHE_CAPACITY),
            flights: BTreeMap::new(),
            runs: BTreeMap::new(),
            memory: FetchMemory::new(policy),
            next_run: 0,
            terminated: false,
        }
    }
}

impl Sim {
    /// `FetchMetadata` from a resolver.
    pub fn cache_request(
        &mut self,
        key: CacheKey,
        candidates: Vec<ServiceInstance>,
        resolver: u64,
        token: Token,
    ) {
        if self.cache.terminated {
            return;
        }
        match self
            .cache
            .cache
            .request(key.clone(), Waiter { resolver, token })
        {
            Lookup::Hit(info, w) => self.send(Msg::Fetched {
                to: w.resolver,
                revision: key.1,
                token: w.token,
                result: Ok(info),
            }),
            Lookup::Joined => {}
            Lookup::Start(id) => {
                let candidates = Arc::new(candidates);
                let rec = FlightRec {
                    id,
                    candidates,
                    run: None,
                };
                self.cache.flights.insert(key.clone(), rec);
                self.spawn_flight(key);
            }
        }
    }

    /// `AbandonMetadata` (one key, or every key): a flight without
    /// waiters is cancelled.
    pub fn cache_abandon(
        &mut self,
        key: Option<CacheKey>,
        resolver: u64,
        tokens: std::ops::Range<Token>,
    ) {
        let keys = match key {
            Some(key) => vec![key],
            None => self.cache.flights.keys().cloned().collect(),
        };
        for key in keys {
            let orphaned = self.cache.cache.abandon(&key, |w| {
                w.resolver == resolver && tokens.contains(&w.token)
            });
            let Some(id) = orphaned else { continue };
            if self.cache.flights.get(&key).is_some_and(|r| r.id == id) {
                if let Some(run) = self.cache.flights.remove(&key).and_then(|r| r.run) {
                    self.cache.runs.remove(&run.id);
                }
            }
        }
    }

    /// A supervised restart, as the actor does it: re-created with a fresh
    /// cache machine holding the metadata learned (in recency order) and
    /// the failure memory; every run is lost, and each waiter asks the new
    /// machine again, whose flights are re-run.
    pub fn cache_restart(&mut self) {
        if self.cache.terminated {
            return;
        }
        let mut fresh: MetadataCache<Waiter> = MetadataCache::new(CACHE_CAPACITY);
        for (key, info) in self.cache.cache.entries() {
            fresh.seed(key, info);
        }
        let old = std::mem::take(&mut self.cache.flights);
        self.cache.runs.clear();
        for (key, waiter) in self.cache.cache.drain_flights() {
            let Some(rec) = old.get(&key) else { continue };
            if let Lookup::Start(id) = fresh.request(key.clone(), waiter) {
                let rec = FlightRec {
                    id,
                    candidates: rec.candidates.clone(),
                    run: None,
                };
                self.cache.flights.insert(key, rec);
            }
        }
        self.cache.cache = fresh;
        let keys: Vec<CacheKey> = self.cache.flights.keys().cloned().collect();
        for key in keys {
            self.spawn_flight(key);
        }
    }

    /// The coordinator's `Shutdown` to the cache.
    pub fn cache_shutdown(&mut self) {
        self.cache.terminated = true;
        self.cache.flights.clear();
        self.cache.runs.clear();
        self.cache.cache.drain_flights();
    }

    fn spawn_flight(&mut self, key: CacheKey) {
        let now = self.at();
        let Some(rec) = self.cache.flights.get(&key) else {
            return;
        };
        let candidates = rec.candidates.clone();
        let order = self.cache.memory.order(&candidates, now);
        let retry = self.cache.memory.is_retry(&key, now);
        // The budget, from this model's own record of failed flights; at
        // the window's edge either budget is allowed.
        let policy = self.cfg.fetch;
        let surely_retry = self
            .track
            .flight_failed
            .get(&key)
            .is_some_and(|t| self.now.saturating_sub(*t) < policy.revision_memory);
        let allowed = policy.budget(surely_retry).min(candidates.len());
        let (plan, actions) = FetchPlan::start(&policy, order, retry, now);
        self.cache.next_run += 1;
        let id = self.cache.next_run;
        let run = Run {
            id,
            plan,
            calls: BTreeSet::new(),
            wake: 0,
            failed: Vec::new(),
            answered: None,
            answer: None,
            turns: 0,
            started: 0,
            allowed,
            expired: false,
        };
        if let Some(rec) = self.cache.flights.get_mut(&key) {
            rec.run = Some(run);
        }
        self.cache.runs.insert(id, key.clone());
        self.stats.flights += 1;
        self.plan_perform(&key, id, actions);
    }

    /// The current run `run` of the flight of `key`.
    fn run_mut(&mut self, key: &CacheKey, run: u64) -> Option<&mut Run> {
        self.cache
            .flights
            .get_mut(key)?
            .run
            .as_mut()
            .filter(|r| r.id == run)
    }

    fn plan_perform(&mut self, key: &CacheKey, run: u64, actions: Vec<FetchAction>) {
        for action in actions {
            self.note(|| format!("  flight {}/{} run {run}: {action:?}", key.0, key.1));
            let now = self.now;
            let instance = match &action {
                FetchAction::Start { candidate, .. } => self
                    .cache
                    .flights
                    .get(key)
                    .and_then(|r| r.candidates.get(*candidate).cloned()),
                _ => None,
            };
            let t0 = self.t0;
            let Some(r) = self.run_mut(key, run) else {
                return;
            };
            match action {
                FetchAction::Start { candidate, hedged } => {
                    let Some(instance) = instance else { continue };
                    r.calls.insert(candidate);
                    r.started += 1;
                    let over = (r.started > r.allowed).then_some((r.started, r.allowed));
                    self.stats.calls += 1;
                    self.stats.hedged += u64::from(hedged);
                    if let Some((started, allowed)) = over {
                        self.violate(format!(
                            "[rate] flight of {key:?} made {started} provider calls, budget {allowed}"
                        ));
                    }
                    if let Some((after, result)) =
                        self.world.fetch(&instance, &key.1, &mut self.rng)
                    {
                        let ev = Event::CallDone {
                            run,
                            candidate,
                            result,
                        };
                        self.schedule(now + after, ev);
                    }
                }
                FetchAction::WakeAt(at) => {
                    r.wake += 1;
                    let seq = r.wake;
                    self.schedule(at.saturating_duration_since(t0), Event::Wake { run, seq });
                }
                FetchAction::TimedOut(c) => {
                    r.failed.push(c);
                    r.calls.remove(&c);
                    r.expired = true;
                }
                FetchAction::Abandoned { candidate, slow } => {
                    if slow {
                        r.failed.push(candidate);
                    }
                    r.calls.remove(&candidate);
                }
                FetchAction::Resolved(c) => {
                    r.answered = Some(c);
                    let result = r
                        .answer
                        .take()
                        .map(Arc::new)
                        .ok_or(FetchError::NoCandidates);
                    self.finish(key, run, result);
                    return;
                }
                FetchAction::Failed(e) => {
                    self.stats.deadlines += u64::from(r.expired);
                    self.finish(key, run, Err(e));
                    return;
                }
            }
        }
    }

    /// The flight is over: remember what it taught, answer its waiters.
    fn finish(&mut self, key: &CacheKey, run: u64, result: Result<Arc<MetadataInfo>, FetchError>) {
        let now = self.at();
        let Some(rec) = self.cache.flights.remove(key) else {
            return;
        };
        self.cache.runs.remove(&run);
        if let Some(r) = &rec.run {
            for c in r.failed.iter().filter_map(|i| rec.candidates.get(*i)) {
                self.cache.memory.instance_failed(&c.id, now);
            }
            if let Some(c) = r.answered.and_then(|i| rec.candidates.get(i)) {
                self.cache.memory.instance_answered(&c.id);
            }
        }
        if result.is_ok() {
            self.cache.memory.flight_resolved(key);
            self.track.flight_failed.remove(key);
        } else {
            self.cache.memory.flight_failed(key, now);
            self.track.flight_failed.insert(key.clone(), self.now);
        }
        for w in self.cache.cache.complete(key, rec.id, &result) {
            self.send(Msg::Fetched {
                to: w.resolver,
                revision: key.1.clone(),
                token: w.token,
                result: result.clone(),
            });
        }
    }

    /// A provider answered candidate `candidate` of run `run`.
    pub fn call_done(
        &mut self,
        run: u64,
        candidate: usize,
        result: Result<MetadataInfo, FetchError>,
    ) {
        let Some(key) = self.cache.runs.get(&run).cloned() else {
            return;
        };
        let now = self.at();
        let Some(r) = self.run_mut(&key, run) else {
            return;
        };
        if !r.calls.remove(&candidate) {
            return;
        }
        r.turns += 1;
        let checked = result.and_then(|info| check_metadata(&key.0, &key.1, &info).map(|()| info));
        let actions = match checked {
            Ok(info) => {
                r.answer = Some(info);
                r.plan.on_success(candidate, now)
            }
            Err(e) => {
                r.failed.push(candidate);
                let actions = r.plan.on_failure(candidate, e, now);
                self.stats.call_failures += 1;
                actions
            }
        };
        self.check_turns(&key, run);
        self.plan_perform(&key, run, actions);
    }

    /// A run's wake-up fired (only the latest one asked for counts).
    pub fn flight_wake(&mut self, run: u64, seq: u64) {
        let Some(key) = self.cache.runs.get(&run).cloned() else {
            return;
        };
        let now = self.at();
        let Some(r) = self.run_mut(&key, run) else {
            return;
        };
        if r.wake != seq {
            return;
        }
        r.turns += 1;
        let actions = r.plan.on_wake(now);
        self.check_turns(&key, run);
        self.plan_perform(&key, run, actions);
    }

    /// The shell's flight loop takes at most `2 * budget + 8` turns; a plan
    /// that needs more would be cut short there.
    fn check_turns(&mut self, key: &CacheKey, run: u64) {
        let Some(r) = self.run_mut(key, run) else {
            return;
        };
        let limit = r.plan.budget().saturating_mul(2).saturating_add(8);
        if r.turns > limit {
            let turns = r.turns;
            self.violate(format!(
                "[rate] flight of {key:?} took {turns} turns, the shell allows {limit}"
            ));
        }
    }
}
