//! The simulator core: a virtual clock with one ordered event queue (timers
//! by token, call completions, stream items, and the actors' messages,
//! which take 0-5 ms and keep their order per receiving actor, like an actix
//! mailbox). Invariants are checked whenever no message is in flight. The
//! actors' shells live in `registry.rs`, `engine.rs` and `cache.rs`, the
//! steps in `apply.rs`; every decision is the sans-IO machines' own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use steadfast_core::{
    BackoffPolicy, CacheKey, DirectoryUpdate, FetchError, FetchPolicy, MetadataInfo, RegistryError,
    RegistryEvent, ResolverMachine, ServiceInstance, SubscriptionMachine, Token,
};
use steadfast_core::{Delivery, SubscriptionConfig};

use super::cache::CacheShell;
use super::engine::{Coord, DirShell, ResShell};
use super::invariants::Track;
use super::registry::RegShell;
use super::world::{SimRng, World};

/// Events one schedule may process before it counts as a storm.
const MAX_EVENTS: usize = 200_000;

/// The configuration the model runs the machines with.
pub struct Cfg {
    /// Per-revision metadata retry backoff (the engine default).
    pub backoff: BackoffPolicy,
    /// Registry subscription (the default, with a 60 s periodic resync).
    pub sub: SubscriptionConfig,
    /// Fetch budget (the engine default).
    pub fetch: FetchPolicy,
}

impl Cfg {
    /// The engine's defaults, except a shorter resync interval so periodic
    /// resyncs happen within schedules.
    pub fn new() -> Self {
        let backoff = BackoffPolicy::default();
        let sub = SubscriptionConfig {
            reconcile_interval: Duration::from_secs(60),
            ..SubscriptionConfig::default()
        };
        let d = FetchPolicy::default();
        let fetch = FetchPolicy {
            revision_memory: d.revision_memory.max(backoff.cap().saturating_mul(2)),
            ..d
        };
        Self {
            backoff,
            sub,
            fetch,
        }
    }
}

/// A message between actors, delivered in FIFO order at the current time.
pub enum Msg {
    /// Resolver -> registry actor.
    WatchApp { app: String, id: u64 },
    /// Resolver -> registry actor.
    UnwatchApp { app: String, id: u64 },
    /// Coordinator -> registry actor.
    RegShutdown,
    /// Registry actor -> resolver.
    Delivery { to: u64, delivery: Delivery },
    /// Registry actor -> resolver.
    Health {
        to: u64,
        stale_since: Option<Instant>,
    },
    /// Cache -> resolver.
    Fetched {
        to: u64,
        revision: String,
        token: Token,
        result: Result<Arc<MetadataInfo>, FetchError>,
    },
    /// Resolver -> itself, behind the current burst.
    Flush { to: u64 },
    /// Directory -> resolver.
    Attach {
        to: u64,
        key: String,
        directory: u64,
    },
    /// Directory -> resolver.
    Detach {
        to: u64,
        key: String,
        directory: u64,
    },
    /// Coordinator -> resolver.
    ResShutdown { to: u64 },
    /// Resolver -> cache.
    FetchReq {
        key: CacheKey,
        candidates: Vec<ServiceInstance>,
        resolver: u64,
        token: Token,
    },
    /// Resolver -> cache.
    Abandon {
        key: Option<CacheKey>,
        resolver: u64,
        tokens: std::ops::Range<Token>,
    },
    /// Coordinator -> cache.
    CacheShutdown,
    /// Resolver -> directory.
    Update { to: u64, update: DirectoryUpdate },
}

/// One item of a registry watch stream.
#[derive(Clone, Debug)]
pub enum Item {
    /// A registry event (a Reset or a Delta).
    Event(RegistryEvent),
    /// The source is unhealthy now.
    Err(RegistryError),
    /// The stream ended.
    End,
}

/// Something due at a virtual time.
// A simulator's queue item: its size does not matter (a directory update
// naming closing instances made `Msg` the large variant).
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// A registry actor timer.
    RegTimer { app: String, token: Token },
    /// A `watch` open call returned.
    OpenDone {
        app: String,
        token: Token,
        result: Result<(), RegistryError>,
    },
    /// A `list` call returned (the listed state is read on arrival).
    ListDone {
        app: String,
        token: Token,
        result: Result<(), RegistryError>,
    },
    /// A stream item arrived.
    Item {
        app: String,
        token: Token,
        item: Item,
    },
    /// A resolver retry timer.
    ResTimer {
        to: u64,
        revision: String,
        token: Token,
    },
    /// A provider answered one candidate call of a flight run.
    CallDone {
        run: u64,
        candidate: usize,
        result: Result<MetadataInfo, FetchError>,
    },
    /// A flight run's wake-up.
    Wake { run: u64, seq: u64 },
    /// A directory's tombstone-expiry timer.
    TombTimer { to: u64 },
    /// A message reaches its actor.
    Msg(Msg),
}

/// The actor a message goes to (each one's mailbox keeps its order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Recv {
    Registry,
    Cache,
    Resolver(u64),
    Directory(u64),
}

impl Msg {
    fn receiver(&self) -> Recv {
        match self {
            Msg::WatchApp { .. } | Msg::UnwatchApp { .. } | Msg::RegShutdown => Recv::Registry,
            Msg::FetchReq { .. } | Msg::Abandon { .. } | Msg::CacheShutdown => Recv::Cache,
            Msg::Delivery { to, .. }
            | Msg::Health { to, .. }
            | Msg::Fetched { to, .. }
            | Msg::Flush { to }
            | Msg::Attach { to, .. }
            | Msg::Detach { to, .. }
            | Msg::ResShutdown { to } => Recv::Resolver(*to),
            Msg::Update { to, .. } => Recv::Directory(*to),
        }
    }
}

/// Counters of what a schedule exercised.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Events processed.
    pub events: u64,
    /// Resolver fetch starts.
    pub fetches: u64,
    /// Provider calls.
    pub calls: u64,
    /// Failed provider calls.
    pub call_failures: u64,
    /// Flight runs.
    pub flights: u64,
    /// Resyncs that found missed notifications.
    pub reconciled: u64,
    /// Mass-expiry holds.
    pub holds: u64,
    /// Restarts performed.
    pub restarts: u64,
    /// Provider calls started by the hedge.
    pub hedged: u64,
    /// Flights ended by their deadline.
    pub deadlines: u64,
    /// Watch opens.
    pub opens: u64,
    /// Registry probes armed.
    pub probes: u64,
    /// Delta events pushed on streams.
    pub deltas: u64,
    /// Events the subscription machine ignored as not newer.
    pub ignored_older: u64,
    /// Registry deltas that did not follow (a notification was missed).
    pub gaps: u64,
    /// Resets a resolver asked for (a delta on top of a state it lacks).
    pub resets_requested: u64,
    /// Updates a directory could not apply (it asked for the whole state).
    pub need_full: u64,
    /// Deliveries and updates lost to handler panics.
    pub lost: u64,
}

impl Stats {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Stats) {
        self.events += other.events;
        self.fetches += other.fetches;
        self.calls += other.calls;
        self.call_failures += other.call_failures;
        self.flights += other.flights;
        self.reconciled += other.reconciled;
        self.holds += other.holds;
        self.restarts += other.restarts;
        self.hedged += other.hedged;
        self.deadlines += other.deadlines;
        self.opens += other.opens;
        self.probes += other.probes;
        self.deltas += other.deltas;
        self.ignored_older += other.ignored_older;
        self.gaps += other.gaps;
        self.resets_requested += other.resets_requested;
        self.need_full += other.need_full;
        self.lost += other.lost;
    }
}

/// The whole simulated engine and its world.
pub struct Sim {
    /// Virtual time zero.
    pub t0: Instant,
    /// Virtual time now, since `t0`.
    pub now: Duration,
    /// Randomness of the world (latencies, stream fates).
    pub rng: SimRng,
    queue: BTreeMap<(Duration, u64), Box<Event>>,
    seq: u64,
    /// Messages in flight.
    pub in_flight: usize,
    /// When the latest message to each actor arrives.
    mailbox_at: BTreeMap<Recv, Duration>,
    /// The registry and the providers.
    pub world: World,
    /// Machine configuration.
    pub cfg: Cfg,
    /// Registry actor.
    pub reg: RegShell,
    /// Resolver actors by id (a closing one may coexist with its successor).
    pub resolvers: BTreeMap<u64, ResShell>,
    /// Closed resolver machines, fed stale inputs after close.
    pub graveyard: Vec<ResolverMachine>,
    /// Cache actor.
    pub cache: CacheShell,
    /// Directory actors by reference index.
    pub dirs: BTreeMap<usize, DirShell>,
    /// Coordinator bookkeeping.
    pub coord: Coord,
    /// What the invariants need to remember.
    pub track: Track,
    /// The first violation, if any.
    pub violation: Option<String>,
    /// Step log (only when asked for).
    pub log: Option<Vec<String>>,
    /// Coverage counters.
    pub stats: Stats,
    /// Seed the machines' seeds derive from.
    pub seed: u64,
    /// Actors whose next delivery or update is lost to a handler panic.
    pub lose: BTreeSet<u64>,
}

impl Sim {
    /// A fresh engine and world for schedule `seed`.
    pub fn new(seed: u64, log: bool) -> Self {
        let mut rng = SimRng::new(seed ^ 0x5eed_f00d_cafe_d00d);
        let world = World::new(&mut rng);
        let cfg = Cfg::new();
        let reg = RegShell::new(SubscriptionMachine::new(cfg.sub, seed.wrapping_add(1)));
        let cache = CacheShell::new(&cfg.fetch);
        Self {
            t0: Instant::now(),
            now: Duration::ZERO,
            rng,
            queue: BTreeMap::new(),
            seq: 0,
            in_flight: 0,
            mailbox_at: BTreeMap::new(),
            world,
            cfg,
            reg,
            resolvers: BTreeMap::new(),
            graveyard: Vec::new(),
            cache,
            dirs: BTreeMap::new(),
            coord: Coord::default(),
            track: Track::default(),
            violation: None,
            log: log.then(Vec::new),
            stats: Stats::default(),
            seed,
            lose: BTreeSet::new(),
        }
    }

    /// The current virtual `Instant`.
    pub fn at(&self) -> Instant {
        self.t0 + self.now
    }

    /// Queues `ev` at virtual time `at` (never in the past).
    pub fn schedule(&mut self, at: Duration, ev: Event) {
        self.seq += 1;
        self.queue
            .insert((at.max(self.now), self.seq), Box::new(ev));
    }

    /// Appends a log line (built only when logging).
    pub fn note(&mut self, line: impl FnOnce() -> String) {
        let t = self.now.as_secs_f64();
        if let Some(log) = self.log.as_mut() {
            log.push(format!("{t:>10.3}s {}", line()));
        }
    }

    /// Records a violation (the first one is kept and ends the schedule).
    pub fn violate(&mut self, what: String) {
        self.note(|| format!("VIOLATION {what}"));
        if self.violation.is_none() {
            self.violation = Some(format!("at {:.3}s: {what}", self.now.as_secs_f64()));
        }
    }

    /// Whether a violation was found.
    pub fn failed(&self) -> bool {
        self.violation.is_some()
    }

    /// Processes every event due up to `until` in time order, delivering
    /// the messages each one causes and checking the invariants after each.
    pub fn run_until(&mut self, until: Duration) {
        while !self.failed() {
            let Some(entry) = self.queue.first_entry() else {
                break;
            };
            if entry.key().0 > until {
                break;
            }
            let ((at, _), ev) = entry.remove_entry();
            self.now = at;
            self.stats.events += 1;
            if self.stats.events as usize > MAX_EVENTS {
                self.violate(format!("[storm] more than {MAX_EVENTS} events"));
                break;
            }
            self.handle(*ev);
            if self.in_flight == 0 {
                let changed = self.track.urls_dirty || self.resolvers.values().any(|r| r.dirty);
                self.check();
                if changed {
                    self.watch_convergence();
                }
            }
        }
        self.now = self.now.max(until);
    }

    /// Sends `msg` to its actor: most arrive at once, some a few
    /// milliseconds later, each mailbox in order.
    pub fn send(&mut self, msg: Msg) {
        let delay = if self.rng.gen_bool(0.7) {
            Duration::ZERO
        } else {
            Duration::from_millis(self.rng.gen_range(1..=5))
        };
        let to = msg.receiver();
        let at = self
            .mailbox_at
            .get(&to)
            .copied()
            .unwrap_or_default()
            .max(self.now + delay);
        self.mailbox_at.insert(to, at);
        self.in_flight += 1;
        self.schedule(at, Event::Msg(msg));
    }

    /// Runs until no message is in flight (bounded: messages take at most a
    /// few milliseconds).
    pub fn settle(&mut self) {
        for _ in 0..10_000 {
            if self.in_flight == 0 || self.failed() {
                return;
            }
            let until = self.now + Duration::from_millis(1);
            self.run_until(until);
        }
        self.violate("[storm] messages never settle".into());
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::RegTimer { app, token } => self.reg_timer(app, token),
            Event::OpenDone { app, token, result } => self.open_done(app, token, result),
            Event::ListDone { app, token, result } => self.list_done(app, token, result),
            Event::Item { app, token, item } => self.stream_item(app, token, item),
            Event::ResTimer {
                to,
                revision,
                token,
            } => self.res_timer(to, revision, token),
            Event::CallDone {
                run,
                candidate,
                result,
            } => self.call_done(run, candidate, result),
            Event::Wake { run, seq } => self.flight_wake(run, seq),
            Event::TombTimer { to } => self.tomb_timer(to),
            Event::Msg(msg) => {
                self.in_flight -= 1;
                self.deliver(msg);
            }
        }
    }

    fn deliver(&mut self, msg: Msg) {
        match msg {
            Msg::WatchApp { app, id } => self.watch_app(app, id),
            Msg::UnwatchApp { app, id } => self.reg_remove_subscriber(&app, id),
            Msg::RegShutdown => self.reg_shutdown(),
            Msg::Delivery { to, .. } if self.lose.remove(&to) => {
                self.note(|| format!("  resolver #{to}: a delivery is lost, restart"));
                self.stats.lost += 1;
                self.restart_resolver(to);
            }
            Msg::Delivery { to, delivery } => self.res_delivery(to, delivery),
            Msg::Health { to, stale_since } => self.res_health(to, stale_since),
            Msg::Fetched {
                to,
                revision,
                token,
                result,
            } => self.res_fetched(to, revision, token, result),
            Msg::Flush { to } => self.res_flush(to),
            Msg::Attach { to, key, directory } => self.res_attach(to, key, directory),
            Msg::Detach { to, key, directory } => self.res_detach(to, key, directory),
            Msg::ResShutdown { to } => self.res_shutdown(to),
            Msg::FetchReq {
                key,
                candidates,
                resolver,
                token,
            } => self.cache_request(key, candidates, resolver, token),
            Msg::Abandon {
                key,
                resolver,
                tokens,
            } => self.cache_abandon(key, resolver, tokens),
            Msg::CacheShutdown => self.cache_shutdown(),
            Msg::Update { to, .. } if self.lose.remove(&to) => {
                self.note(|| format!("  directory #{to}: an update is lost, restart"));
                self.stats.lost += 1;
                self.restart_directory(to);
            }
            Msg::Update { to, update } => self.dir_update(to, update),
        }
    }

    /// A seed for machine number `id`.
    pub fn seed_for(&self, id: u64) -> u64 {
        self.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}
