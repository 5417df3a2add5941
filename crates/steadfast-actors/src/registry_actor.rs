//! The registry subscription actor: a thin shell around
//! [`SubscriptionMachine`]. It owns the [`Registry`] backend, delivers the
//! machine's inputs (watch opened or failed, stream item or end, timer
//! fired, list result, subscriber added or removed, restart, shutdown) and
//! performs its actions (open a watch, read its stream, list an app, arm or
//! cancel a timer, send snapshots and health to the app's resolvers).
//!
//! Every registry future is user code and runs contained: the `watch()` and
//! `list()` calls, their futures and the polling of the stream run under
//! `catch_unwind`, so a panic becomes [`RegistryError::Panicked`], is
//! counted, and the watch is re-established like any failed one. Every call
//! is bounded by the machine's deadline.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use futures::StreamExt;
use steadfast_core::{
    panic_message, EventStream, Registry, RegistryError, RegistryEvent, SubscriptionConfig,
    SubscriptionMachine, SubscriptionResume, Token,
};
use steadfast_core::{SubscriptionAction, TimerKind, To};

use crate::contain::{registry_call, Contain};
use crate::link::Outbox;
use crate::messages::{FeedItem, RegistryHealth, SessionLost, Shutdown, UnwatchApp, WatchApp};
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// One item of a watch stream, tagged with the watch token it belongs to;
/// `None` marks the end of the stream.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WatchItem {
    app: String,
    token: Token,
    item: Option<Result<RegistryEvent, RegistryError>>,
}

/// Owns the registry backend and the per-app watches.
pub struct RegistryActor {
    registry: Arc<dyn Registry>,
    pub(crate) machine: SubscriptionMachine,
    /// Each subscribed app's resolvers, by id, with their feeds.
    subscribers: BTreeMap<String, HashMap<u64, Outbox<FeedItem>>>,
    /// Timers, calls and streams under way, by token.
    handles: HashMap<Token, SpawnHandle>,
    /// Open streams, counted in `watches_active`.
    watch_guards: HashMap<Token, LiveGuard>,
    /// A stream just opened, until the machine says to read it.
    opened: Option<(Token, EventStream)>,
    /// Set on a replacement (restart clean) until `started` resumes from it.
    resume: Option<SubscriptionResume>,
    /// The session spread set at build (an input kept for a replacement).
    spread: Option<std::time::Duration>,
    pub(crate) terminated: bool,
    /// Since when the registry is seen failing, as logged: set with the
    /// one WARN of an outage, cleared with its INFO once every watched app
    /// is healthy again (one line per state change, not per app or retry).
    outage_since: Option<std::time::Instant>,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

impl RegistryActor {
    /// A registry actor over `registry`, subscribing as `config` says.
    pub fn new(
        registry: Arc<dyn Registry>,
        config: SubscriptionConfig,
        seed: u64,
        stats: Arc<EngineStats>,
    ) -> Self {
        // User code: a panic here means "no" (the engine re-reads itself).
        let rereads = std::panic::catch_unwind(AssertUnwindSafe(|| registry.rereads_on_resume()))
            .unwrap_or(false);
        Self {
            registry,
            machine: SubscriptionMachine::new(config, seed).with_backend_rereads_on_resume(rereads),
            subscribers: BTreeMap::new(),
            handles: HashMap::new(),
            watch_guards: HashMap::new(),
            opened: None,
            resume: None,
            outage_since: None,
            spread: None,
            terminated: false,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
        }
    }

    /// Spreads the re-subscriptions after a registry session loss over
    /// `spread`.
    pub fn with_session_spread(mut self, spread: std::time::Duration) -> Self {
        self.machine.set_session_spread(spread);
        self.spread = Some(spread);
        self
    }

    /// Restart clean: a new actor from the same inputs (the registry, the
    /// config, the session spread) with a fresh machine, which resumes in
    /// `started` from this one's [`SubscriptionResume`]: what the resolvers
    /// were handed (see `steadfast_core`'s `subscription/resume.rs`).
    /// Carried over, because other actors hold them: the subscribers' feeds,
    /// the panic schedule, and whether it was shut down.
    fn recreate(&mut self) -> Self {
        let config = *self.machine.config();
        let seed = crate::random::thread_random();
        let mut fresh = Self::new(self.registry.clone(), config, seed, self.stats.clone());
        if let Some(spread) = self.spread {
            fresh = fresh.with_session_spread(spread);
        }
        fresh.resume = Some(self.machine.resume_point());
        fresh.subscribers = std::mem::take(&mut self.subscribers);
        fresh.containment = std::mem::take(&mut self.containment);
        fresh.terminated = self.terminated;
        // What the logs said (an outage warned) stays said: its INFO comes
        // once the replacement sees every app healthy.
        fresh.outage_since = self.outage_since;
        fresh
    }

    /// Counts a registry error (panics apart) and logs it: one WARN when
    /// the registry was healthy until now (the outage's state change), at
    /// debug for every other app and retry of the same outage.
    fn count_error(&mut self, app: &str, what: &str, err: &RegistryError) {
        if matches!(err, RegistryError::Panicked(_)) {
            EngineStats::bump(&self.stats.registry_panics);
        }
        if self.outage_since.is_some() {
            tracing::debug!(app, error = %err, "registry {what} still failing");
        } else {
            self.outage_since = Some(timer::now());
            tracing::warn!(
                app,
                error = %err,
                "registry {what} failed; serving the last known state and retrying"
            );
        }
    }

    /// After a health change: the INFO line that ends a warned outage, once
    /// no watched app is stale or failing to subscribe any more.
    fn log_recovery(&mut self) {
        let Some(since) = self.outage_since else {
            return;
        };
        let healthy = self.machine.apps().all(|app| {
            self.machine.stale_since(app).is_none() && self.machine.subscribe_failure(app).is_none()
        });
        if healthy {
            self.outage_since = None;
            tracing::info!(
                after = ?timer::now().saturating_duration_since(since),
                apps = self.machine.apps().count(),
                "registry answering again; every watch is current"
            );
        }
    }

    /// Spawns the registry `call` under `token` (cancellable through
    /// `handles`); its result comes back to `done`, contained.
    fn spawn_call<T: 'static>(
        &mut self,
        token: u64,
        call: futures::future::BoxFuture<'static, Result<T, RegistryError>>,
        ctx: &mut Context<Self>,
        done: impl FnOnce(&mut Self, Result<T, RegistryError>, &mut Context<Self>) + 'static,
    ) {
        let h = ctx.spawn(call.into_actor(self).map(move |res, act, ctx| {
            act.contained(ctx, |act, ctx| done(act, res, ctx));
        }));
        self.handles.insert(token, h);
    }

    fn perform(&mut self, actions: Vec<SubscriptionAction>, ctx: &mut Context<Self>) {
        self.containment.drill_point();
        let mut gone: Vec<(String, u64)> = Vec::new();
        let mut health_changed = false;
        for action in actions {
            match action {
                SubscriptionAction::OpenWatch {
                    app,
                    token,
                    deadline,
                } => {
                    let (registry, name) = (self.registry.clone(), app.clone());
                    let call = registry_call(deadline, move || registry.watch(&name));
                    self.spawn_call(token, call, ctx, move |act, res, ctx| {
                        act.on_opened(app, token, res, ctx)
                    });
                }
                SubscriptionAction::ReadStream { app, token } => self.read(app, token, ctx),
                SubscriptionAction::List {
                    app,
                    token,
                    deadline,
                } => {
                    let (registry, name) = (self.registry.clone(), app.clone());
                    let call = registry_call(deadline, move || registry.list(&name));
                    self.spawn_call(token, call, ctx, move |act, res, ctx| {
                        act.handles.remove(&token);
                        if let Err(e) = &res {
                            if matches!(e, RegistryError::Panicked(_)) {
                                EngineStats::bump(&act.stats.registry_panics);
                            }
                            tracing::debug!(app, error = %e, "registry list failed");
                        }
                        let now = timer::now();
                        let actions = act.machine.on_list_result(&app, token, res, now);
                        act.perform(actions, ctx);
                    });
                }
                SubscriptionAction::ArmTimer {
                    app,
                    token,
                    delay,
                    kind,
                } => {
                    let fire = move |act: &mut Self, ctx: &mut Context<Self>| {
                        act.handles.remove(&token);
                        let actions = act.machine.on_timer(&app, token, timer::now());
                        act.perform(actions, ctx);
                    };
                    let h = if kind == TimerKind::Resync {
                        // Housekeeping, not a retry: counted on its own.
                        let guard = LiveGuard::new(&self.stats, Live::Resync);
                        ctx.run_later(delay, move |act, ctx| {
                            drop(guard);
                            act.contained(ctx, fire);
                        })
                    } else {
                        timer::arm(ctx, &self.stats, delay, fire)
                    };
                    self.handles.insert(token, h);
                }
                SubscriptionAction::Cancel { token } => {
                    if let Some(h) = self.handles.remove(&token) {
                        ctx.cancel_future(h);
                    }
                    self.watch_guards.remove(&token);
                }
                SubscriptionAction::Deliver { app, to, delivery } => {
                    let item = FeedItem::Delivery(delivery);
                    gone.extend(
                        self.feed(&app, to, item)
                            .into_iter()
                            .map(|id| (app.clone(), id)),
                    );
                }
                SubscriptionAction::Health {
                    app,
                    to,
                    stale_since,
                } => {
                    health_changed = true;
                    let item = FeedItem::Health(RegistryHealth {
                        subscribe: self.machine.subscribe_failure(&app),
                        stale_since,
                    });
                    gone.extend(
                        self.feed(&app, to, item)
                            .into_iter()
                            .map(|id| (app.clone(), id)),
                    );
                }
                SubscriptionAction::SubscribeFailing { app, to, failure } => {
                    health_changed = true;
                    let item = FeedItem::Health(RegistryHealth {
                        stale_since: self.machine.stale_since(&app),
                        subscribe: failure,
                    });
                    gone.extend(
                        self.feed(&app, to, item)
                            .into_iter()
                            .map(|id| (app.clone(), id)),
                    );
                }
                SubscriptionAction::Gap {
                    app,
                    held,
                    base,
                    asked,
                } => {
                    if asked {
                        EngineStats::bump(&self.stats.resets_requested);
                    }
                    tracing::debug!(
                        app,
                        held = ?held,
                        %base,
                        asked,
                        "registry delta does not follow the state held (a notification was \
                         lost): re-reading the app"
                    );
                }
                ref reconciled @ SubscriptionAction::Reconciled {
                    ref app,
                    added,
                    removed,
                    changed,
                } => {
                    // One per instance that differed, as etcd counts.
                    EngineStats::add(&self.stats.missed_notifications, reconciled.missed());
                    tracing::warn!(
                        app,
                        added,
                        removed,
                        changed,
                        "resync found registry changes the watch did not report; applied them"
                    );
                }
                SubscriptionAction::IgnoredOlder { app, version, held } => {
                    EngineStats::bump(&self.stats.older_events_ignored);
                    tracing::debug!(
                        app,
                        %version,
                        %held,
                        "registry event not newer than the state held: ignored"
                    );
                }
                SubscriptionAction::Holding {
                    app,
                    newly_held,
                    held,
                } => {
                    EngineStats::add(&self.stats.instances_held, newly_held);
                    tracing::warn!(
                        app,
                        newly_held,
                        held = held.count,
                        grace = ?held.grace,
                        "mass expiry right after a registry recovery: holding the removed \
                         instances while their providers re-register"
                    );
                }
            }
        }
        if health_changed {
            self.log_recovery();
        }
        for (app, id) in gone {
            self.remove_subscriber(&app, id, ctx);
        }
    }

    /// Queues `item` on the feeds of `to` among `app`'s subscribers (a feed
    /// too far behind gets the app's whole state instead); returns the ids
    /// of subscribers that are gone.
    fn feed(&self, app: &str, to: To, item: FeedItem) -> Vec<u64> {
        let Some(subs) = self.subscribers.get(app) else {
            return Vec::new();
        };
        let targets: Vec<(u64, &Outbox<FeedItem>)> = match to {
            To::All => subs.iter().map(|(id, f)| (*id, f)).collect(),
            To::One(id) => subs.get(&id).map(|f| (id, f)).into_iter().collect(),
        };
        let (items, bound) = (item.items(), self.machine.app_len(app));
        let reset = || {
            let d = self.machine.full_delivery(app)?;
            let n = d.feed.len();
            Some((FeedItem::Delivery(d), n))
        };
        let mut gone = Vec::new();
        let mut item = Some(item);
        let last = targets.len().saturating_sub(1);
        for (k, (id, feed)) in targets.into_iter().enumerate() {
            // The last target takes the item itself (a Reset is not copied
            // for the usual single resolver).
            let entry = if k == last { item.take() } else { item.clone() };
            let Some(entry) = entry else {
                break;
            };
            if !feed.send(entry, items, bound, &self.stats, reset) {
                gone.push(id);
            }
        }
        gone
    }

    fn on_opened(
        &mut self,
        app: String,
        token: Token,
        res: Result<EventStream, RegistryError>,
        ctx: &mut Context<Self>,
    ) {
        self.handles.remove(&token);
        let res = match res {
            Ok(stream) => {
                self.opened = Some((token, stream));
                Ok(())
            }
            Err(e) => {
                EngineStats::bump(&self.stats.watch_failures);
                self.count_error(&app, "watch", &e);
                Err(e)
            }
        };
        let actions = self.machine.on_watch_opened(&app, token, res, timer::now());
        self.perform(actions, ctx);
        // Not read (no longer wanted): dropped here.
        self.opened = None;
    }

    fn read(&mut self, app: String, token: Token, ctx: &mut Context<Self>) {
        let Some((t, stream)) = self.opened.take() else {
            return;
        };
        if t != token {
            return;
        }
        let end = app.clone();
        let items = AssertUnwindSafe(stream)
            .catch_unwind()
            .map(move |r| WatchItem {
                app: app.clone(),
                token,
                item: Some(r.unwrap_or_else(|p| Err(RegistryError::Panicked(panic_message(&*p))))),
            })
            .chain(futures::stream::once(async move {
                WatchItem {
                    app: end,
                    token,
                    item: None,
                }
            }));
        let h = ctx.add_stream(items);
        self.handles.insert(token, h);
        self.watch_guards
            .insert(token, LiveGuard::new(&self.stats, Live::Watch));
    }

    fn remove_subscriber(&mut self, app: &str, id: u64, ctx: &mut Context<Self>) {
        if let Some(subs) = self.subscribers.get_mut(app) {
            subs.remove(&id);
            if subs.is_empty() {
                self.subscribers.remove(app);
            }
        }
        let actions = self.machine.unsubscribe(app, id, timer::now());
        self.perform(actions, ctx);
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
        if let Some(point) = self.resume.take() {
            let subscribers: Vec<(String, u64)> = self
                .subscribers
                .iter()
                .flat_map(|(app, subs)| subs.keys().map(move |id| (app.clone(), *id)))
                .collect();
            let actions = self.machine.resume(point, subscribers, timer::now());
            self.perform(actions, ctx);
        }
    }
}

impl Supervised for RegistryActor {
    /// Restart clean: the actor is replaced by one re-created from the inputs
    /// [`RegistryActor::recreate`] names (the old context's calls, streams
    /// and timers are gone with it).
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        *self = self.recreate();
    }
}

impl Handler<WatchApp> for RegistryActor {
    type Result = ();
    fn handle(&mut self, msg: WatchApp, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated {
                return;
            }
            act.subscribers
                .entry(msg.app.clone())
                .or_default()
                .insert(msg.id, msg.feed);
            let actions = act.machine.subscribe(&msg.app, msg.id, timer::now());
            act.perform(actions, ctx);
        });
    }
}

impl Handler<UnwatchApp> for RegistryActor {
    type Result = ();
    fn handle(&mut self, msg: UnwatchApp, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            act.remove_subscriber(&msg.app, msg.id, ctx);
        });
    }
}

impl StreamHandler<WatchItem> for RegistryActor {
    fn handle(&mut self, msg: WatchItem, ctx: &mut Self::Context) {
        let _watch =
            tracing::debug_span!("registry_watch", app = %msg.app, token = msg.token).entered();
        self.contained(ctx, |act, ctx| {
            if !act.machine.is_current_watch(&msg.app, msg.token) {
                return;
            }
            let now = timer::now();
            let actions = match msg.item {
                Some(Ok(instances)) => {
                    EngineStats::bump(&act.stats.snapshots_received);
                    act.machine
                        .on_stream_item(&msg.app, msg.token, Ok(instances), now)
                }
                Some(Err(e)) => {
                    // Stale, but the stream is kept: it may heal.
                    EngineStats::bump(&act.stats.watch_failures);
                    act.count_error(&msg.app, "watch stream", &e);
                    act.machine.on_stream_item(&msg.app, msg.token, Err(e), now)
                }
                None => {
                    EngineStats::bump(&act.stats.watch_failures);
                    // Routine by itself (the re-open that follows warns
                    // if the registry is really gone); inside a warned
                    // outage: debug.
                    if act.outage_since.is_some() {
                        tracing::debug!(app = msg.app, "registry watch ended; re-subscribing");
                    } else {
                        tracing::info!(app = msg.app, "registry watch ended; re-subscribing");
                    }
                    act.handles.remove(&msg.token);
                    act.watch_guards.remove(&msg.token);
                    act.machine.on_stream_end(&msg.app, msg.token, now)
                }
            };
            act.perform(actions, ctx);
        });
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // A watch ending is handled by its end marker; the actor lives on.
    }
}

impl Handler<Shutdown> for RegistryActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        let actions = self.machine.close();
        self.perform(actions, ctx);
        for (_, h) in self.handles.drain() {
            ctx.cancel_future(h);
        }
        self.watch_guards.clear();
        self.subscribers.clear();
        ctx.stop();
    }
}

impl Handler<SessionLost> for RegistryActor {
    type Result = ();
    fn handle(&mut self, msg: SessionLost, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated {
                return;
            }
            tracing::warn!(reason = %msg.reason,
                "registry session lost; re-establishing every subscription, spread");
            let actions = act.machine.session_lost(timer::now());
            act.perform(actions, ctx);
        });
    }
}

crate::contain::contained_actor!(RegistryActor, "registry");
