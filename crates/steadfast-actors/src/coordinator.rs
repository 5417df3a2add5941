//! The engine coordinator: the only holder of strong actor addresses. It
//! creates one resolver per provider app and one directory per reference,
//! reference-counts them, and tears them down on unsubscribe and shutdown.
//! Every other reference between actors is weak, so once the coordinator
//! lets go, nothing can keep an actor (or its timers) alive.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::Reference;

use crate::cache_actor::CacheActor;
use crate::config::EngineConfig;
use crate::directory_actor::DirectoryActor;
use crate::error::EngineError;
use crate::handle::Directory;
use crate::messages::{ForceRestart, Shutdown};
use crate::registry_actor::RegistryActor;
use crate::resolver_actor::ResolverActor;
use crate::stats::{EngineStats, Live, LiveGuard};

/// Which actor a forced restart hits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartTarget {
    /// The registry subscription actor.
    Registry,
    /// The shared metadata cache actor.
    Cache,
    /// The resolver of one provider app.
    Resolver(String),
    /// The directory of one reference.
    Directory(Reference),
}

/// Subscribe to a reference.
#[derive(Message)]
#[rtype(result = "Result<Directory, EngineError>")]
pub(crate) struct Subscribe(pub Reference);

/// Unsubscribe from a reference; true when the last subscription ended.
#[derive(Message)]
#[rtype(result = "Result<bool, EngineError>")]
pub(crate) struct Unsubscribe(pub Reference);

/// Force a supervised restart.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub(crate) struct Restart(pub RestartTarget);

struct Counted<A: Actor> {
    addr: Addr<A>,
    refs: usize,
}

pub(crate) struct Coordinator {
    config: EngineConfig,
    stats: Arc<EngineStats>,
    registry: Option<Addr<RegistryActor>>,
    cache: Option<Addr<CacheActor>>,
    resolvers: HashMap<String, Counted<ResolverActor>>,
    directories: HashMap<Reference, (Counted<DirectoryActor>, Directory)>,
    next_id: u64,
    shut_down: bool,
    _alive: LiveGuard,
}

impl Coordinator {
    pub(crate) fn new(
        config: EngineConfig,
        registry: Addr<RegistryActor>,
        cache: Addr<CacheActor>,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            config,
            registry: Some(registry),
            cache: Some(cache),
            resolvers: HashMap::new(),
            directories: HashMap::new(),
            next_id: 1,
            shut_down: false,
            _alive: LiveGuard::new(&stats, Live::Actor),
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

    fn resolver_for(&mut self, app: &str) -> Result<WeakAddr<ResolverActor>, EngineError> {
        if let Some(c) = self.resolvers.get_mut(app) {
            c.refs += 1;
            return Ok(c.addr.downgrade());
        }
        let (Some(registry), Some(cache)) = (&self.registry, &self.cache) else {
            return Err(EngineError::ShutDown);
        };
        let (registry, cache) = (registry.downgrade(), cache.downgrade());
        let id = self.id();
        let seed = self.seed(id);
        let (backoff, stats) = (self.config.backoff, self.stats.clone());
        let name = app.to_string();
        let addr = Supervisor::start(move |_| {
            ResolverActor::new(id, &name, backoff, seed, registry, cache, stats)
        });
        let weak = addr.downgrade();
        self.resolvers
            .insert(app.to_string(), Counted { addr, refs: 1 });
        Ok(weak)
    }

    fn release_resolver(&mut self, app: &str) {
        if let Some(c) = self.resolvers.get_mut(app) {
            c.refs -= 1;
            if c.refs == 0 {
                let c = self.resolvers.remove(app).expect("present above");
                c.addr.do_send(Shutdown);
            }
        }
    }

    fn shutdown_all(&mut self) {
        self.shut_down = true;
        for (_, (c, _)) in self.directories.drain() {
            c.addr.do_send(Shutdown);
        }
        for (_, c) in self.resolvers.drain() {
            c.addr.do_send(Shutdown);
        }
        if let Some(r) = self.registry.take() {
            r.do_send(Shutdown);
        }
        if let Some(c) = self.cache.take() {
            c.do_send(Shutdown);
        }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        // Dropping the engine without shutdown still stops everything.
        self.shutdown_all();
    }
}

impl Handler<Subscribe> for Coordinator {
    type Result = Result<Directory, EngineError>;
    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) -> Self::Result {
        if self.shut_down {
            return Err(EngineError::ShutDown);
        }
        let reference = msg.0;
        if reference.apps.is_empty() {
            return Err(EngineError::NoProviderApps(reference.subscribe_key()));
        }
        if let Some((c, handle)) = self.directories.get_mut(&reference) {
            c.refs += 1;
            return Ok(handle.clone());
        }
        let mut resolvers = Vec::with_capacity(reference.apps.len());
        for app in &reference.apps {
            resolvers.push(self.resolver_for(app)?);
        }
        let id = self.id();
        let seed = self.seed(id);
        let stats = self.stats.clone();
        let r = reference.clone();
        let addr = Supervisor::start(move |_| DirectoryActor::new(id, &r, resolvers, seed, stats));
        let handle = Directory::new(reference.clone(), addr.downgrade());
        self.directories
            .insert(reference, (Counted { addr, refs: 1 }, handle.clone()));
        Ok(handle)
    }
}

impl Handler<Unsubscribe> for Coordinator {
    type Result = Result<bool, EngineError>;
    fn handle(&mut self, msg: Unsubscribe, _ctx: &mut Self::Context) -> Self::Result {
        if self.shut_down {
            return Err(EngineError::ShutDown);
        }
        let Some((c, _)) = self.directories.get_mut(&msg.0) else {
            return Err(EngineError::NotSubscribed(msg.0.subscribe_key()));
        };
        c.refs -= 1;
        if c.refs > 0 {
            return Ok(false);
        }
        let (c, _) = self.directories.remove(&msg.0).expect("present above");
        c.addr.do_send(Shutdown);
        for app in &msg.0.apps {
            self.release_resolver(app);
        }
        Ok(true)
    }
}

impl Handler<Shutdown> for Coordinator {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.shutdown_all();
        ctx.stop();
    }
}

impl Handler<Restart> for Coordinator {
    type Result = Result<(), EngineError>;
    fn handle(&mut self, msg: Restart, _ctx: &mut Self::Context) -> Self::Result {
        if self.shut_down {
            return Err(EngineError::ShutDown);
        }
        let sent = match &msg.0 {
            RestartTarget::Registry => self.registry.as_ref().map(|a| a.do_send(ForceRestart)),
            RestartTarget::Cache => self.cache.as_ref().map(|a| a.do_send(ForceRestart)),
            RestartTarget::Resolver(app) => self
                .resolvers
                .get(app)
                .map(|c| c.addr.do_send(ForceRestart)),
            RestartTarget::Directory(r) => self
                .directories
                .get(r)
                .map(|(c, _)| c.addr.do_send(ForceRestart)),
        };
        sent.ok_or(EngineError::UnknownTarget(format!("{:?}", msg.0)))
    }
}
