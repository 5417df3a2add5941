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

/// Serves one-shot instance queries (see the module docs).
pub struct LookupActor {
    registry: Arc<dyn Registry>,
    live: WeakAddr<RegistryActor>,
    machine: LookupCache,
    max_staleness: Option<Duration>,
    /// Bound of the live-state question to the registry actor.
    ask_timeout: Duration,
    waiters: HashMap<WaiterId, oneshot::Sender<InstancesResult>>,
    /// Waiters whose live-state question is under way, with their app.
    asking: HashMap<WaiterId, String>,
    next_waiter: WaiterId,
    /// Registry calls under way, by token.
    handles: HashMap<Token, SpawnHandle>,
    started_once: bool,
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
        Self {
            registry,
            live,
            machine: LookupCache::new(config, call_timeout, seed),
            max_staleness: config.max_staleness,
            ask_timeout: call_timeout,
            waiters: HashMap::new(),
            asking: HashMap::new(),
            next_waiter: 1,
            handles: HashMap::new(),
            started_once: false,
            terminated: false,
            containment: Default::default(),
            alive: Some(LiveGuard::new(&stats, Live::Actor)),
            stats,
        }
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
                    let (registry, name) = (self.registry.clone(), app.clone());
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
        let result = match (freshness, self.max_staleness) {
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
        if let Some(tx) = self.waiters.remove(&waiter) {
            // The caller may have given up; nothing to do then.
            let _ = tx.send(result);
        }
    }
}

impl Actor for LookupActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated || !self.started_once {
            self.started_once = true;
            return;
        }
        // Restarted: the futures of the old context are gone. Calls in
        // flight are made again; questions to the registry actor go to the
        // cache instead.
        let actions = self.machine.on_restart(timer::now());
        self.perform(actions, ctx);
        for (waiter, app) in std::mem::take(&mut self.asking) {
            self.query(&app, waiter, ctx);
        }
        // A caller the panic caught between its arrival and the machine.
        let known: std::collections::HashSet<WaiterId> = self.machine.waiting().collect();
        let orphans: Vec<WaiterId> = self
            .waiters
            .keys()
            .filter(|w| !known.contains(w))
            .copied()
            .collect();
        for waiter in orphans {
            let cause = RegistryError::Panicked("lookup handler panicked".into());
            let app = String::new();
            self.reply(waiter, Err(LookupError::Unavailable { app, cause }));
        }
    }
}

impl Supervised for LookupActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        if !self.terminated {
            EngineStats::bump(&self.stats.restarts);
        }
        self.handles.clear();
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
        self.waiters.insert(waiter, tx);
        self.contained(ctx, |act, ctx| match act.live.upgrade() {
            Some(registry) => {
                act.asking.insert(waiter, msg.app.clone());
                let ask = tokio::time::timeout(
                    act.ask_timeout,
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
        for (_, tx) in self.waiters.drain() {
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
