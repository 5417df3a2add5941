//! The mapping actor of one interface: a shell around the core's
//! [`MappingMachine`]. It opens the registry's mapping watch (under the
//! registry call deadline, panics contained), feeds the stream's items and
//! its end to the machine, arms its retry timer, and tells the coordinator
//! which apps appeared or disappeared and what the directories of the
//! interface must say while no app is known. The coordinator attaches the
//! directories of references without apps to those apps' resolvers.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakAddr;
use futures::StreamExt;
use steadfast_core::{
    panic_message, MappingAction, MappingEvent, MappingMachine, MappingToken, Pending,
    RecoverPolicy, Registry, RegistryError,
};

use crate::contain::{registry_call, Contain};
use crate::coordinator::Coordinator;
use crate::messages::Shutdown;
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// The mapping of `interface` changed: apps to attach, apps to detach, and
/// what a directory with no app must say.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub(crate) struct MappingChanged {
    pub interface: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub pending: Option<Pending>,
}

/// One item of a mapping stream, or its end (`item: None`).
struct MappingItem {
    token: MappingToken,
    item: Option<Result<MappingEvent, RegistryError>>,
}

impl Message for MappingItem {
    type Result = ();
}

/// What a mapping actor is built from.
#[derive(Clone)]
pub(crate) struct MappingParts {
    pub interface: String,
    pub registry: Arc<dyn Registry>,
    pub policy: RecoverPolicy,
    /// Deadline of each watch open.
    pub call_timeout: Duration,
    pub seed: u64,
    pub coordinator: WeakAddr<Coordinator>,
}

/// Follows one interface's mapping.
pub(crate) struct MappingActor {
    parts: MappingParts,
    machine: MappingMachine,
    /// The stream read now, with its token and liveness guard.
    watch: Option<(MappingToken, SpawnHandle, LiveGuard)>,
    timer: Option<SpawnHandle>,
    /// What the coordinator has been told: the apps, and whether the
    /// mapping answered (a replacement starts from exactly this).
    told: (std::collections::BTreeSet<String>, bool),
    /// The mapping's read failure was warned (one WARN per state change;
    /// the next good item logs its INFO and clears it).
    warned: bool,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

impl MappingActor {
    pub(crate) fn new(parts: MappingParts, stats: Arc<EngineStats>) -> Self {
        Self {
            machine: MappingMachine::new(parts.policy, parts.seed),
            parts,
            watch: None,
            timer: None,
            told: Default::default(),
            warned: false,
            terminated: false,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
        }
    }

    fn perform(&mut self, actions: Vec<MappingAction>, ctx: &mut Context<Self>) {
        self.containment.drill_point();
        let mut change = MappingChanged {
            interface: self.parts.interface.clone(),
            added: Vec::new(),
            removed: Vec::new(),
            pending: None,
        };
        let mut tell = false;
        for action in actions {
            match action {
                MappingAction::OpenWatch { token } => self.open(token, ctx),
                MappingAction::ArmTimer { token, delay } => {
                    let error = self.machine.failure().map(|f| f.last_error.to_string());
                    if self.warned {
                        tracing::debug!(interface = %self.parts.interface, ?delay, ?error,
                            "interface mapping read still failing; retrying");
                    } else {
                        self.warned = true;
                        tracing::warn!(interface = %self.parts.interface, ?delay, ?error,
                            "interface mapping read failed; retrying");
                    }
                    let h = timer::arm(ctx, &self.stats, delay, move |act: &mut Self, ctx| {
                        act.timer = None;
                        let actions = act.machine.on_timer(token);
                        act.perform(actions, ctx);
                    });
                    if let Some(old) = self.timer.replace(h) {
                        ctx.cancel_future(old);
                    }
                }
                MappingAction::DropWatch { token } => {
                    if self.watch.as_ref().is_some_and(|(t, _, _)| *t == token) {
                        let (_, h, _) = self.watch.take().expect("checked");
                        ctx.cancel_future(h);
                    }
                }
                MappingAction::AddApp(app) => {
                    tell = true;
                    change.added.push(app);
                }
                MappingAction::RemoveApp(app) => {
                    tell = true;
                    change.removed.push(app);
                }
                MappingAction::StatusChanged => tell = true,
            }
        }
        if tell {
            change.pending = self.machine.pending();
            for app in &change.removed {
                self.told.0.remove(app);
            }
            self.told.0.extend(change.added.iter().cloned());
            self.told.1 = self.machine.answered();
            if let Some(c) = self.parts.coordinator.upgrade() {
                c.do_send(change);
            }
        }
    }

    fn open(&mut self, token: MappingToken, ctx: &mut Context<Self>) {
        let (registry, interface) = (self.parts.registry.clone(), self.parts.interface.clone());
        let call = registry_call(self.parts.call_timeout, move || {
            registry.watch_mapping(&interface)
        });
        ctx.spawn(call.into_actor(self).map(move |res, act, ctx| {
            act.contained(ctx, |act, ctx| act.opened(token, res, ctx));
        }));
    }

    fn opened(
        &mut self,
        token: MappingToken,
        res: Result<steadfast_core::MappingStream, RegistryError>,
        ctx: &mut Context<Self>,
    ) {
        if self.terminated {
            return;
        }
        let stream = match res {
            Ok(stream) => stream,
            Err(e) => {
                EngineStats::bump(&self.stats.mapping_read_failures);
                let actions = self.machine.on_open_failed(token, e, timer::now());
                return self.perform(actions, ctx);
            }
        };
        let actions = self.machine.on_opened(token);
        if !self.machine.is_current(token) {
            return self.perform(actions, ctx);
        }
        let items = AssertUnwindSafe(stream)
            .catch_unwind()
            .map(move |r| MappingItem {
                token,
                item: Some(r.unwrap_or_else(|p| Err(RegistryError::Panicked(panic_message(&*p))))),
            })
            .chain(futures::stream::once(async move {
                MappingItem { token, item: None }
            }));
        let h = ctx.add_stream(items);
        let guard = LiveGuard::new(&self.stats, Live::Watch);
        if let Some((_, old, _)) = self.watch.replace((token, h, guard)) {
            ctx.cancel_future(old);
        }
        self.perform(actions, ctx);
    }
}

crate::contain::contained_actor!(MappingActor, "mapping");

impl Actor for MappingActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        let actions = self.machine.start();
        self.perform(actions, ctx);
    }
}

impl Supervised for MappingActor {
    /// Restart clean: a new actor from the same parts, with a fresh
    /// machine that knows only what was told to the coordinator (the
    /// apps, whether the mapping answered; not what the old machine held,
    /// which a panic may have left untold), so its first read reports the
    /// difference. The panic schedule and the shut-down flag carry over;
    /// the old context's stream and timer are gone.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        let mut fresh = Self::new(self.parts.clone(), self.stats.clone());
        let (apps, answered) = std::mem::take(&mut self.told);
        fresh.machine = MappingMachine::new(self.parts.policy, self.parts.seed)
            .resuming(apps.clone(), answered);
        fresh.told = (apps, answered);
        fresh.warned = self.warned;
        fresh.containment = std::mem::take(&mut self.containment);
        fresh.terminated = self.terminated;
        *self = fresh;
    }
}

impl StreamHandler<MappingItem> for MappingActor {
    fn handle(&mut self, msg: MappingItem, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated || !act.machine.is_current(msg.token) {
                return;
            }
            let now = timer::now();
            let actions = match msg.item {
                Some(Ok(event)) => {
                    if std::mem::take(&mut act.warned) {
                        tracing::info!(interface = %act.parts.interface,
                            "interface mapping readable again");
                    }
                    act.machine.on_item(msg.token, Ok(event), now)
                }
                Some(Err(e)) => {
                    EngineStats::bump(&act.stats.mapping_read_failures);
                    act.machine.on_item(msg.token, Err(e), now)
                }
                None => {
                    EngineStats::bump(&act.stats.mapping_read_failures);
                    // Routine by itself; a failing re-open warns.
                    tracing::info!(interface = %act.parts.interface,
                        "interface mapping watch ended; re-watching");
                    act.watch = None;
                    act.machine.on_end(msg.token, now)
                }
            };
            act.perform(actions, ctx);
        });
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // A stream ending is handled by its end marker; the actor lives on.
    }
}

impl Handler<Shutdown> for MappingActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        // Nothing to tell: the coordinator already let go of the interface.
        drop(self.machine.close());
        self.watch = None;
        ctx.stop();
    }
}
