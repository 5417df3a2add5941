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

use std::collections::{BTreeMap, BTreeSet};
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
    /// Interfaces the registry refused for good (a final error), with the
    /// error: dropped from later attempts.
    refused: BTreeMap<String, String>,
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
            refused: BTreeMap::new(),
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
            .filter(|interface| !self.refused.contains_key(*interface))
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
                        let outcome = fold_results(results);
                        for _ in 0..outcome.failures {
                            EngineStats::bump(&act.stats.mapping_write_failures);
                        }
                        for (interface, error) in &outcome.refused {
                            tracing::warn!(app = %act.parts.app, %interface, %error,
                                "interface mapping refused for good; dropped from the batch");
                        }
                        act.written.extend(outcome.written);
                        act.refused.extend(outcome.refused);
                        let res = outcome.verdict;
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

/// What one attempt's results come to, whatever their order.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// Interfaces whose mapping landed.
    written: Vec<String>,
    /// Interfaces refused with a final error, and the error.
    refused: Vec<(String, String)>,
    /// How many calls failed.
    failures: usize,
    /// What the export machine is told: retry if any error is retryable
    /// (the transient class wins over the persistent one, so the normal
    /// schedule applies while any call may pass soon), give up only when
    /// every error is final, success when nothing failed.
    verdict: Result<(), (ErrorClass, String)>,
}

/// Folds an attempt's per-interface results into one verdict that does not
/// depend on their order (the message is the one of the first interface by
/// name within the deciding class).
fn fold_results<E: std::fmt::Display + HasClass>(
    mut results: Vec<(String, Result<(), E>)>,
) -> Outcome {
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Outcome {
        written: Vec::new(),
        refused: Vec::new(),
        failures: 0,
        verdict: Ok(()),
    };
    let mut transient = None;
    let mut persistent = None;
    for (interface, r) in results {
        match r {
            Ok(()) => out.written.push(interface),
            Err(e) => {
                out.failures = out.failures.saturating_add(1);
                let message = e.to_string();
                match e.error_class() {
                    ErrorClass::Transient => {
                        transient.get_or_insert(message);
                    }
                    ErrorClass::Persistent => {
                        persistent.get_or_insert(message);
                    }
                    ErrorClass::Final => out.refused.push((interface, message)),
                }
            }
        }
    }
    out.verdict = if let Some(m) = transient {
        Err((ErrorClass::Transient, m))
    } else if let Some(m) = persistent {
        Err((ErrorClass::Persistent, m))
    } else if let Some((_, m)) = out.refused.first() {
        Err((ErrorClass::Final, m.clone()))
    } else {
        Ok(())
    };
    out
}

/// An error that knows its class (the registry error; a stand-in in tests).
trait HasClass {
    fn error_class(&self) -> ErrorClass;
}

impl HasClass for steadfast_core::RegistryError {
    fn error_class(&self) -> ErrorClass {
        self.class()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(ErrorClass, &'static str);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.1)
        }
    }
    impl HasClass for E {
        fn error_class(&self) -> ErrorClass {
            self.0
        }
    }

    fn batch() -> Vec<(String, Result<(), E>)> {
        vec![
            ("a.Final".into(), Err(E(ErrorClass::Final, "bad name"))),
            ("b.Ok".into(), Ok(())),
            ("c.Down".into(), Err(E(ErrorClass::Transient, "timeout"))),
        ]
    }

    #[test]
    fn a_retryable_error_retries_the_batch_whatever_the_order() {
        let forward = fold_results(batch());
        let mut reversed = batch();
        reversed.reverse();
        let backward = fold_results(reversed);
        assert_eq!(forward, backward);
        assert_eq!(
            forward.verdict,
            Err((ErrorClass::Transient, "timeout".to_string()))
        );
        assert_eq!(
            forward.refused,
            vec![("a.Final".to_string(), "bad name".to_string())]
        );
        assert_eq!(forward.written, vec!["b.Ok".to_string()]);
        assert_eq!(forward.failures, 2);
    }

    #[test]
    fn only_final_errors_give_up_and_none_succeed() {
        let gave_up = fold_results(vec![
            ("x".to_string(), Err(E(ErrorClass::Final, "no"))),
            ("y".to_string(), Ok(())),
        ]);
        assert_eq!(gave_up.verdict, Err((ErrorClass::Final, "no".to_string())));
        let ok = fold_results::<E>(vec![("y".to_string(), Ok(()))]);
        assert_eq!(ok.verdict, Ok(()));
        let persistent = fold_results(vec![
            ("p".to_string(), Err(E(ErrorClass::Persistent, "garbled"))),
            ("q".to_string(), Err(E(ErrorClass::Final, "no"))),
        ]);
        assert_eq!(
            persistent.verdict,
            Err((ErrorClass::Persistent, "garbled".to_string()))
        );
    }
}
