//! The export actor of one provider instance: publishes the metadata and
//! registers the record, retrying with backoff until both land; after a
//! supervised restart it registers again (the registry is the source of
//! truth). A graceful shutdown announces closing, unregisters, drains
//! in-flight requests (bounded) and withdraws the metadata.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakAddr;
use futures::future::{join_all, BoxFuture, FutureExt, Shared};
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{
    BackoffPolicy, ErrorClass, MetadataInfo, MetadataPublisher, Registry, ServiceInstance,
};

use super::in_flight::InFlight;
use super::spec::CLOSING_KEY;
use crate::coordinator::{Coordinator, StopExport};
use crate::error::EngineError;
use crate::messages::{ForceRestart, Shutdown};
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// What a graceful shutdown achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether the record was removed from the registry.
    pub unregistered: bool,
    /// Whether every in-flight request finished within the drain limit.
    pub drained: bool,
}

/// One publish-and-register attempt, shared so a graceful stop can await it.
type Attempt = Shared<BoxFuture<'static, Result<(), (String, ErrorClass)>>>;

/// Longest wait for a register attempt already under way at shutdown.
const ATTEMPT_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Syncing,
    Registered,
    Closed,
}

/// Query: whether the record is registered.
#[derive(Message)]
#[rtype(result = "bool")]
pub(crate) struct IsRegistered;

/// Graceful shutdown with a drain limit.
#[derive(Message)]
#[rtype(result = "ShutdownReport")]
pub(crate) struct GracefulStop(pub Duration);

/// Keeps one exported instance registered.
pub struct ExportActor {
    registry: Arc<dyn Registry>,
    publishers: Vec<Arc<dyn MetadataPublisher>>,
    info: MetadataInfo,
    instance: ServiceInstance,
    backoff: BackoffPolicy,
    rng: StdRng,
    attempts: u32,
    phase: Phase,
    task: Option<SpawnHandle>,
    attempt: Option<Attempt>,
    in_flight: InFlight,
    stats: Arc<EngineStats>,
    _alive: LiveGuard,
}

impl ExportActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        registry: Arc<dyn Registry>,
        publishers: Vec<Arc<dyn MetadataPublisher>>,
        info: MetadataInfo,
        instance: ServiceInstance,
        backoff: BackoffPolicy,
        seed: u64,
        in_flight: InFlight,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            registry,
            publishers,
            info,
            instance,
            backoff,
            rng: StdRng::seed_from_u64(seed),
            attempts: 0,
            phase: Phase::Syncing,
            task: None,
            attempt: None,
            in_flight,
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
        }
    }

    /// Publishes the metadata everywhere, then registers the record.
    fn sync(&mut self, ctx: &mut Context<Self>) {
        if self.phase == Phase::Closed {
            return;
        }
        let publishes = self
            .publishers
            .iter()
            .map(|p| p.publish(self.info.clone()))
            .collect::<Vec<_>>();
        let register = self.registry.register(self.instance.clone());
        let fut = async move {
            for r in join_all(publishes).await {
                r.map_err(|e| (e.to_string(), ErrorClass::Transient))?;
            }
            register.await.map_err(|e| (e.to_string(), e.class()))
        }
        .boxed()
        .shared();
        // A graceful stop waits for this attempt instead of cutting it off,
        // so a put already on the wire cannot land after the unregister.
        self.attempt = Some(fut.clone());
        let handle = ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            act.task = None;
            act.attempt = None;
            match res {
                Ok(()) => {
                    act.attempts = 0;
                    act.phase = Phase::Registered;
                    tracing::info!(app = %act.instance.app, id = %act.instance.id, "provider registered");
                }
                Err((err, class)) => {
                    EngineStats::bump(&act.stats.register_failures);
                    let delay = act.backoff.delay(act.attempts, class, &mut act.rng);
                    act.attempts = act.attempts.saturating_add(1);
                    tracing::warn!(app = %act.instance.app, error = %err, ?delay, "export failed; retrying");
                    let h = timer::arm(ctx, &act.stats, delay, |act: &mut Self, ctx| {
                        act.task = None;
                        act.sync(ctx);
                    });
                    act.task = Some(h);
                }
            }
        }));
        self.task = Some(handle);
    }
}

impl Actor for ExportActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.phase != Phase::Closed {
            // First start, or a restart: (re)assert the record either way.
            self.phase = Phase::Syncing;
            self.sync(ctx);
        }
    }
}

impl Supervised for ExportActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        self.task = None;
        self.attempt = None;
    }
}

impl Handler<IsRegistered> for ExportActor {
    type Result = bool;
    fn handle(&mut self, _: IsRegistered, _ctx: &mut Self::Context) -> bool {
        self.phase == Phase::Registered
    }
}

impl Handler<GracefulStop> for ExportActor {
    type Result = ResponseActFuture<Self, ShutdownReport>;
    fn handle(&mut self, msg: GracefulStop, ctx: &mut Self::Context) -> Self::Result {
        if let Some(h) = self.task.take() {
            ctx.cancel_future(h);
        }
        let attempt = self.attempt.take();
        let was = std::mem::replace(&mut self.phase, Phase::Closed);
        self.in_flight.close();
        let registry = self.registry.clone();
        let mut closing = self.instance.clone();
        closing.healthy = false;
        closing.metadata.insert(CLOSING_KEY.into(), "true".into());
        let instance = self.instance.clone();
        let in_flight = self.in_flight.clone();
        let withdraws: Vec<_> = self
            .publishers
            .iter()
            .map(|p| p.withdraw(&self.info.app, &self.info.revision))
            .collect();
        let fut = async move {
            if let Some(attempt) = attempt {
                let _ = tokio::time::timeout(ATTEMPT_WAIT, attempt).await;
            }
            if was != Phase::Syncing {
                // Announce first so consumers stop picking this instance
                // before its record disappears.
                let _ = registry.register(closing).await;
            }
            let unregistered = registry.unregister(instance).await.is_ok();
            let drained = in_flight.drained(msg.0).await;
            join_all(withdraws).await;
            ShutdownReport {
                unregistered,
                drained,
            }
        };
        // No ctx.stop(): the coordinator drops the last address, and an
        // idle closed actor then ends without a supervised restart.
        Box::pin(fut.into_actor(self))
    }
}

impl Handler<Shutdown> for ExportActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.phase = Phase::Closed;
        self.attempt = None;
        if let Some(h) = self.task.take() {
            ctx.cancel_future(h);
        }
        ctx.stop();
    }
}

impl Handler<ForceRestart> for ExportActor {
    type Result = ();
    fn handle(&mut self, _: ForceRestart, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// Handle to one exported provider instance.
#[derive(Clone)]
pub struct ExportHandle {
    pub(crate) id: u64,
    pub(crate) instance: ServiceInstance,
    pub(crate) info: MetadataInfo,
    pub(crate) addr: WeakAddr<ExportActor>,
    pub(crate) coordinator: WeakAddr<Coordinator>,
    pub(crate) in_flight: InFlight,
}

impl ExportHandle {
    /// The registry record.
    pub fn instance(&self) -> &ServiceInstance {
        &self.instance
    }

    /// The exported metadata (its revision is on the record).
    pub fn metadata(&self) -> &MetadataInfo {
        &self.info
    }

    /// The in-flight tracker: take a guard per request served.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// Whether the record is registered now.
    pub async fn is_registered(&self) -> Result<bool, EngineError> {
        let addr = self.addr.upgrade().ok_or(EngineError::ShutDown)?;
        addr.send(IsRegistered)
            .await
            .map_err(|_| EngineError::ShutDown)
    }

    /// Graceful shutdown: announce closing, unregister, wait at most `drain`
    /// for in-flight requests, withdraw the metadata, stop.
    pub async fn shutdown(&self, drain: Duration) -> Result<ShutdownReport, EngineError> {
        let coordinator = self.coordinator.upgrade().ok_or(EngineError::ShutDown)?;
        coordinator
            .send(StopExport { id: self.id, drain })
            .await
            .map_err(|_| EngineError::ShutDown)?
    }
}
