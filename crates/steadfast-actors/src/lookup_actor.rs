//! The lookup actor: one per engine, a thin shell around
//! [`LookupCache`] serving one-shot instance queries
//! ([`Engine::instances`](crate::Engine::instances)).
//!
//! A query first asks the registry actor for the live state of the app's
//! watch ([`LiveInstances`]): a subscribed app answers from it with no
//! registry call ([`Source::Watch`], stale with its age while the watch is
//! marked stale). Any other app goes to the machine, whose actions the
//! actor performs: each registry `list` runs as a spawned future, contained
//! (`catch_unwind`) and bounded by the registry call deadline, and its
//! result comes back to the machine as a message; each answer goes to its
//! waiting caller through a oneshot channel.
//!
//! Restart clean: after a handler panic the actor is re-created from its
//! inputs with a fresh machine (its cache and throttles start empty). Only
//! its waiting callers carry over, and each is asked again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::LiveState;
use steadfast_core::{
    Freshness, InstancesAnswer, LookupAction, LookupCache, LookupConfig, LookupError, Registry,
    RegistryError, Source, Token, WaiterId,
};
use tokio::sync::oneshot;

use crate::contain::{registry_call, Contain};
use crate::messages::Shutdown;
use crate::registry_actor::RegistryActor;
use crate::registry_live::LiveInstances;
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// What a one-shot query answers.
pub type InstancesResult = Result<InstancesAnswer, LookupError>;

/// Engine -> lookup actor: the instances of `app`.
#[derive(Message)]
#[rtype(result = "InstancesResult")]
pub(crate) struct Instances {
    /// Provider app.
    pub app: String,
}

/// What a lookup actor is (re-)created from.
#[derive(Clone)]
struct LookupInputs {
    registry: Arc<dyn Registry>,
    live: WeakAddr<RegistryActor>,
    config: LookupConfig,
    /// Bound of each registry call and of the live-state question.
    call_timeout: Duration,
    seed: u64,
}

/// Serves one-shot instance queries (see the module docs).
pub struct LookupActor {
    inputs: LookupInputs,
    machine: LookupCache,
    /// Every waiting caller, with its app.
    waiters: HashMap<WaiterId, (String, oneshot::Sender<InstancesResult>)>,
    /// Waiters whose live-state question is under way, with their app.
    asking: HashMap<WaiterId, String>,
    next_waiter: WaiterId,
    /// Registry calls under way, by token.
    handles: HashMap<Token, SpawnHandle>,
    /// Set on a replacement until its `started` asked its waiters again.
    recreated: bool,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    /// Dropped at shutdown: a restarted shell answering `ShutDown` is not
    /// alive.
    alive: Option<LiveGuard>,
}

impl LookupActor {
    /// A lookup actor listing through `registry`, asking `live` for the
    /// watch state of subscribed apps, each call bounded by `call_timeout`.
    pub(crate) fn new(
        registry: Arc<dyn Registry>,
        live: WeakAddr<RegistryActor>,
        (config, call_timeout): (LookupConfig, Duration),
        seed: u64,
        stats: Arc<EngineStats>,
    ) -> Self {
        let inputs = LookupInputs {
            registry,
            live,
            config,
            call_timeout,
            seed,
        };
        Self::from_inputs(inputs, stats)
    }

    fn from_inputs(inputs: LookupInputs, stats: Arc<EngineStats>) -> Self {
        Self {
            machine: LookupCache::new(inputs.config, inputs.call_timeout, inputs.seed),
            inputs,
            waiters: HashMap::new(),
            asking: HashMap::new(),
            next_waiter: 1,
            handles: HashMap::new(),
            recreated: false,
            terminated: false,
            containment: Default::default(),
            alive: Some(LiveGuard::new(&stats, Live::Actor)),
            stats,
        }
    }

    /// Restart clean: a new actor from the same inputs. Carried over: the
    /// waiting callers (each asked again in `started`), the next waiter
    /// number, the panic schedule, and whether it was shut down.
    fn recreate(&mut self) -> Self {
        let mut fresh = Self::from_inputs(self.inputs.clone(), self.stats.clone());
        fresh.waiters = std::mem::take(&mut self.waiters);
        fresh.next_waiter = self.next_waiter;
        fresh.containment = std::mem::take(&mut self.containment);
        fresh.terminated = self.terminated;
        if fresh.terminated {
            fresh.alive = None;
        }
        fresh.recreated = true;
        fresh
    }

    fn query(&mut self, app: &str, waiter: WaiterId, ctx: &mut Context<Self>) {
        let actions = self.machine.query(app, waiter, timer::now());
        self.perform(actions, ctx);
    }

    fn perform(&mut self, actions: Vec<LookupAction>, ctx: &mut Context<Self>) {
        self.containment.drill_point();
        for action in actions {
            match action {
                LookupAction::Call {
                    app,
                    token,
                    deadline,
                } => {
                    EngineStats::bump(&self.stats.lookup_registry_calls);
                    let (registry, name) = (self.inputs.registry.clone(), app.clone());
                    let call = registry_call(deadline, move || registry.list(&name));
                    let h = ctx.spawn(call.into_actor(self).map(move |res, act, ctx| {
                        act.contained(ctx, |act, ctx| {
                            act.handles.remove(&token);
                            if let Err(e) = &res {
                                if matches!(e, RegistryError::Panicked(_)) {
                                    EngineStats::bump(&act.stats.registry_panics);
                                }
                                tracing::debug!(app, error = %e, "lookup list failed");
                            }
                            let actions = act.machine.on_result(&app, token, res, timer::now());
                            act.perform(actions, ctx);
                        });
                    }));
                    self.handles.insert(token, h);
                }
                LookupAction::Answer { waiter, result } => self.reply(waiter, result),
                LookupAction::Evicted { app } => {
                    EngineStats::bump(&self.stats.lookup_evictions);
                    tracing::debug!(app, "lookup cache full: dropped the least recent app");
                }
            }
        }
    }

    /// Answers `waiter` from the live watch state of `app`.
    fn answer_live(&mut self, app: &str, waiter: WaiterId, live: LiveState) {
        EngineStats::bump(&self.stats.lookup_watch_answers);
        let freshness = match live.stale_since {
            None => Freshness::Fresh,
            Some(t) => Freshness::Stale {
                age: timer::now().saturating_duration_since(t),
            },
        };
        let result = match (freshness, self.inputs.config.max_staleness) {
            (Freshness::Stale { age }, Some(max)) if age > max => Err(LookupError::TooStale {
                app: app.to_string(),
                age,
                max_staleness: max,
                cause: None,
            }),
            _ if live.instances.is_empty() => Err(LookupError::NotFound {
                app: app.to_string(),
                freshness,
            }),
            _ => Ok(InstancesAnswer {
                instances: live.instances,
                version: live.version,
                freshness,
                source: Source::Watch,
            }),
        };
        self.reply(waiter, result);
    }

    fn reply(&mut self, waiter: WaiterId, result: InstancesResult) {
        let s = &self.stats;
        let counter = match &result {
            Ok(a) if !a.freshness.is_fresh() => Some(&s.lookup_stale_answers),
            Ok(a) if a.source == Source::Cache => Some(&s.lookup_cache_hits),
            Ok(_) => None,
            Err(LookupError::Throttled { .. }) => Some(&s.lookup_throttled),
            Err(LookupError::Unavailable { .. }) => Some(&s.lookup_unavailable),
            Err(LookupError::NotFound { .. }) => Some(&s.lookup_not_found),
            Err(LookupError::TooStale { .. }) => Some(&s.lookup_too_stale),
            Err(_) => None,
        };
        if let Some(c) = counter {
            EngineStats::bump(c);
        }
        if let Some((_, tx)) = self.waiters.remove(&waiter) {
            // The caller may have given up; nothing to do then.
            let _ = tx.send(result);
        }
    }
}

impl Actor for LookupActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated || !std::mem::take(&mut self.recreated) {
            return;
        }
        // A replacement: every caller still waiting (whatever the old actor
        // had done for it) is asked again, in arrival order.
        let mut waiting: Vec<(WaiterId, String)> = self
            .waiters
            .iter()
            .map(|(w, (app, _))| (*w, app.clone()))
            .collect();
        waiting.sort_unstable();
        for (waiter, app) in waiting {
            self.query(&app, waiter, ctx);
        }
    }
}

impl Supervised for LookupActor {
    /// Nothing of the old actor's state survives but what
    /// [`LookupActor::recreate`] names; the old context's futures are gone.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        if !self.terminated {
            EngineStats::bump(&self.stats.restarts);
        }
        *self = self.recreate();
    }
}

impl Handler<Instances> for LookupActor {
    type Result = ResponseFuture<InstancesResult>;
    fn handle(&mut self, msg: Instances, ctx: &mut Self::Context) -> Self::Result {
        if self.terminated {
            return Box::pin(async { Err(LookupError::ShutDown) });
        }
        EngineStats::bump(&self.stats.lookups);
        let (tx, rx) = oneshot::channel();
        let waiter = self.next_waiter;
        self.next_waiter = self.next_waiter.wrapping_add(1);
        self.waiters.insert(waiter, (msg.app.clone(), tx));
        self.contained(ctx, |act, ctx| match act.inputs.live.upgrade() {
            Some(registry) => {
                act.asking.insert(waiter, msg.app.clone());
                let ask = tokio::time::timeout(
                    act.inputs.call_timeout,
                    registry.send(LiveInstances {
                        app: msg.app.clone(),
                    }),
                );
                ctx.spawn(ask.into_actor(act).map(move |res, act, ctx| {
                    act.contained(ctx, |act, ctx| {
                        if act.asking.remove(&waiter).is_none() {
                            return; // answered at shutdown
                        }
                        match res.ok().and_then(Result::ok).flatten() {
                            Some(live) => act.answer_live(&msg.app, waiter, live),
                            None => act.query(&msg.app, waiter, ctx),
                        }
                    });
                }));
            }
            None => act.query(&msg.app, waiter, ctx),
        });
        Box::pin(async move { rx.await.unwrap_or(Err(LookupError::ShutDown)) })
    }
}

impl Handler<Shutdown> for LookupActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        let actions = self.machine.close();
        self.perform(actions, ctx);
        for (_, (_, tx)) in self.waiters.drain() {
            let _ = tx.send(Err(LookupError::ShutDown));
        }
        self.asking.clear();
        for (_, h) in self.handles.drain() {
            ctx.cancel_future(h);
        }
        self.alive = None;
        ctx.stop();
    }
}

crate::contain::contained_actor!(LookupActor, "lookup");

#[cfg(test)]
mod tests;
