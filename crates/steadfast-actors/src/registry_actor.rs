//! The registry subscription actor: owns the [`Registry`] backend, keeps one
//! watch per app that has subscribers, and sends every snapshot to the
//! resolvers of that app. A failed or ended watch is re-established with
//! capped exponential backoff and jitter; the first snapshot after a
//! (re)subscribe replaces the old state. After a supervised restart every
//! watch is re-established and no subscriber is lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{BackoffPolicy, Registry, RegistryError, ServiceInstance};

use crate::messages::{
    ForceRestart, InstancesSnapshot, RegistryHealth, Shutdown, UnwatchApp, WatchApp,
};
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

#[derive(Default)]
struct AppWatch {
    subscribers: HashMap<
        u64,
        (
            WeakRecipient<InstancesSnapshot>,
            WeakRecipient<RegistryHealth>,
        ),
    >,
    stale_since: Option<std::time::Instant>,
    generation: u64,
    latest: Option<Arc<Vec<ServiceInstance>>>,
    epoch: u64,
    attempts: u32,
    task: Option<SpawnHandle>,
    retry: Option<SpawnHandle>,
    stream_guard: Option<LiveGuard>,
}

/// One item of a watch stream, tagged with the watch epoch it belongs to;
/// `None` marks the end of the stream.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WatchItem {
    app: String,
    epoch: u64,
    item: Option<Result<Arc<Vec<ServiceInstance>>, RegistryError>>,
}

/// Owns the registry backend and the per-app watches.
pub struct RegistryActor {
    registry: Arc<dyn Registry>,
    backoff: BackoffPolicy,
    rng: StdRng,
    apps: BTreeMap<String, AppWatch>,
    stats: Arc<EngineStats>,
    terminated: bool,
    _alive: LiveGuard,
}

impl RegistryActor {
    /// A registry actor over `registry`, re-subscribing with `backoff`.
    pub fn new(
        registry: Arc<dyn Registry>,
        backoff: BackoffPolicy,
        seed: u64,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            registry,
            backoff,
            rng: StdRng::seed_from_u64(seed),
            apps: BTreeMap::new(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
            terminated: false,
        }
    }

    fn start_watch(&mut self, app: &str, ctx: &mut Context<Self>) {
        let Some(w) = self.apps.get_mut(app) else {
            return;
        };
        w.epoch += 1;
        let epoch = w.epoch;
        if let Some(h) = w.task.take() {
            ctx.cancel_future(h);
        }
        w.stream_guard = None;
        let name = app.to_string();
        let fut = self.registry.watch(app);
        let handle = ctx.spawn(
            fut.into_actor(self)
                .map(move |res, act, ctx| act.on_watch_opened(name, epoch, res, ctx)),
        );
        if let Some(w) = self.apps.get_mut(app) {
            w.task = Some(handle);
        }
    }

    fn on_watch_opened(
        &mut self,
        app: String,
        epoch: u64,
        res: Result<steadfast_core::SnapshotStream, RegistryError>,
        ctx: &mut Context<Self>,
    ) {
        match self.apps.get(&app) {
            Some(w) if w.epoch == epoch => {}
            _ => return,
        }
        match res {
            Ok(stream) => {
                let (a, b) = (app.clone(), app.clone());
                let items = stream
                    .map(move |item| WatchItem {
                        app: a.clone(),
                        epoch,
                        item: Some(item),
                    })
                    .chain(futures::stream::once(async move {
                        WatchItem {
                            app: b,
                            epoch,
                            item: None,
                        }
                    }));
                let handle = ctx.add_stream(items);
                let guard = LiveGuard::new(&self.stats, Live::Watch);
                if let Some(w) = self.apps.get_mut(&app) {
                    w.task = Some(handle);
                    w.stream_guard = Some(guard);
                }
            }
            Err(e) => self.schedule_resubscribe(&app, e, ctx),
        }
    }

    fn schedule_resubscribe(&mut self, app: &str, err: RegistryError, ctx: &mut Context<Self>) {
        EngineStats::bump(&self.stats.watch_failures);
        let Some(w) = self.apps.get_mut(app) else {
            return;
        };
        if let Some(h) = w.task.take() {
            ctx.cancel_future(h);
        }
        w.stream_guard = None;
        w.epoch += 1;
        if w.stale_since.is_none() {
            // Subscribers keep serving the last snapshot, marked stale.
            let since = timer::now();
            w.stale_since = Some(since);
            let msg = RegistryHealth {
                app: app.to_string(),
                stale_since: Some(since),
            };
            for (_, h) in w.subscribers.values() {
                if let Some(h) = h.upgrade() {
                    h.do_send(msg.clone());
                }
            }
        }
        let delay = self.backoff.delay(w.attempts, err.class(), &mut self.rng);
        w.attempts = w.attempts.saturating_add(1);
        tracing::warn!(app, error = %err, ?delay, "registry watch failed; re-subscribing");
        let name = app.to_string();
        let handle = timer::arm(ctx, &self.stats, delay, move |act: &mut Self, ctx| {
            if let Some(w) = act.apps.get_mut(&name) {
                w.retry = None;
            }
            act.start_watch(&name, ctx);
        });
        if let Some(w) = self.apps.get_mut(app) {
            if let Some(old) = w.retry.replace(handle) {
                ctx.cancel_future(old);
            }
        }
    }

    fn on_snapshot(&mut self, app: &str, instances: Arc<Vec<ServiceInstance>>) {
        EngineStats::bump(&self.stats.snapshots_received);
        let Some(w) = self.apps.get_mut(app) else {
            return;
        };
        w.attempts = 0;
        // A snapshot is fresh: receivers clear their stale mark on it.
        w.stale_since = None;
        w.generation += 1;
        w.latest = Some(instances.clone());
        let msg = InstancesSnapshot {
            app: app.to_string(),
            generation: w.generation,
            instances,
        };
        w.subscribers.retain(|_, (s, _)| match s.upgrade() {
            Some(r) => {
                r.do_send(msg.clone());
                true
            }
            None => false,
        });
    }

    fn stop_app(w: &mut AppWatch, ctx: &mut Context<Self>) {
        for h in [w.task.take(), w.retry.take()].into_iter().flatten() {
            ctx.cancel_future(h);
        }
        w.stream_guard = None;
        w.epoch += 1;
    }
}

impl Actor for RegistryActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            // Restarted after shutdown while an address was still held:
            // stay idle; the actor ends when its last address drops.
            return;
        }
        let apps: Vec<String> = self.apps.keys().cloned().collect();
        for app in apps {
            self.start_watch(&app, ctx);
        }
    }
}

impl Supervised for RegistryActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        for w in self.apps.values_mut() {
            // The old context's futures are gone; forget their handles.
            w.task = None;
            w.retry = None;
            w.stream_guard = None;
        }
    }
}

impl Handler<WatchApp> for RegistryActor {
    type Result = ();
    fn handle(&mut self, msg: WatchApp, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        let fresh = !self.apps.contains_key(&msg.app);
        let w = self.apps.entry(msg.app.clone()).or_default();
        if let (Some(latest), Some(r)) = (&w.latest, msg.subscriber.upgrade()) {
            r.do_send(InstancesSnapshot {
                app: msg.app.clone(),
                generation: w.generation,
                instances: latest.clone(),
            });
        }
        if let (Some(since), Some(h)) = (w.stale_since, msg.health.upgrade()) {
            h.do_send(RegistryHealth {
                app: msg.app.clone(),
                stale_since: Some(since),
            });
        }
        w.subscribers.insert(msg.id, (msg.subscriber, msg.health));
        if fresh {
            self.start_watch(&msg.app, ctx);
        }
    }
}

impl Handler<UnwatchApp> for RegistryActor {
    type Result = ();
    fn handle(&mut self, msg: UnwatchApp, ctx: &mut Self::Context) {
        let Some(w) = self.apps.get_mut(&msg.app) else {
            return;
        };
        w.subscribers.remove(&msg.id);
        if w.subscribers.is_empty() {
            let mut w = self.apps.remove(&msg.app).expect("present above");
            Self::stop_app(&mut w, ctx);
        }
    }
}

impl StreamHandler<WatchItem> for RegistryActor {
    fn handle(&mut self, msg: WatchItem, ctx: &mut Self::Context) {
        match self.apps.get(&msg.app) {
            Some(w) if w.epoch == msg.epoch => {}
            _ => return,
        }
        match msg.item {
            Some(Ok(instances)) => self.on_snapshot(&msg.app, instances),
            Some(Err(e)) => self.schedule_resubscribe(&msg.app, e, ctx),
            None => self.schedule_resubscribe(
                &msg.app,
                RegistryError::WatchEnded("stream ended".into()),
                ctx,
            ),
        }
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // A watch ending is handled by its end marker; the actor lives on.
    }
}

impl Handler<Shutdown> for RegistryActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        for w in self.apps.values_mut() {
            Self::stop_app(w, ctx);
        }
        self.apps.clear();
        ctx.stop();
    }
}

impl Handler<ForceRestart> for RegistryActor {
    type Result = ();
    fn handle(&mut self, _: ForceRestart, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl crate::contain::Contain for RegistryActor {
    const NAME: &'static str = "registry";
    fn engine_stats(&self) -> &Arc<EngineStats> {
        &self.stats
    }
}

impl Handler<crate::contain::DrillPanic> for RegistryActor {
    type Result = ();
    fn handle(&mut self, _: crate::contain::DrillPanic, ctx: &mut Self::Context) {
        crate::contain::drill(self, ctx);
    }
}
