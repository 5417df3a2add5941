//! The provider side of the interface -> app mapping: at export, the app is
//! recorded for every interface the export serves
//! ([`steadfast_core::Registry::register_mapping`]), retried until it lands.
//!
//! The schedule is the core's [`ExportMachine`] (attempt, retry on the one
//! retry primitive with the registry policy, success ends the retries,
//! restart re-asserts); an attempt writes, concurrently and each under the
//! registry call deadline, only the interfaces not written yet. The mapping
//! is persistent, as Dubbo's is: nothing is removed when the export stops
//! (other instances of the app may still serve the interface; an app that
//! is gone for good leaves only an idle app resolver at consumers, whose
//! status says the registry holds no instance of it).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakAddr;
use futures::future::join_all;
use steadfast_core::{
    ErrorClass, ExportAction, ExportMachine, ExportPhase, RecoverPolicy, Registry,
};

use crate::contain::{registry_call, Contain};
use crate::coordinator::Coordinator;
use crate::messages::{ForceRestart, Shutdown};
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// What a mapping writer is built from.
pub(crate) struct WriterParts {
    pub registry: Arc<dyn Registry>,
    pub app: String,
    /// Interfaces to map to `app` (deduplicated).
    pub interfaces: BTreeSet<String>,
    pub policy: RecoverPolicy,
    /// Deadline of each registry call.
    pub call_timeout: Duration,
    pub seed: u64,
    /// Export id, and the coordinator told once everything landed (it then
    /// stops the writer).
    pub id: u64,
    pub coordinator: WeakAddr<Coordinator>,
}

/// Every mapping of export `0` landed (or a final error refused it): its
/// writer may stop.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct MappingsWritten(pub u64);

/// Writes one export's mappings until they land.
pub(crate) struct MappingWriter {
    parts: WriterParts,
    machine: ExportMachine,
    /// Interfaces whose mapping landed.
    written: BTreeSet<String>,
    timer: Option<SpawnHandle>,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

impl MappingWriter {
    pub(crate) fn new(parts: WriterParts, stats: Arc<EngineStats>) -> Self {
        Self {
            machine: ExportMachine::new(parts.policy, parts.seed),
            parts,
            written: BTreeSet::new(),
            timer: None,
            terminated: false,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
        }
    }

    /// Whether every mapping landed.
    pub(crate) fn done(&self) -> bool {
        self.machine.is_registered()
    }

    fn perform(&mut self, actions: Vec<ExportAction>, ctx: &mut Context<Self>) {
        for action in actions {
            match action {
                ExportAction::Attempt { token } => self.attempt(token, ctx),
                ExportAction::ArmTimer { token, delay } => {
                    tracing::warn!(app = %self.parts.app, ?delay,
                        error = self.machine.last_error().unwrap_or_default(),
                        "interface mapping write failed; retrying");
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

    fn attempt(&mut self, token: u64, ctx: &mut Context<Self>) {
        let limit = self.parts.call_timeout;
        let calls = self
            .parts
            .interfaces
            .difference(&self.written)
            .map(|interface| {
                let (registry, app) = (self.parts.registry.clone(), self.parts.app.clone());
                let name = interface.clone();
                let call = registry_call(limit, move || registry.register_mapping(&name, &app));
                let interface = interface.clone();
                async move { (interface, call.await) }
            })
            .collect::<Vec<_>>();
        ctx.spawn(
            join_all(calls)
                .into_actor(self)
                .map(move |results, act, ctx| {
                    act.contained(ctx, |act, ctx| {
                        let mut failure = None;
                        for (interface, r) in results {
                            match r {
                                Ok(()) => {
                                    act.written.insert(interface);
                                }
                                Err(e) => {
                                    EngineStats::bump(&act.stats.mapping_write_failures);
                                    failure.get_or_insert((e.class(), e.to_string()));
                                }
                            }
                        }
                        let res: Result<(), (ErrorClass, String)> = failure.map_or(Ok(()), Err);
                        let actions = act.machine.on_attempt_done(token, res, timer::now());
                        if act.done() || matches!(act.machine.phase(), ExportPhase::GaveUp(_)) {
                            tracing::info!(app = %act.parts.app, interfaces = act.written.len(),
                        "interface mappings written (or refused for good)");
                            if let Some(c) = act.parts.coordinator.upgrade() {
                                c.do_send(MappingsWritten(act.parts.id));
                            }
                        }
                        act.perform(actions, ctx);
                    });
                }),
        );
    }
}

crate::contain::contained_actor!(MappingWriter, "mapping writer");

impl Actor for MappingWriter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        // First start or a restart: what has not landed is written (again).
        if !self.done() {
            let actions = self.machine.start();
            self.perform(actions, ctx);
        }
    }
}

impl Supervised for MappingWriter {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        self.timer = None;
    }
}

impl Handler<Shutdown> for MappingWriter {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        let _plan = self.machine.stop();
        ctx.stop();
    }
}

impl Handler<ForceRestart> for MappingWriter {
    type Result = ();
    fn handle(&mut self, _: ForceRestart, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
