//! The export actor of one provider instance: a shell around the core's
//! [`ExportMachine`]. It performs the machine's attempts (publish the
//! metadata everywhere, each call under a deadline, retried on the
//! machine's schedule) and timers; once the metadata is published it asks
//! the engine's failback registrar to register the record (the registrar
//! owns every register / unregister, its retries and session losses). A
//! graceful shutdown announces closing and unregisters through the
//! registrar (waiting a bounded time for each to settle; a failed
//! unregister is retried by the registrar afterwards), drains in-flight
//! requests (bounded) and withdraws the metadata; every call in it is
//! bounded, so a hung registry can never hold a stop (or `Engine::shutdown`)
//! for ever.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakAddr;
use futures::future::{join_all, BoxFuture, FutureExt, Shared};
use steadfast_core::{
    contain_publish_call, ErrorClass, ExportAction, ExportMachine, ExportPhase, MetadataInfo,
    MetadataPublisher, PublishError, RecoverPolicy, RegistrationKey, RegistrationState, Registry,
    ServiceInstance,
};

use super::in_flight::InFlight;
use super::spec::CLOSING_KEY;
use crate::contain::Contain;
use crate::coordinator::{Coordinator, StopExport};
use crate::error::EngineError;
use crate::messages::Shutdown;
use crate::registrar_actor::{
    RegisterIntent, RegistrarActor, RegistrationOf, UnregisterIntent, WaitSettled,
};
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

/// One publish attempt, shared so a graceful stop can await it.
type Attempt = Shared<BoxFuture<'static, Result<(), (ErrorClass, String)>>>;

/// Query: whether the record is registered.
#[derive(Message)]
#[rtype(result = "bool")]
pub(crate) struct IsRegistered;

/// Graceful shutdown with a drain limit.
#[derive(Message)]
#[rtype(result = "ShutdownReport")]
pub(crate) struct GracefulStop {
    /// Longest wait for in-flight requests.
    pub drain: Duration,
    /// Withdraw the metadata: false while another export of this engine
    /// still serves the same revision (revisions are shared by identical
    /// exports).
    pub withdraw: bool,
}

/// What an export actor is built from (and re-created from).
#[derive(Clone)]
pub(crate) struct ExportParts {
    /// The backend; registrations go through `registrar` (kept for
    /// export-time registry writes other than the record, e.g. mappings).
    #[allow(dead_code)]
    pub registry: Arc<dyn Registry>,
    pub publishers: Vec<Arc<dyn MetadataPublisher>>,
    pub info: MetadataInfo,
    pub instance: ServiceInstance,
    pub policy: RecoverPolicy,
    /// Deadline of each registry or publisher call.
    pub call_timeout: Duration,
    pub seed: u64,
    pub in_flight: InFlight,
    /// The engine's registrar: registers and unregisters the record.
    pub registrar: WeakAddr<RegistrarActor>,
}

/// Keeps one exported instance registered.
pub struct ExportActor {
    parts: ExportParts,
    machine: ExportMachine,
    timer: Option<SpawnHandle>,
    attempt: Option<Attempt>,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

/// A publisher call (user code) with its panics contained, under `limit`;
/// running out is an unavailable store.
async fn publisher_call(
    limit: Duration,
    call: impl FnOnce() -> BoxFuture<'static, Result<(), PublishError>>,
) -> Result<(), PublishError> {
    tokio::time::timeout(limit, contain_publish_call(call))
        .await
        .unwrap_or_else(|_| Err(PublishError::Unavailable("publisher call timed out".into())))
}

impl ExportActor {
    pub(crate) fn new(parts: ExportParts, stats: Arc<EngineStats>) -> Self {
        Self {
            machine: ExportMachine::new(parts.policy, parts.seed),
            parts,
            timer: None,
            attempt: None,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
        }
    }

    fn perform(&mut self, actions: Vec<ExportAction>, ctx: &mut Context<Self>) {
        self.containment.drill_point();
        for action in actions {
            match action {
                ExportAction::Attempt { token } => self.attempt(token, ctx),
                ExportAction::ArmTimer { token, delay } => {
                    tracing::warn!(app = %self.parts.instance.app, id = %self.parts.instance.id,
                        error = self.machine.last_error().unwrap_or_default(), ?delay,
                        "export failed; retrying");
                    let h = timer::arm(ctx, &self.stats, delay, move |act: &mut Self, ctx| {
                        act.timer = None;
                        let actions = act.machine.on_timer(token);
                        act.perform(actions, ctx);
                    });
                    if let Some(old) = self.timer.replace(h) {
                        ctx.cancel_future(old);
                    }
                }
                ExportAction::CancelTimer { .. } => {
                    if let Some(h) = self.timer.take() {
                        ctx.cancel_future(h);
                    }
                }
            }
        }
    }

    /// Publishes the metadata everywhere (the record is registered by the
    /// registrar once this succeeded).
    fn attempt(&mut self, token: u64, ctx: &mut Context<Self>) {
        let limit = self.parts.call_timeout;
        let publishes = self
            .parts
            .publishers
            .iter()
            .map(|p| {
                let (p, info) = (p.clone(), self.parts.info.clone());
                publisher_call(limit, move || p.publish(info))
            })
            .collect::<Vec<_>>();
        let fut = async move {
            for r in join_all(publishes).await {
                r.map_err(|e| (e.class(), e.to_string()))?;
            }
            Ok(())
        }
        .boxed()
        .shared();
        // A graceful stop waits for this attempt instead of cutting it off.
        self.attempt = Some(fut.clone());
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            act.contained(ctx, |act, ctx| act.on_attempt_done(token, res, ctx));
        }));
    }

    fn on_attempt_done(
        &mut self,
        token: u64,
        res: Result<(), (ErrorClass, String)>,
        ctx: &mut Context<Self>,
    ) {
        self.attempt = None;
        if res.is_err() {
            EngineStats::bump(&self.stats.register_failures);
        }
        let actions = self.machine.on_attempt_done(token, res, timer::now());
        if self.machine.is_registered() {
            // Published: the registrar keeps the record registered from now
            // on (an intent already in place costs no call).
            if let Some(r) = self.parts.registrar.upgrade() {
                r.do_send(RegisterIntent(self.parts.instance.clone()));
            }
        }
        self.perform(actions, ctx);
    }
}

crate::contain::contained_actor!(ExportActor, "export");

impl Actor for ExportActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let actions = self.machine.start();
        self.perform(actions, ctx);
    }
}

impl Supervised for ExportActor {
    /// Restart clean: a new actor from the same parts with a fresh machine,
    /// which asserts the record again on a clean schedule (publishing and
    /// registering are idempotent). Carried over: the panic schedule, and a
    /// stop (a stopped export stays stopped). The old context's attempt and
    /// timer are gone.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        let mut fresh = Self::new(self.parts.clone(), self.stats.clone());
        if *self.machine.phase() == ExportPhase::Closed {
            let _stopped = fresh.machine.stop();
        }
        fresh.containment = std::mem::take(&mut self.containment);
        *self = fresh;
    }
}

impl Handler<IsRegistered> for ExportActor {
    type Result = ResponseFuture<bool>;
    fn handle(&mut self, _: IsRegistered, _ctx: &mut Self::Context) -> Self::Result {
        // Published and handed to the registrar, and the registrar says the
        // record landed.
        let registrar = self
            .parts
            .registrar
            .upgrade()
            .filter(|_| self.machine.is_registered());
        let key = RegistrationKey::of(&self.parts.instance);
        Box::pin(async move {
            let Some(r) = registrar else { return false };
            matches!(
                r.send(RegistrationOf(key)).await,
                Ok(Some(RegistrationState::Registered))
            )
        })
    }
}

/// Asks `registrar` for `intent`, then waits at most `limit` for the key to
/// settle as wanted; true when it did.
async fn settle(
    registrar: &Option<Addr<RegistrarActor>>,
    instance: ServiceInstance,
    registered: bool,
    limit: Duration,
) -> bool {
    let Some(r) = registrar else { return false };
    let key = RegistrationKey::of(&instance);
    if registered {
        r.do_send(RegisterIntent(instance));
    } else {
        r.do_send(UnregisterIntent(instance));
    }
    let wait = async {
        match r.send(WaitSettled { key, registered }).await {
            Ok(Some(rx)) => rx.await.unwrap_or(false),
            _ => false,
        }
    };
    tokio::time::timeout(limit, wait).await.unwrap_or(false)
}

impl Handler<GracefulStop> for ExportActor {
    type Result = ResponseActFuture<Self, ShutdownReport>;
    fn handle(&mut self, msg: GracefulStop, ctx: &mut Self::Context) -> Self::Result {
        let plan = self.machine.stop();
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let attempt = self.attempt.take().filter(|_| plan.wait_for_attempt);
        self.parts.in_flight.close();
        let limit = self.parts.call_timeout;
        let registrar = self.parts.registrar.upgrade();
        let key = RegistrationKey::of(&self.parts.instance);
        let mut closing = self.parts.instance.clone();
        closing.healthy = false;
        closing.metadata.insert(CLOSING_KEY.into(), "true".into());
        let instance = self.parts.instance.clone();
        let in_flight = self.parts.in_flight.clone();
        let (app, revision) = (
            self.parts.info.app.clone(),
            self.parts.info.revision.clone(),
        );
        let withdraws: Vec<_> = self
            .parts
            .publishers
            .iter()
            .filter(|_| msg.withdraw)
            .map(|p| {
                let (p, app, revision) = (p.clone(), app.clone(), revision.clone());
                publisher_call(limit, move || p.withdraw(&app, &revision))
            })
            .collect();
        let fut = async move {
            if let Some(attempt) = attempt {
                let _ = tokio::time::timeout(limit, attempt).await;
            }
            // Announce closing only when the record is (or may be, with a
            // register on the wire) registered; a register still waiting to
            // retry is simply cancelled by the unregister (latest intent
            // wins).
            let state = match &registrar {
                Some(r) => r.send(RegistrationOf(key)).await.ok().flatten(),
                None => None,
            };
            let may_be_registered = match state {
                Some(RegistrationState::Registered) => true,
                Some(RegistrationState::Pending {
                    registering,
                    attempts,
                    ..
                }) => registering && attempts == 0,
                _ => false,
            };
            if plan.announce_closing && may_be_registered {
                // Announce first so consumers stop picking this instance
                // before its record disappears.
                settle(&registrar, closing, true, limit).await;
            }
            // Bounded wait; the registrar keeps retrying a failed
            // unregister afterwards (failback).
            let unregistered = settle(&registrar, instance, false, limit).await;
            let drained = in_flight.drained(msg.drain).await;
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
        self.machine.stop();
        self.attempt = None;
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
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
    /// The export's number in its engine (drills:
    /// `RestartTarget::Export`).
    #[cfg(any(test, feature = "testkit"))]
    pub fn id(&self) -> u64 {
        self.id
    }

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
