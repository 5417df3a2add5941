//! The resolver actor of one provider app: a thin shell around
//! [`ResolverMachine`]. It feeds the machine instance changes, fetch results, timer
//! firings and subscriber changes, performs the actions it returns, and
//! publishes the machine's updates once per burst of inputs. No handler
//! awaits an RPC: fetches run in the cache actor and answer by message.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::{DirectoryUpdate, ResolverAction, ResolverMachine, Token};

use crate::cache_actor::CacheActor;
use crate::contain::Contain;
use crate::graveyard::{Buries, Graveyard};
use crate::link::{Inbox, Outbox, Wake};
use crate::messages::{
    AbandonMetadata, Attach, Detach, FeedItem, FetchMetadata, MetadataFetched, RetryNow, Shutdown,
    UnwatchApp, WatchApp,
};
use crate::registry_actor::RegistryActor;
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// Publishes the machine's pending updates; queued behind the current burst.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

/// Resolves the metadata revisions of one provider app.
pub struct ResolverActor {
    id: u64,
    machine: ResolverMachine,
    registry: WeakAddr<RegistryActor>,
    cache: WeakAddr<CacheActor>,
    /// The registry actor's deliveries and health for the app, in order.
    feed: Inbox<FeedItem>,
    /// Attached directories: their key and the queue their updates go to.
    directories: HashMap<u64, (String, Outbox<DirectoryUpdate>)>,
    timers: HashMap<Token, SpawnHandle>,
    flush_scheduled: bool,
    graveyard: Graveyard,
    started_once: bool,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    /// Disk snapshot of the app (load at start, writes), when configured.
    snapshot: Option<snapshot::SnapshotLink>,
    _alive: LiveGuard,
}

impl ResolverActor {
    /// The shell of `machine` (one provider app) with subscriber id `id`.
    pub fn new(
        id: u64,
        machine: ResolverMachine,
        registry: WeakAddr<RegistryActor>,
        cache: WeakAddr<CacheActor>,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            id,
            machine,
            registry,
            cache,
            feed: Inbox::default(),
            directories: HashMap::new(),
            timers: HashMap::new(),
            flush_scheduled: false,
            graveyard: Graveyard::default(),
            started_once: false,
            terminated: false,
            containment: Default::default(),
            snapshot: None,
            _alive: LiveGuard::new(&stats, Live::Resolver),
            stats,
        }
    }

    /// Performs `actions` and queues a [`Flush`] behind the current burst of
    /// inputs (one publish per burst).
    fn perform(&mut self, actions: Vec<ResolverAction>, ctx: &mut Context<Self>) {
        self.perform_only(actions, ctx);
        if !self.flush_scheduled && !self.terminated {
            self.flush_scheduled = true;
            ctx.notify(Flush);
        }
    }

    /// Performs `actions`; the caller publishes (see [`ResolverActor::flush`]).
    fn perform_only(&mut self, actions: Vec<ResolverAction>, ctx: &mut Context<Self>) {
        self.containment.drill_point();
        let app = self.machine.app().to_string();
        let _app = tracing::info_span!("app", app = %app).entered();
        for action in actions {
            match action {
                ResolverAction::Fetch {
                    revision,
                    candidates,
                    token,
                    deadline,
                } => {
                    if let Some(cache) = self.cache.upgrade() {
                        cache.do_send(FetchMetadata {
                            key: (app.clone(), revision.clone()),
                            candidates,
                            resolver: self.id,
                            token,
                            reply: ctx.address().downgrade().recipient(),
                        });
                    }
                    // The machine cancels it when the fetch answers.
                    let h = timer::arm(ctx, &self.stats, deadline, move |act: &mut Self, ctx| {
                        act.timers.remove(&token);
                        let actions = act
                            .machine
                            .on_fetch_deadline(&revision, token, timer::now());
                        act.perform(actions, ctx);
                    });
                    self.timers.insert(token, h);
                }
                ResolverAction::RequestReset => {
                    // A delivery was lost: subscribing again (idempotent)
                    // makes the registry actor send the whole state.
                    EngineStats::bump(&self.stats.resets_requested);
                    self.watch_app(ctx);
                }
                ResolverAction::AbandonFetch { revision, token } => {
                    self.cancel_timer(token, ctx);
                    if let Some(cache) = self.cache.upgrade() {
                        cache.do_send(AbandonMetadata {
                            key: (app.clone(), revision),
                            resolver: self.id,
                            token,
                        });
                    }
                }
                ResolverAction::ArmTimer {
                    revision,
                    token,
                    delay,
                } => {
                    tracing::debug!(%revision, ?delay, "metadata retry armed");
                    let h = timer::arm(ctx, &self.stats, delay, move |act: &mut Self, ctx| {
                        act.timers.remove(&token);
                        let actions = act.machine.on_retry_due(&revision, token);
                        act.perform(actions, ctx);
                    });
                    self.timers.insert(token, h);
                }
                ResolverAction::CancelTimer { token } => self.cancel_timer(token, ctx),
            }
        }
    }

    /// Cancels the timer armed under `token` (a retry, or a fetch's
    /// deadline), if it is still pending.
    fn cancel_timer(&mut self, token: Token, ctx: &mut Context<Self>) {
        if let Some(h) = self.timers.remove(&token) {
            ctx.cancel_future(h);
        }
    }

    /// Publishes the machine's updates to the attached directories.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        let mut changed = false;
        for update in self.machine.take_updates() {
            EngineStats::bump(&self.stats.updates_published);
            self.send_to(update);
            changed = true;
        }
        self.snapshot_after_flush(changed, ctx);
        Graveyard::arm(self, ctx);
    }

    /// Queues `update` for every directory of its key (a directory too far
    /// behind gets the key's whole state instead): clones for all but the
    /// last, which gets the update itself (a Reset is not copied for the
    /// common single directory).
    fn send_to(&mut self, update: DirectoryUpdate) {
        let key = update.subscribe_key.clone();
        let (items, bound) = (update.change.len(), self.machine.len());
        let machine = &self.machine;
        let reset = || {
            let u = machine.update_for(&key);
            let n = u.change.len();
            Some((u, n))
        };
        let targets: Vec<(u64, &Outbox<DirectoryUpdate>)> = self
            .directories
            .iter()
            .filter(|(_, (k, _))| *k == key)
            .map(|(id, (_, o))| (*id, o))
            .collect();
        let mut update = Some(update);
        let mut gone = Vec::new();
        let last = targets.len().saturating_sub(1);
        for (k, (id, outbox)) in targets.into_iter().enumerate() {
            let entry = if k == last {
                update.take()
            } else {
                update.clone()
            };
            let Some(entry) = entry else {
                break;
            };
            if !outbox.send(entry, items, bound, &self.stats, reset) {
                gone.push(id);
            }
        }
        for id in gone {
            self.directories.remove(&id);
        }
    }
}

impl Actor for ResolverActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            // Restarted after shutdown while an address was still held:
            // stay idle; the actor ends when its last address drops.
            return;
        }
        if self.started_once {
            let actions = self.machine.on_restart(timer::now());
            self.perform(actions, ctx);
        }
        self.started_once = true;
        self.snapshot_started(ctx);
        // First start: subscribe. After a restart: the registry actor answers
        // with the app's whole state, so the machine resyncs from the source.
        // What a handler that panicked left queued is taken now (its
        // wake-up was spent).
        self.watch_app(ctx);
        ctx.notify(Wake);
    }
}

impl ResolverActor {
    /// Subscribes to the app's instance changes (idempotent; answered with
    /// the whole state when the registry actor has one).
    fn watch_app(&self, ctx: &mut Context<Self>) {
        if let Some(reg) = self.registry.upgrade() {
            reg.do_send(WatchApp {
                app: self.machine.app().to_string(),
                id: self.id,
                feed: self.feed.sender(ctx.address().downgrade().recipient()),
            });
        }
    }
}

impl Buries for ResolverActor {
    fn graveyard(&mut self) -> &mut Graveyard {
        &mut self.graveyard
    }
}

impl Supervised for ResolverActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        self.timers.clear();
        self.flush_scheduled = false;
        self.graveyard.reset();
        self.snapshot_restarting();
    }
}

impl Handler<Wake> for ResolverActor {
    type Result = ();
    /// The feed is not empty: every queued delivery and health change is
    /// applied, then the updates are published once.
    fn handle(&mut self, _: Wake, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let mut actions = Vec::new();
            for item in act.feed.drain() {
                match item {
                    FeedItem::Delivery(d) => {
                        actions.extend(act.machine.on_delivery(d, timer::now()));
                    }
                    FeedItem::Health(h) => {
                        act.machine.set_registry_stale(h.stale_since);
                        act.machine.set_subscribe_failure(h.subscribe);
                    }
                }
            }
            // The feed is a burst already: published at once.
            act.perform_only(actions, ctx);
            act.flush(ctx);
        });
    }
}

impl Handler<MetadataFetched> for ResolverActor {
    type Result = ();
    fn handle(&mut self, msg: MetadataFetched, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            // The fetch answered: its deadline's wait is over.
            act.cancel_timer(msg.token, ctx);
            let actions =
                act.machine
                    .on_fetch_result(&msg.revision, msg.token, msg.result, timer::now());
            act.perform(actions, ctx);
        });
    }
}

impl Handler<RetryNow> for ResolverActor {
    type Result = ();
    fn handle(&mut self, _: RetryNow, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated {
                return;
            }
            let actions = act.machine.retry_now(timer::now());
            let fetches = actions
                .iter()
                .filter(|a| matches!(a, ResolverAction::Fetch { .. }))
                .count();
            EngineStats::add(&act.stats.demand_fetches, fetches);
            act.perform(actions, ctx);
        });
    }
}

impl Handler<Attach> for ResolverActor {
    type Result = ();
    fn handle(&mut self, msg: Attach, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated {
                return;
            }
            let known = act.directories.contains_key(&msg.directory);
            act.directories
                .insert(msg.directory, (msg.key.clone(), msg.updates.clone()));
            let actions = if known {
                // A directory re-attaching (restarted, or it lost an update).
                Vec::new()
            } else {
                act.machine.subscribe_at(&msg.key, timer::now())
            };
            // Everything so far, at the key's last version: its next
            // update applies on top of it.
            let full = act.machine.update_for(&msg.key);
            let (n, bound) = (full.change.len(), act.machine.len());
            let machine = &act.machine;
            let reset = || {
                let u = machine.update_for(&msg.key);
                let n = u.change.len();
                Some((u, n))
            };
            let alive = msg.updates.send(full, n, bound, &act.stats, reset);
            if !alive {
                act.directories.remove(&msg.directory);
            }
            if !known {
                act.perform(actions, ctx);
            }
        });
    }
}

impl Handler<Detach> for ResolverActor {
    type Result = ();
    fn handle(&mut self, msg: Detach, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.directories.remove(&msg.directory).is_some() {
                let actions = act.machine.unsubscribe(&msg.key);
                act.perform(actions, ctx);
            }
        });
    }
}

impl Handler<Flush> for ResolverActor {
    type Result = ();
    fn handle(&mut self, _: Flush, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            act.flush_scheduled = false;
            act.flush(ctx);
        });
    }
}

impl Handler<Shutdown> for ResolverActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        let actions = self.machine.close();
        self.perform(actions, ctx);
        for (_, h) in self.timers.drain() {
            ctx.cancel_future(h);
        }
        self.directories.clear();
        if let Some(reg) = self.registry.upgrade() {
            reg.do_send(UnwatchApp {
                app: self.machine.app().to_string(),
                id: self.id,
            });
        }
        ctx.stop();
    }
}

crate::contain::contained_actor!(ResolverActor, "resolver");

mod inspect;
mod snapshot;
