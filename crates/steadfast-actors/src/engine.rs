//! [`Engine`] and its builder: start the actors inside the current actix
//! System, subscribe references, shut everything down.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use steadfast_core::{
    BackoffPolicy, MetadataFetcher, MetadataPublisher, Reference, RegistrationKey,
    RegistrationState, Registry, ServiceInstance,
};
use steadfast_http::HttpMetadataFetcher;
use steadfast_memory::MemoryRegistry;

use crate::cache_actor::CacheActor;
use crate::config::EngineConfig;
use crate::coordinator::{
    Coordinator, Export, ListRegistrations, Panic, RegisterInstance, Restart, RestartTarget,
    Subscribe, UnregisterInstance, Unsubscribe,
};
use crate::error::EngineError;
use crate::export::{ExportHandle, ExportSpec};
use crate::handle::Directory;
use crate::live_config::{CallerConfig, LiveConfig};
use crate::messages::Shutdown;
use crate::registry_actor::RegistryActor;
use crate::stats::{EngineStats, StatsSnapshot};

/// A running discovery engine. Cheap to clone; every clone drives the same
/// actors.
///
/// # Lifetime
///
/// The engine runs while any `Engine` clone or any [`Directory`] handle is
/// alive, until [`Engine::shutdown`]: dropping every `Engine` value while a
/// directory handle is kept (say, one returned from a function) leaves the
/// directory serving and updating. Once the last `Engine` and the last
/// handle are gone, nothing can reach the engine and it stops. A reference
/// ends when `unsubscribe` was called as often as `subscribe`, or when no
/// handle of it has been alive for [`CallerConfig::unsubscribe_linger`]
/// (default 30 s; `None`: never), or at shutdown; see [`Directory`].
/// `shutdown` stops every actor whatever handles are still alive; they then
/// answer `NotSubscribed` / `DirectoryClosed`.
#[derive(Clone)]
pub struct Engine {
    coordinator: Addr<Coordinator>,
    stats: Arc<EngineStats>,
    registry: Arc<dyn Registry>,
    live: LiveConfig,
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
        self.coordinator
            .send(Subscribe(reference))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Ends one subscription of `reference` (the key is derived the same way
    /// as on subscribe). Returns true when it was the last one and the
    /// directory, and any resolver no longer needed, stopped (at once, even
    /// while handles of it are alive).
    pub async fn unsubscribe(&self, reference: &Reference) -> Result<bool, EngineError> {
        self.coordinator
            .send(Unsubscribe(reference.clone()))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Stops every actor: afterwards no timer fires, no fetch starts and no
    /// actor is alive. Idempotent.
    pub async fn shutdown(&self) {
        // The coordinator refuses new work at once, lets exported providers
        // announce closing and unregister, then stops every actor.
        let _ = self.coordinator.send(Shutdown).await;
    }

    /// Exports a provider instance: computes its revision, stamps its
    /// incarnation, publishes its metadata to every configured publisher and
    /// registers it, retrying with backoff until it lands.
    pub async fn export(&self, spec: ExportSpec) -> Result<ExportHandle, EngineError> {
        self.coordinator
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
        self.coordinator
            .send(RegisterInstance(instance))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Wants `instance` unregistered: cancels a pending register of it, and
    /// retries a failed unregister until it lands. Returns at once.
    pub async fn unregister(&self, instance: ServiceInstance) -> Result<(), EngineError> {
        self.coordinator
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
        self.coordinator
            .send(ListRegistrations)
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Makes one actor crash-restart under its supervisor (tests, drills).
    pub async fn force_restart(&self, target: RestartTarget) -> Result<(), EngineError> {
        self.coordinator
            .send(Restart(target))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Arms a drill (tests, drills): the next real handler of one actor
    /// panics at its drill point; the panic is contained, counted
    /// (`handler_panics`), and the actor restarts under its supervisor with
    /// its state resynced.
    pub async fn drill_panic(&self, target: RestartTarget) -> Result<(), EngineError> {
        self.coordinator
            .send(Panic(target))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Current counters.
    pub fn stats(&self) -> StatsSnapshot {
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
    /// The registry backend (default: a fresh embedded [`MemoryRegistry`]).
    pub fn registry(mut self, registry: impl Registry) -> Self {
        self.registry = Some(Arc::new(registry));
        self
    }

    /// The registry backend, already shared.
    pub fn registry_arc(mut self, registry: Arc<dyn Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The metadata fetcher (default: HTTP to each instance's MetadataService
    /// with 5 s timeouts and a 1 MiB body cap).
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
            None => Arc::new(
                HttpMetadataFetcher::builder()
                    .build()
                    .map_err(|e| EngineError::FetcherSetup(e.to_string()))?,
            ),
        };
        let registry = self
            .registry
            .unwrap_or_else(|| Arc::new(MemoryRegistry::new()));
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
            coordinator,
            stats,
            registry,
            live,
        })
    }
}
