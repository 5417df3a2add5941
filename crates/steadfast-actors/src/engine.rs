//! [`Engine`] and its builder: start the actors inside the current actix
//! System, subscribe references, shut everything down.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use steadfast_core::{
    BackoffPolicy, InstancesAnswer, LookupConfig, LookupError, MetadataFetcher, MetadataPublisher,
    Reference, RegistrationKey, RegistrationState, Registry, RegistryError, ServiceInstance,
};

use crate::cache_actor::CacheActor;
use crate::config::EngineConfig;
use crate::coordinator::{
    Coordinator, Export, ListRegistrations, RegisterInstance, Subscribe, UnregisterInstance,
    Unsubscribe,
};
use crate::error::EngineError;
use crate::export::{ExportHandle, ExportSpec};
use crate::handle::{Directory, EngineLife};
use crate::live_config::{CallerConfig, LiveConfig};
use crate::lookup_actor::{Instances, LookupActor};
use crate::messages::Shutdown;
use crate::registry_actor::RegistryActor;
use crate::stats::{EngineStats, EngineStatsSnapshot};

/// A running discovery engine. Cheap to clone; every clone drives the same
/// actors.
///
/// # Lifetime
///
/// The engine runs while any `Engine` clone or any [`Directory`] handle is
/// alive, until [`Engine::shutdown`]: dropping every `Engine` value while a
/// directory handle is kept (say, one returned from a function) leaves the
/// directory serving and updating. Once the last `Engine` and the last
/// handle are gone, nothing can reach the engine and it stops at once, as
/// `shutdown` would stop it (without the graceful unregister wait): no
/// linger, retry, fetch or timer of it runs after the drop. A reference
/// ends when `unsubscribe` was called as often as `subscribe`, or when no
/// handle of it has been alive for [`CallerConfig::unsubscribe_linger`]
/// (default 30 s; `None`: never), or at shutdown; see [`Directory`].
/// `shutdown` stops every actor whatever handles are still alive; they then
/// answer `NotSubscribed` / `DirectoryClosed`.
#[derive(Clone)]
pub struct Engine {
    /// The strong addresses of the coordinator and the lookup actor, shared
    /// with every directory handle: the engine stops when the last goes.
    pub(crate) life: Arc<EngineLife>,
    stats: Arc<EngineStats>,
    registry: Arc<dyn Registry>,
    live: LiveConfig,
    /// Bound of a whole `instances()` query.
    lookup_limit: Duration,
}

impl Engine {
    /// Starts configuring an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Subscribes to `reference` and returns its directory. Subscribing the
    /// same reference again returns the same directory (reference-counted),
    /// also within the linger after its last handle was dropped.
    pub async fn subscribe(&self, reference: Reference) -> Result<Directory, EngineError> {
        self.life
            .coordinator
            .send(Subscribe(reference, self.life.clone()))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Ends one subscription of `reference` (the key is derived the same way
    /// as on subscribe). Returns true when it was the last one and the
    /// directory, and any resolver no longer needed, stopped (at once, even
    /// while handles of it are alive).
    pub async fn unsubscribe(&self, reference: &Reference) -> Result<bool, EngineError> {
        self.life
            .coordinator
            .send(Unsubscribe(reference.clone()))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Stops every actor: afterwards no timer fires, no fetch starts and no
    /// actor is alive. Exports announce closing and unregister, and every
    /// instance registered with [`Engine::register`] is unregistered, all
    /// within `shutdown_timeout`. Idempotent.
    pub async fn shutdown(&self) {
        // The lookup actor first: once the registry actor is stopping, a
        // lookup of a subscribed app would turn into registry calls. Then
        // the coordinator refuses new work at once, lets exported providers
        // announce closing and unregister (and unregisters what
        // `Engine::register` registered), then stops every actor.
        // Both are queued at once (no await in between), so work sent after
        // `shutdown()` started is refused.
        self.life.lookup.do_send(Shutdown);
        let _ = self.life.coordinator.send(Shutdown).await;
        // Stopped by now (its mailbox is short); a second send only waits.
        let _ = self.life.lookup.send(Shutdown).await;
    }

    /// Exports a provider instance: computes its revision, stamps its
    /// incarnation, publishes its metadata to every configured publisher and
    /// registers it, retrying with backoff until it lands.
    pub async fn export(&self, spec: ExportSpec) -> Result<ExportHandle, EngineError> {
        self.life
            .coordinator
            .send(Export(spec))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Wants `instance` registered: the engine's failback registrar keeps it
    /// registered (retrying a failed register on the registry backoff, and
    /// registering it again after a registry session loss) until
    /// [`Engine::unregister`]. Returns at once; the latest intent per
    /// (app, instance id) wins.
    pub async fn register(&self, instance: ServiceInstance) -> Result<(), EngineError> {
        self.life
            .coordinator
            .send(RegisterInstance(instance))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Wants `instance` unregistered: cancels a pending register of it, and
    /// retries a failed unregister until it lands. Returns at once.
    pub async fn unregister(&self, instance: ServiceInstance) -> Result<(), EngineError> {
        self.life
            .coordinator
            .send(UnregisterInstance(instance))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Every registration the registrar keeps (registered, or with an
    /// operation pending), with where it stands: registered, pending with
    /// its failed attempts and last error, or given up.
    pub async fn registrations(
        &self,
    ) -> Result<Vec<(RegistrationKey, RegistrationState)>, EngineError> {
        self.life
            .coordinator
            .send(ListRegistrations)
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Current counters.
    pub fn stats(&self) -> EngineStatsSnapshot {
        self.stats.snapshot()
    }

    /// Failed metadata fetcher calls per error kind (`timeout`,
    /// `malformed`, `mismatch`, ...).
    pub fn fetch_failures_by_kind(&self) -> Vec<(&'static str, u64)> {
        self.stats.fetch_failures_by_kind()
    }

    /// The registry backend the engine watches.
    pub fn registry(&self) -> Arc<dyn Registry> {
        self.registry.clone()
    }

    /// The caller-side settings in force now.
    pub fn caller_config(&self) -> Arc<CallerConfig> {
        self.live.load()
    }

    /// The instances of `app`, for one-shot queries (no subscription).
    ///
    /// A subscribed app answers from its live watch state with no registry
    /// call ([`Source::Watch`](steadfast_core::Source::Watch); stale with
    /// its age while the watch is down). Any other app answers from the
    /// per-app lookup cache ([`LookupConfig`]): fresh within its jittered
    /// TTL, else one registry call shared by every concurrent caller, its
    /// result stored before any of them is answered. When the registry
    /// fails, the copy held is served flagged
    /// [`Freshness::Stale`](steadfast_core::Freshness::Stale) with its age
    /// (up to `max_staleness`); with none the error says why:
    /// [`LookupError::NotFound`] only when the registry listed no instance,
    /// [`LookupError::Unavailable`] with the registry's error as cause,
    /// [`LookupError::Throttled`] while the app's last call is less than
    /// `min_retry_interval` old. Every registry call has the registry call
    /// deadline, and the whole query is bounded by twice it plus 1 s.
    pub async fn instances(&self, app: &str) -> Result<InstancesAnswer, LookupError> {
        let ask = self.life.lookup.send(Instances {
            app: app.to_string(),
        });
        match tokio::time::timeout(self.lookup_limit, ask).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(LookupError::ShutDown),
            Err(_) => Err(LookupError::Unavailable {
                app: app.to_string(),
                cause: RegistryError::Timeout,
            }),
        }
    }

    /// Replaces the caller-side settings at run time: every directory reads
    /// them when it next needs them (a tombstone takes the TTL in force
    /// when it is written).
    pub fn set_caller_config(&self, config: CallerConfig) {
        self.live.store(config);
    }
}

/// Configures and starts an [`Engine`]. `start()` validates every value
/// ([`EngineConfig::validate`]) and refuses a bad one with a typed error.
#[derive(Default)]
pub struct EngineBuilder {
    config: EngineConfig,
    registry: Option<Arc<dyn Registry>>,
    fetcher: Option<Arc<dyn MetadataFetcher>>,
    publishers: Vec<Arc<dyn MetadataPublisher>>,
}

impl EngineBuilder {
    /// The registry backend (default with the `memory` feature, which the
    /// `steadfast` facade turns on: a fresh embedded `MemoryRegistry`;
    /// without it `start()` fails with [`EngineError::NoRegistry`]).
    pub fn registry(mut self, registry: impl Registry) -> Self {
        self.registry = Some(Arc::new(registry));
        self
    }

    /// The registry backend, already shared.
    pub fn registry_arc(mut self, registry: Arc<dyn Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The metadata fetcher (default with the `http` feature, which the
    /// `steadfast` facade's `http` feature turns on: HTTP to each instance's
    /// MetadataService with 5 s timeouts and a 1 MiB body cap; without it
    /// [`NoFetcher`](crate::defaults::NoFetcher)).
    pub fn fetcher(mut self, fetcher: impl MetadataFetcher) -> Self {
        self.fetcher = Some(Arc::new(fetcher));
        self
    }

    /// Adds a place exported metadata is published to (the provider's own
    /// MetadataService store, a remote metadata report, ...).
    pub fn metadata_publisher(mut self, publisher: impl MetadataPublisher) -> Self {
        self.publishers.push(Arc::new(publisher));
        self
    }

    /// Retry schedule of unresolved revisions (default 1 s doubling to 30 s, +0-25 %).
    pub fn backoff(mut self, backoff: BackoffPolicy) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// Gives up on a revision after `attempts` failed fetches (default:
    /// never). It then stays unresolved, and says so, until it leaves the
    /// snapshot.
    pub fn metadata_max_attempts(mut self, attempts: u32) -> Self {
        self.config.metadata_max_attempts = Some(attempts);
        self
    }

    /// Re-subscribe schedule of failed registry watches.
    pub fn registry_backoff(mut self, backoff: BackoffPolicy) -> Self {
        self.config.registry_backoff = backoff;
        self
    }

    /// While the registry is down, probe it (one cheap `list` per engine)
    /// this often, so the watch comes back as soon as the registry answers
    /// (default 1 s; `None`: only the backoff decides).
    pub fn registry_probe_interval(mut self, interval: Option<Duration>) -> Self {
        self.config.registry_probe_interval = interval;
        self
    }

    /// Deadline of every registry or publisher call the engine makes: watch
    /// open, list, and each call of an export (default 5 s).
    pub fn registry_call_timeout(mut self, timeout: Duration) -> Self {
        self.config.registry_call_timeout = timeout;
        self
    }

    /// Re-read every subscribed app in full this often (jittered ±20 %) and
    /// apply what the watch missed (default 5 min; zero: only on resume
    /// after an outage).
    pub fn reconcile_interval(mut self, interval: Duration) -> Self {
        self.config.reconcile_interval = interval;
        self
    }

    /// Hold instances removed in a mass expiry right after a registry
    /// recovery this long while their providers re-register (default 3 s;
    /// zero: never).
    pub fn mass_removal_grace(mut self, grace: Duration) -> Self {
        self.config.mass_removal_grace = grace;
        self
    }

    /// Revisions kept in the shared metadata cache (default 1024).
    pub fn cache_capacity(mut self, capacity: usize) -> Self {
        self.config.cache_capacity = capacity;
        self
    }

    /// Deadline of one whole metadata fetch of a revision, whatever the
    /// number of instances it tries (default 5 s).
    pub fn fetch_timeout(mut self, timeout: Duration) -> Self {
        self.config.fetch_timeout = timeout;
        self
    }
    /// Longest [`Engine::shutdown`] waits for exports to unregister before
    /// stopping every actor anyway (default 15 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.config.shutdown_timeout = timeout;
        self
    }

    /// The lookup cache of [`Engine::instances`] (see [`LookupConfig`]).
    pub fn lookup(mut self, lookup: LookupConfig) -> Self {
        self.config.lookup = lookup;
        self
    }

    /// How long a registry answer of [`Engine::instances`] is served as
    /// fresh (default 60 s, jittered ±10 % per app).
    pub fn lookup_ttl(mut self, ttl: Duration) -> Self {
        self.config.lookup.ttl = ttl;
        self
    }

    /// At most one registry call per app per `interval` for
    /// [`Engine::instances`] (default 5 s).
    pub fn lookup_min_retry_interval(mut self, interval: Duration) -> Self {
        self.config.lookup.min_retry_interval = interval;
        self
    }

    /// Refuse a copy older than this when the registry cannot confirm it
    /// (default `None`: served at any age, flagged stale).
    pub fn lookup_max_staleness(mut self, max: Option<Duration>) -> Self {
        self.config.lookup.max_staleness = max;
        self
    }

    /// Apps the lookup cache keeps (default 1024).
    pub fn lookup_capacity(mut self, capacity: usize) -> Self {
        self.config.lookup.capacity = capacity;
        self
    }

    /// Keeps a disk snapshot of every subscribed app in `dir` and serves it
    /// at a cold start while the registry is unreachable (default: none).
    pub fn snapshot_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.config.snapshot.dir = Some(dir.into());
        self
    }

    /// Oldest snapshot served at a cold start (default 24 h).
    pub fn snapshot_max_age(mut self, max_age: Duration) -> Self {
        self.config.snapshot.max_age = max_age;
        self
    }

    /// Largest snapshot file written or read (default 64 MiB).
    pub fn snapshot_max_bytes(mut self, max_bytes: usize) -> Self {
        self.config.snapshot.max_bytes = max_bytes;
        self
    }

    /// Shortest time between two writes of one app's snapshot (default 10 s).
    pub fn snapshot_write_interval(mut self, interval: Duration) -> Self {
        self.config.snapshot.write_interval = interval;
        self
    }

    /// Replaces every snapshot setting.
    pub fn snapshot(mut self, config: crate::snapshot_config::SnapshotConfig) -> Self {
        self.config.snapshot = config;
        self
    }

    /// Window over which a registry session loss spreads the
    /// re-registrations and re-subscriptions (default 5 s; zero: at once).
    pub fn session_spread(mut self, spread: Duration) -> Self {
        self.config.session_spread = spread;
        self
    }

    /// Replaces the whole configuration (validated at `start()`).
    pub fn config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// Time without an answer after which a fetch starts its remaining
    /// candidates in parallel (default 250 ms).
    pub fn fetch_hedge_delay(mut self, delay: Duration) -> Self {
        self.config.fetch_hedge_delay = delay;
        self
    }

    /// Candidates the first fetch of a revision may try (default 16).
    pub fn fetch_fanout(mut self, candidates: usize) -> Self {
        self.config.fetch_fanout = candidates;
        self
    }

    /// Candidates each retry of a revision may try (default 2).
    pub fn fetch_retry_calls(mut self, candidates: usize) -> Self {
        self.config.fetch_retry_calls = candidates;
        self
    }

    /// Seed of every random choice, for replayable runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// Starts the engine's actors in the current actix System.
    pub fn start(self) -> Result<Engine, EngineError> {
        if System::try_current().is_none() {
            return Err(EngineError::NoSystem);
        }
        self.config.validate()?;
        let fetcher: Arc<dyn MetadataFetcher> = match self.fetcher {
            Some(f) => f,
            None => crate::defaults::fetcher()?,
        };
        let registry = match self.registry {
            Some(r) => r,
            None => crate::defaults::registry()?,
        };
        let info = registry.describe();
        tracing::info!(
            registry = %info.kind,
            endpoints = ?info.endpoints,
            "steadfast engine starting on the {info} registry"
        );
        let stats = Arc::new(EngineStats::default());
        let config = self.config;
        let (reg, st, subscription, seed) = (
            registry.clone(),
            stats.clone(),
            config.subscription(),
            config.seed,
        );
        let spread = config.session_spread;
        let registry_actor = Supervisor::start(move |_| {
            RegistryActor::new(reg, subscription, seed, st).with_session_spread(spread)
        });
        let (reg, st, live_state) = (registry.clone(), stats.clone(), registry_actor.downgrade());
        let lookup_config = (config.lookup, config.registry_call_timeout);
        let lookup_seed = seed ^ 0x6C6F_6F6B_7570; // "lookup"
        let lookup = Supervisor::start(move |_| {
            LookupActor::new(reg, live_state, lookup_config, lookup_seed, st)
        });
        let lookup_limit = config
            .registry_call_timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(1));
        let (st, cap, policy) = (stats.clone(), config.cache_capacity, config.fetch_policy());
        let cache = Supervisor::start(move |_| CacheActor::new(fetcher, cap, policy, st));
        let backends = (registry.clone(), self.publishers);
        let st = stats.clone();
        let live = LiveConfig::new(config.caller.clone());
        let lv = live.clone();
        let coordinator = Supervisor::start(move |_| {
            Coordinator::new(config, backends, registry_actor, cache, st, lv)
        });
        Ok(Engine {
            life: Arc::new(EngineLife {
                coordinator,
                lookup,
            }),
            stats,
            registry,
            live,
            lookup_limit,
        })
    }
}
