//! The registrar actor: one per engine, a thin shell around the core's
//! [`RegistrarMachine`] (failback registration). It delivers intents
//! (register / unregister), call results, timer firings and registry
//! session losses, and performs the machine's actions.
//!
//! Every registry call runs as its own spawned task under the registry call
//! deadline and `catch_unwind` ([`registry_call`]); its result comes back
//! as a message. Calls therefore run concurrently and off the actor's
//! state: one slow registry call never delays the others, and a supervised
//! restart of the actor does not cut a call off (its result still lands).
//!
//! While registrations wait on their backoff because the registry does not
//! answer, the machine asks for probes (a `list` of a waiting key's app,
//! at most one in flight, one per probe interval): the actor performs them
//! like any registry call and hands the outcome back; when one answers, the
//! machine wakes every waiting key at once (spread), whatever their backoff.
//!
//! It also reads the backend's session events (`Registry::sessions`, read
//! once per engine) and forwards each loss to the registry subscription
//! actor, so that subscriptions are re-established too.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use actix::WeakAddr;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{
    RecordKind, RegistrarAction, RegistrarConfig, RegistrarMachine, RegistrarOp, RegistrarToken,
    RegistrationKey, RegistrationState, Registry, RegistryError, ServiceInstance, SessionEvent,
};
use tokio::sync::oneshot;

use crate::contain::{registry_call, Contain};
use crate::messages::{SessionLost, Shutdown};
use crate::registry_actor::RegistryActor;
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// Wants `0` registered (latest intent per key wins).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RegisterIntent(pub ServiceInstance);

/// Wants `0` unregistered (latest intent per key wins).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct UnregisterIntent(pub ServiceInstance);

/// Wants the mapping entry "`app` serves `interface`" recorded (a key like
/// any registration: retried, restored after a session loss).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct MapIntent {
    pub interface: String,
    pub app: String,
}

/// Answers once `key` settles: true when it settled as `registered` says,
/// false when it settled the other way. Callers bound the wait.
#[derive(Message)]
#[rtype(result = "Option<oneshot::Receiver<bool>>")]
pub(crate) struct WaitSettled {
    pub key: RegistrationKey,
    pub registered: bool,
}

/// Where one key stands.
#[derive(Message)]
#[rtype(result = "Option<RegistrationState>")]
pub(crate) struct RegistrationOf(pub RegistrationKey);

/// Where every key stands.
#[derive(Message)]
#[rtype(result = "Vec<(RegistrationKey, RegistrationState)>")]
pub(crate) struct Registrations;

/// Unregisters every registered key now (engine shutdown); answers with a
/// receiver per key that fires once it settles (callers bound the wait).
#[derive(Message)]
#[rtype(result = "Vec<oneshot::Receiver<bool>>")]
pub(crate) struct UnregisterAll;

/// The backend's session stream panicked (user code) and was dropped.
#[derive(Message)]
#[rtype(result = "()")]
struct SessionStreamPanicked(String);

/// A registry call came back.
#[derive(Message)]
#[rtype(result = "()")]
struct CallDone {
    key: RegistrationKey,
    token: RegistrarToken,
    result: Result<(), RegistryError>,
}

/// A probe of the registry came back (whether it answered).
#[derive(Message)]
#[rtype(result = "()")]
struct ProbeDone {
    token: RegistrarToken,
    result: Result<(), RegistryError>,
}

/// Keeps every registration of one engine in place.
pub struct RegistrarActor {
    registry: Arc<dyn Registry>,
    machine: RegistrarMachine,
    rng: StdRng,
    timers: HashMap<RegistrarToken, SpawnHandle>,
    /// Calls started and not answered yet (a task of their own each: they
    /// answer a replacement too).
    calls: std::collections::HashSet<RegistrarToken>,
    waiters: HashMap<RegistrationKey, Vec<(bool, oneshot::Sender<bool>)>>,
    /// Where session losses are forwarded (subscriptions re-established).
    subscriptions: WeakAddr<RegistryActor>,
    /// The rng's seed (a replacement reseeds from it).
    seed: u64,
    /// Whether the session reader (a task of its own, outliving restarts)
    /// was started.
    sessions_read: bool,
    /// Set on a replacement until its `started` armed the machine's timers.
    resumed: Vec<RegistrarAction>,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

impl RegistrarActor {
    pub(crate) fn new(
        registry: Arc<dyn Registry>,
        config: RegistrarConfig,
        seed: u64,
        subscriptions: WeakAddr<RegistryActor>,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            registry,
            machine: RegistrarMachine::new(config),
            rng: StdRng::seed_from_u64(seed),
            timers: HashMap::new(),
            calls: Default::default(),
            waiters: HashMap::new(),
            subscriptions,
            seed,
            sessions_read: false,
            resumed: Vec::new(),
            terminated: false,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
        }
    }

    /// Restart clean: a new actor from the same inputs, with a fresh
    /// machine resuming from this one's intents and calls in flight
    /// ([`RegistrarMachine::resuming`]). Carried over too: the callers
    /// waiting for a key to settle, whether the session reader runs, the
    /// panic schedule and the shut-down flag.
    fn recreate(&mut self) -> Self {
        let config = *self.machine.config();
        let mut fresh = Self::new(
            self.registry.clone(),
            config,
            self.seed,
            self.subscriptions.clone(),
            self.stats.clone(),
        );
        let calls = std::mem::take(&mut self.calls);
        let point = self.machine.resume_point(|t| calls.contains(&t));
        let (machine, arm) = RegistrarMachine::resuming(config, point, &mut fresh.rng);
        fresh.machine = machine;
        fresh.resumed = arm;
        fresh.calls = calls;
        fresh.waiters = std::mem::take(&mut self.waiters);
        fresh.sessions_read = self.sessions_read;
        fresh.containment = std::mem::take(&mut self.containment);
        fresh.terminated = self.terminated;
        fresh
    }

    fn perform(&mut self, actions: Vec<RegistrarAction>, ctx: &mut Context<Self>) {
        self.containment.drill_point();
        for action in actions {
            match action {
                RegistrarAction::Call {
                    key,
                    token,
                    op,
                    deadline,
                } => {
                    let registry = self.registry.clone();
                    let me = ctx.address().downgrade();
                    let call = registry_call(deadline, move || match op {
                        RegistrarOp::Register(i) => registry.register(i),
                        RegistrarOp::Unregister(i) => registry.unregister(i),
                        RegistrarOp::Map { interface, app } => {
                            registry.register_mapping(&interface, &app)
                        }
                        RegistrarOp::Unmap { interface, app } => {
                            registry.unregister_mapping(&interface, &app)
                        }
                    });
                    // Its own task: concurrent with every other call.
                    self.calls.insert(token);
                    actix::spawn(async move {
                        let result = call.await;
                        if let Some(me) = me.upgrade() {
                            me.do_send(CallDone { key, token, result });
                        }
                    });
                }
                RegistrarAction::ArmTimer { key, token, delay } => {
                    let h = timer::arm(ctx, &self.stats, delay, move |act: &mut Self, ctx| {
                        act.timers.remove(&token);
                        let actions = act.machine.on_timer(&key, token);
                        act.perform(actions, ctx);
                    });
                    self.timers.insert(token, h);
                }
                RegistrarAction::ArmProbe { token, delay } => {
                    let h = timer::arm(ctx, &self.stats, delay, move |act: &mut Self, ctx| {
                        act.timers.remove(&token);
                        let actions = act.machine.on_probe_timer(token);
                        act.perform(actions, ctx);
                    });
                    self.timers.insert(token, h);
                }
                RegistrarAction::Probe {
                    app,
                    token,
                    deadline,
                } => {
                    let registry = self.registry.clone();
                    let me = ctx.address().downgrade();
                    let call = registry_call(deadline, move || registry.list(&app));
                    // Not a registration call: a replacement ignores it.
                    actix::spawn(async move {
                        let result = call.await.map(drop);
                        if let Some(me) = me.upgrade() {
                            me.do_send(ProbeDone { token, result });
                        }
                    });
                }
                RegistrarAction::RegistryAnswers { woken, within } => {
                    tracing::info!(
                        woken,
                        ?within,
                        "registry answering again; re-sending the registrations that waited for it"
                    );
                }
                RegistrarAction::CancelTimer { token } => {
                    if let Some(h) = self.timers.remove(&token) {
                        ctx.cancel_future(h);
                    }
                }
                RegistrarAction::Settled { key, registered } => {
                    if registered {
                        match key.kind {
                            RecordKind::Instance => {
                                tracing::info!(app = %key.app, id = %key.id, "registered")
                            }
                            RecordKind::Mapping => tracing::info!(app = %key.app,
                                interface = %key.id, "interface mapping recorded"),
                        }
                    }
                    for (wanted, tx) in self.waiters.remove(&key).unwrap_or_default() {
                        let _ = tx.send(wanted == registered);
                    }
                }
                RegistrarAction::Failed {
                    key,
                    registering,
                    failure,
                    retry,
                } => {
                    if key.kind == RecordKind::Mapping {
                        EngineStats::bump(&self.stats.mapping_write_failures);
                    } else if registering {
                        EngineStats::bump(&self.stats.register_failures);
                    } else {
                        EngineStats::bump(&self.stats.unregister_failures);
                    }
                    if matches!(failure.last_error, RegistryError::Panicked(_)) {
                        EngineStats::bump(&self.stats.registry_panics);
                    }
                    if retry.is_some_and(|d| !d.is_zero()) {
                        EngineStats::bump(&self.stats.registrar_retries);
                    }
                    // Warn once per state change (the first failure, or
                    // giving up); the retries in between log at debug.
                    let op = if registering {
                        "register"
                    } else {
                        "unregister"
                    };
                    if failure.attempts <= 1 || retry.is_none() {
                        tracing::warn!(app = %key.app, id = %key.id, %failure, ?retry,
                            "registry {op} failed");
                    } else {
                        tracing::debug!(app = %key.app, id = %key.id, %failure, ?retry,
                            "registry {op} still failing");
                    }
                    if retry.is_none() {
                        // Given up (a final error): it will not settle.
                        for (_, tx) in self.waiters.remove(&key).unwrap_or_default() {
                            let _ = tx.send(false);
                        }
                    }
                }
            }
        }
    }

    /// Reads the backend's session events in a task of its own (it outlives
    /// a restart of this actor; it holds only weak addresses).
    fn read_sessions(&mut self, ctx: &mut Context<Self>) {
        let registry = self.registry.clone();
        let Ok(Some(stream)) =
            std::panic::catch_unwind(AssertUnwindSafe(move || registry.sessions()))
        else {
            return;
        };
        let (me, subs) = (ctx.address().downgrade(), self.subscriptions.clone());
        actix::spawn(async move {
            let mut stream = AssertUnwindSafe(stream).catch_unwind();
            while let Some(item) = stream.next().await {
                let Some(me) = me.upgrade() else { break };
                let SessionEvent::Lost { reason } = match item {
                    Ok(event) => event,
                    Err(panic) => {
                        // User code: the stream is unusable after a panic.
                        // Say so; registrations and watches keep their own
                        // retries, only session losses go unseen.
                        let msg = steadfast_core::panic_message(&*panic);
                        me.do_send(SessionStreamPanicked(msg));
                        break;
                    }
                };
                me.do_send(SessionLost {
                    reason: reason.clone(),
                });
                if let Some(subs) = subs.upgrade() {
                    subs.do_send(SessionLost { reason });
                }
            }
        });
    }
}

impl Actor for RegistrarActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        let resumed = std::mem::take(&mut self.resumed);
        self.perform(resumed, ctx);
        if !std::mem::replace(&mut self.sessions_read, true) {
            self.read_sessions(ctx);
        }
    }
}

impl Supervised for RegistrarActor {
    /// Nothing of the old actor's state survives but what
    /// [`RegistrarActor::recreate`] names; its timers died with its
    /// context (its calls in flight run on and answer the replacement).
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        *self = self.recreate();
    }
}

impl Handler<RegisterIntent> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, msg: RegisterIntent, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let actions = act.machine.register(msg.0);
            act.perform(actions, ctx);
        });
    }
}

impl Handler<UnregisterIntent> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, msg: UnregisterIntent, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let actions = act.machine.unregister(msg.0);
            act.perform(actions, ctx);
        });
    }
}

impl Handler<MapIntent> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, msg: MapIntent, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let actions = act.machine.map(&msg.interface, &msg.app);
            act.perform(actions, ctx);
        });
    }
}

impl Handler<CallDone> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, msg: CallDone, ctx: &mut Self::Context) {
        self.calls.remove(&msg.token);
        self.contained(ctx, |act, ctx| {
            let actions =
                act.machine
                    .on_result(&msg.key, msg.token, msg.result, timer::now(), &mut act.rng);
            act.perform(actions, ctx);
        });
    }
}

impl Handler<ProbeDone> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, msg: ProbeDone, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let actions =
                act.machine
                    .on_probe_result(msg.token, msg.result, timer::now(), &mut act.rng);
            act.perform(actions, ctx);
        });
    }
}

impl Handler<SessionLost> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, msg: SessionLost, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            EngineStats::bump(&act.stats.session_losses);
            tracing::warn!(reason = %msg.reason, keys = act.machine.len(),
                "registry session lost; registering everything again, spread");
            let actions = act.machine.session_lost(&mut act.rng);
            act.perform(actions, ctx);
        });
    }
}

impl Handler<WaitSettled> for RegistrarActor {
    type Result = Option<oneshot::Receiver<bool>>;
    fn handle(&mut self, msg: WaitSettled, _ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let state = self.machine.state(&msg.key);
        let now = match (&state, msg.registered) {
            (Some(RegistrationState::Registered), true) => Some(true),
            (None, false) => Some(true),
            (None, true) => Some(false),
            (Some(RegistrationState::GaveUp { .. }), _) => Some(false),
            _ => None,
        };
        match now {
            Some(answer) => {
                let _ = tx.send(answer);
            }
            None => {
                let waiters = self.waiters.entry(msg.key).or_default();
                waiters.retain(|(_, tx)| !tx.is_closed());
                waiters.push((msg.registered, tx));
            }
        }
        Some(rx)
    }
}

impl Handler<UnregisterAll> for RegistrarActor {
    type Result = Vec<oneshot::Receiver<bool>>;
    fn handle(&mut self, _: UnregisterAll, ctx: &mut Self::Context) -> Self::Result {
        let actions = self.machine.unregister_all();
        let mut settled = Vec::new();
        for action in &actions {
            if let RegistrarAction::Call { key, .. } = action {
                let (tx, rx) = oneshot::channel();
                self.waiters
                    .entry(key.clone())
                    .or_default()
                    .push((false, tx));
                settled.push(rx);
            }
        }
        self.perform(actions, ctx);
        settled
    }
}

impl Handler<SessionStreamPanicked> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, msg: SessionStreamPanicked, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.registry_panics);
        tracing::error!(panic = %msg.0,
            "registry session stream panicked and was dropped: later session losses go unseen \
             (registrations and watches keep their own retries)");
    }
}

impl Handler<RegistrationOf> for RegistrarActor {
    type Result = Option<RegistrationState>;
    fn handle(&mut self, msg: RegistrationOf, _ctx: &mut Self::Context) -> Self::Result {
        self.machine.state(&msg.0)
    }
}

impl Handler<Registrations> for RegistrarActor {
    type Result = Vec<(RegistrationKey, RegistrationState)>;
    fn handle(&mut self, _: Registrations, _ctx: &mut Self::Context) -> Self::Result {
        self.machine.states()
    }
}

impl Handler<Shutdown> for RegistrarActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        let actions = self.machine.close();
        self.perform(actions, ctx);
        for (_, h) in self.timers.drain() {
            ctx.cancel_future(h);
        }
        self.waiters.clear();
        ctx.stop();
    }
}

crate::contain::contained_actor!(RegistrarActor, "registrar");
