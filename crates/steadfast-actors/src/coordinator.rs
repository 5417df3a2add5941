//! The engine coordinator: it holds the strong addresses of the actors it
//! starts (registry, registrar, cache, snapshot, resolvers, directories,
//! exports, mappings), creates one resolver per provider app and one
//! directory per reference, reference-counts them, and tears them down on
//! unsubscribe and shutdown. Every reference between those actors is weak,
//! so once the coordinator lets go, nothing can keep an actor (or its
//! timers) alive.
//!
//! Lifetimes: the coordinator's and the lookup actor's own strong addresses
//! are held by one shared `EngineLife`, which every `Engine` value and every
//! [`Directory`] handle's `HandleHold` holds. When the last of them drops,
//! the coordinator is told (`Orphaned`) and stops everything at once. When
//! the last handle of a reference drops while the engine lives on, the
//! reference is unsubscribed after the live `unsubscribe_linger` unless a
//! handle of it exists again by then (see [`Directory`]'s lifetime docs).
//!
//! Every such decision (what is subscribed and how often, which resolver
//! and which mapping follower is needed, which hold is current, when a
//! linger ends, whether the engine is shut down) is taken by the sans-IO
//! [`Lifetimes`] machine; this actor asks it, then starts and stops actors
//! as it answers, and keeps one timer at its next linger deadline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use actix::WeakAddr;
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{
    LifetimeRefused, Lifetimes, MetadataPublisher, RecoverPolicy, Reference, Registry,
    ResolverMachine,
};

use crate::cache_actor::CacheActor;
use crate::config::EngineConfig;
use crate::contain::Contain;

use crate::error::EngineError;
use crate::export::{
    build_export, ExportActor, ExportHandle, ExportParts, ExportSpec, GracefulStop, InFlight,
    ShutdownReport,
};
use crate::handle::{Directory, EngineLife};
use crate::live_config::LiveConfig;
use crate::messages::Shutdown;
use crate::registrar_actor::RegistrarActor;
use crate::registry_actor::RegistryActor;
use crate::resolver_actor::ResolverActor;
use crate::stats::{EngineStats, Live, LiveGuard};

/// Subscribe to a reference; the handles returned share `.1`.
#[derive(Message)]
#[rtype(result = "Result<Directory, EngineError>")]
pub(crate) struct Subscribe(pub Reference, pub Arc<EngineLife>);

/// The last `Engine` value and the last handle are gone: stop at once.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Orphaned;

/// Unsubscribe from a reference; true when the last subscription ended.
#[derive(Message)]
#[rtype(result = "Result<bool, EngineError>")]
pub(crate) struct Unsubscribe(pub Reference);

/// Export a provider instance.
#[derive(Message)]
#[rtype(result = "Result<ExportHandle, EngineError>")]
pub(crate) struct Export(pub ExportSpec);

/// Gracefully stop one export.
#[derive(Message)]
#[rtype(result = "Result<ShutdownReport, EngineError>")]
pub(crate) struct StopExport {
    pub id: u64,
    pub drain: Duration,
}

#[cfg(any(test, feature = "testkit"))]
mod drills;
mod inspect;
mod mapping;
mod registrations;
mod subscriptions;

#[cfg(any(test, feature = "testkit"))]
pub(crate) use drills::ForceRestart;
#[cfg(any(test, feature = "testkit"))]
pub use drills::RestartTarget;
pub(crate) use registrations::{ListRegistrations, RegisterInstance, UnregisterInstance};

pub(crate) use subscriptions::HandlesDropped;
use subscriptions::Subscribed;

pub(crate) struct Coordinator {
    config: EngineConfig,
    /// The caller-side settings every directory reads when it needs them.
    live: LiveConfig,
    stats: Arc<EngineStats>,
    registry: Option<Addr<RegistryActor>>,
    /// The failback registrar (every register / unregister goes through it).
    registrar: Option<Addr<RegistrarActor>>,
    cache: Option<Addr<CacheActor>>,
    /// What is subscribed, needed and shut down: every lifetime decision.
    lifetimes: Lifetimes,
    /// The resolver of each app [`Lifetimes`] says is needed.
    resolvers: HashMap<String, Addr<ResolverActor>>,
    directories: HashMap<Reference, Subscribed>,
    /// Every export with the (app, revision) it serves.
    exports: HashMap<u64, (Addr<ExportActor>, (String, String))>,
    registry_backend: Arc<dyn Registry>,
    publishers: Vec<Arc<dyn MetadataPublisher>>,
    next_id: u64,
    /// The one linger timer, at [`Lifetimes::poll_timeout`].
    linger: Option<(std::time::Instant, SpawnHandle)>,
    /// Dropped at shutdown: a shut-down coordinator that an engine handle
    /// keeps restarting is an idle shell answering `ShutDown`, not alive.
    alive: Option<LiveGuard>,
    containment: crate::contain::Containment,
    /// The snapshot actor, when a snapshot directory is configured.
    snapshot: Option<Addr<crate::snapshot_actor::SnapshotActor>>,
    /// Mappings followed by references without apps (`coordinator/mapping.rs`).
    follows: mapping::Follows,
}

impl Coordinator {
    pub(crate) fn new(
        config: EngineConfig,
        backends: (Arc<dyn Registry>, Vec<Arc<dyn MetadataPublisher>>),
        registry: Addr<RegistryActor>,
        cache: Addr<CacheActor>,
        stats: Arc<EngineStats>,
        live: LiveConfig,
    ) -> Self {
        let snapshot = config.snapshot.dir.clone().map(|dir| {
            let (c, st) = (config.snapshot.clone(), stats.clone());
            Supervisor::start(move |_| crate::snapshot_actor::SnapshotActor::new(dir, c, st))
        });
        let registrar = {
            let (reg, cfg, seed) = (backends.0.clone(), config.registrar(), config.seed ^ 0x5EED);
            let (subs, st) = (registry.downgrade(), stats.clone());
            Supervisor::start(move |_| RegistrarActor::new(reg, cfg, seed, subs, st))
        };
        Self {
            snapshot,
            registrar: Some(registrar),
            config,
            live,
            exports: HashMap::new(),
            registry_backend: backends.0,
            publishers: backends.1,
            registry: Some(registry),
            cache: Some(cache),
            lifetimes: Lifetimes::new(),
            resolvers: HashMap::new(),
            directories: HashMap::new(),
            next_id: 1,
            linger: None,
            alive: Some(LiveGuard::new(&stats, Live::Actor)),
            containment: Default::default(),
            follows: Default::default(),
            stats,
        }
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn seed(&self, id: u64) -> u64 {
        self.config.seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// The resolver of `app` (started by [`Coordinator::start_resolver`]).
    fn resolver_of(&self, app: &str) -> Result<WeakAddr<ResolverActor>, EngineError> {
        self.resolvers
            .get(app)
            .map(Addr::downgrade)
            .ok_or(EngineError::ShutDown)
    }

    /// Starts the resolver of `app`, which [`Lifetimes`] says is needed now.
    fn start_resolver(&mut self, app: &str) -> Result<(), EngineError> {
        if self.resolvers.contains_key(app) {
            return Ok(());
        }
        let (Some(registry), Some(cache)) = (&self.registry, &self.cache) else {
            return Err(EngineError::ShutDown);
        };
        let (registry, cache) = (registry.downgrade(), cache.downgrade());
        let id = self.id();
        let seed = self.seed(id);
        let (backoff, stats) = (self.config.backoff, self.stats.clone());
        let max_attempts = self.config.metadata_max_attempts;
        // Well above the cache's whole-fetch deadline.
        let fetch_deadline = self
            .config
            .fetch_timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(5));
        let name = app.to_string();
        let snapshot = self.snapshot.as_ref().map(|a| a.downgrade());
        let write_interval = self.config.snapshot.write_interval;
        let make: crate::resolver_actor::MakeMachine = Arc::new(move || {
            ResolverMachine::new(&name, backoff, seed)
                .with_max_attempts(max_attempts)
                .with_fetch_deadline(fetch_deadline)
        });
        let addr = Supervisor::start(move |_| {
            let r = ResolverActor::new(id, make, registry, cache, stats);
            match snapshot {
                Some(s) => r.with_snapshot(s, write_interval),
                None => r,
            }
        });
        self.resolvers.insert(app.to_string(), addr);
        Ok(())
    }

    /// Stops the resolver of `app`, which [`Lifetimes`] says no one needs.
    fn stop_resolver(&mut self, app: &str) {
        if let Some(addr) = self.resolvers.remove(app) {
            addr.do_send(Shutdown);
        }
    }

    fn shutdown_all(&mut self, ctx: &mut Context<Self>) {
        self.lifetimes.shut_down();
        self.alive = None;
        if let Some((_, t)) = self.linger.take() {
            ctx.cancel_future(t);
        }
        for (_, d) in self.directories.drain() {
            d.handle.close();
            d.addr.do_send(Shutdown);
        }
        self.stop_mappings();
        for (_, addr) in self.resolvers.drain() {
            addr.do_send(Shutdown);
        }
        for (_, (e, _)) in self.exports.drain() {
            e.do_send(Shutdown);
        }
        if let Some(r) = self.registry.take() {
            r.do_send(Shutdown);
        }
        if let Some(r) = self.registrar.take() {
            r.do_send(Shutdown);
        }
        if let Some(c) = self.cache.take() {
            c.do_send(Shutdown);
        }
        if let Some(s) = self.snapshot.take() {
            s.do_send(Shutdown);
        }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn stopped(&mut self, ctx: &mut Self::Context) {
        // Dropping every engine and directory handle without shutdown still
        // stops everything; a stop while an engine or directory handle is
        // still held is a supervised restart
        // (the children keep running, the maps are kept).
        if self.lifetimes.is_shut_down() || !ctx.connected() {
            self.shutdown_all(ctx);
        }
    }
}

impl Supervised for Coordinator {
    fn restarting(&mut self, ctx: &mut Self::Context) {
        if !self.lifetimes.is_shut_down() {
            EngineStats::bump(&self.stats.restarts);
            self.rearm_lingers(ctx);
        }
    }
}

impl Contain for Coordinator {
    const NAME: &'static str = "coordinator";
    fn engine_stats(&self) -> &Arc<EngineStats> {
        &self.stats
    }
    fn containment(&mut self) -> &mut crate::contain::Containment {
        &mut self.containment
    }
}

/// The engine error of a call [`Lifetimes`] refused.
fn refused(r: LifetimeRefused) -> EngineError {
    match r {
        LifetimeRefused::NoProviderApps(key) => EngineError::NoProviderApps(key),
        LifetimeRefused::NotSubscribed(key) => EngineError::NotSubscribed(key),
        _ => EngineError::ShutDown,
    }
}

/// The answer of a coordinator call whose handler panicked.
fn panicked<T>(r: Option<Result<T, EngineError>>) -> Result<T, EngineError> {
    r.unwrap_or(Err(EngineError::Panicked))
}

impl Handler<Shutdown> for Coordinator {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _: Shutdown, _ctx: &mut Self::Context) -> Self::Result {
        // Refuse new work at once; let providers announce closing and
        // unregister (no drain wait), unregister what `Engine::register`
        // registered, then stop everything. Each registry
        // call of a stop has its own deadline, and the whole wait is bounded
        // by `shutdown_timeout`.
        self.lifetimes.shut_down();
        // The exports stay listed, so `shutdown_all` stops them even when
        // their graceful stop ran out of time.
        let stops: Vec<_> = self
            .exports
            .values()
            .map(|(a, _)| {
                a.send(GracefulStop {
                    drain: Duration::ZERO,
                    withdraw: true,
                })
            })
            .collect();
        // Instances registered with `Engine::register` are unregistered
        // too, at the same time (the exports' keys are already on their way
        // out).
        let registrar = self.registrar.clone();
        let unregistered = async move {
            if let Some(r) = registrar {
                if let Ok(settled) = r.send(crate::registrar_actor::UnregisterAll).await {
                    futures::future::join_all(settled).await;
                }
            }
        };
        let limit = self.config.shutdown_timeout;
        Box::pin(
            tokio::time::timeout(
                limit,
                futures::future::join(futures::future::join_all(stops), unregistered),
            )
            .into_actor(self)
            .map(|_, act, ctx| {
                act.shutdown_all(ctx);
                ctx.stop();
            }),
        )
    }
}

impl Handler<Orphaned> for Coordinator {
    type Result = ();
    fn handle(&mut self, _: Orphaned, ctx: &mut Self::Context) {
        if !self.lifetimes.is_shut_down() {
            self.shutdown_all(ctx);
        }
        ctx.stop();
    }
}

impl Handler<Export> for Coordinator {
    type Result = Result<ExportHandle, EngineError>;
    fn handle(&mut self, msg: Export, ctx: &mut Self::Context) -> Self::Result {
        let me = ctx.address().downgrade();
        panicked(self.contained(ctx, |act, _| act.export(msg.0, me)))
    }
}

impl Coordinator {
    fn export(
        &mut self,
        spec: ExportSpec,
        me: WeakAddr<Coordinator>,
    ) -> Result<ExportHandle, EngineError> {
        if self.lifetimes.is_shut_down() {
            return Err(EngineError::ShutDown);
        }
        if spec.services.is_empty() {
            return Err(EngineError::NothingToExport(spec.app));
        }
        if spec.in_flight.as_ref().is_some_and(InFlight::is_closing) {
            return Err(EngineError::TrackerClosing(spec.app));
        }
        let id = self.id();
        let seed = self.seed(id);
        let export_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        let (info, instance) = build_export(&spec, export_ms, &mut StdRng::seed_from_u64(seed));
        // The tracker the provider's server already counts with, or a new one.
        let in_flight = spec.in_flight.clone().unwrap_or_default();
        let parts = ExportParts {
            registry: self.registry_backend.clone(),
            publishers: self.publishers.clone(),
            info: info.clone(),
            instance: instance.clone(),
            policy: RecoverPolicy::new(self.config.registry_backoff),
            call_timeout: self.config.registry_call_timeout,
            seed,
            in_flight: in_flight.clone(),
            registrar: self
                .registrar
                .as_ref()
                .map(|r| r.downgrade())
                .ok_or(EngineError::ShutDown)?,
        };
        let stats = self.stats.clone();
        let addr = Supervisor::start(move |_| ExportActor::new(parts, stats));
        let handle = ExportHandle {
            id,
            instance,
            info,
            addr: addr.downgrade(),
            coordinator: me,
            in_flight,
        };
        let key = (handle.info.app.clone(), handle.info.revision.clone());
        self.exports.insert(id, (addr, key));
        // Interface -> app mapping (coordinator/mapping.rs).
        self.write_mappings(&handle.info);
        Ok(handle)
    }
}

impl Handler<StopExport> for Coordinator {
    type Result = ResponseFuture<Result<ShutdownReport, EngineError>>;
    fn handle(&mut self, msg: StopExport, _ctx: &mut Self::Context) -> Self::Result {
        let stopped = self.exports.remove(&msg.id);
        // Identical exports share a revision: only the last one to stop
        // withdraws its metadata.
        let withdraw = stopped
            .as_ref()
            .is_some_and(|(_, key)| !self.exports.values().any(|(_, k)| k == key));
        Box::pin(async move {
            let (addr, _) = stopped.ok_or(EngineError::ShutDown)?;
            addr.send(GracefulStop {
                drain: msg.drain,
                withdraw,
            })
            .await
            .map_err(|_| EngineError::ShutDown)
        })
    }
}
