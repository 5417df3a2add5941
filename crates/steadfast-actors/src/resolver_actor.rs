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
use crate::link::{Inbox, Outbox, Wake};
use crate::messages::{
    AbandonMetadata, Attach, Detach, FeedItem, FetchMetadata, MetadataFetched, RecallMetadata,
    RetryNow, Shutdown, UnwatchApp, WatchApp,
};
use crate::registry_actor::RegistryActor;
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// Publishes the machine's pending updates; queued behind the current burst.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

/// Builds the machine of a (re-)created resolver from its inputs.
pub(crate) type MakeMachine = Arc<dyn Fn() -> ResolverMachine + Send + Sync>;

/// Resolves the metadata revisions of one provider app.
pub struct ResolverActor {
    id: u64,
    /// Builds a fresh machine: what a restart re-creates the actor from.
    make: MakeMachine,
    machine: ResolverMachine,
    registry: WeakAddr<RegistryActor>,
    cache: WeakAddr<CacheActor>,
    /// The registry actor's deliveries and health for the app, in order.
    feed: Inbox<FeedItem>,
    /// Attached directories: their key and the queue their updates go to.
    directories: HashMap<u64, (String, Outbox<DirectoryUpdate>)>,
    timers: HashMap<Token, SpawnHandle>,
    flush_scheduled: bool,
    /// Set on a replacement, until its `started` re-attached the
    /// directories it took over.
    recreated: bool,
    /// On a replacement, until its first delivery was applied: the tokens
    /// below this one are its predecessor's, whose fetches the cache may
    /// still run for it.
    orphans_below: Option<Token>,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    /// Disk snapshot of the app (load at start, writes), when configured.
    snapshot: Option<snapshot::SnapshotLink>,
    _alive: LiveGuard,
}

impl ResolverActor {
    /// The shell of the machine `make` builds (one provider app) with
    /// subscriber id `id`; a restart builds a fresh one.
    pub(crate) fn new(
        id: u64,
        make: MakeMachine,
        registry: WeakAddr<RegistryActor>,
        cache: WeakAddr<CacheActor>,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            id,
            machine: make(),
            make,
            registry,
            cache,
            feed: Inbox::default(),
            directories: HashMap::new(),
            timers: HashMap::new(),
            flush_scheduled: false,
            recreated: false,
            orphans_below: None,
            terminated: false,
            containment: Default::default(),
            snapshot: None,
            _alive: LiveGuard::new(&stats, Live::Resolver),
            stats,
        }
    }

    /// Restart clean: a new actor from the same inputs, with a fresh
    /// machine resuming after this one's watermarks
    /// ([`ResolverMachine::resuming`]). Carried over, because other actors
    /// hold them: the directories attached (their queues), the panic
    /// schedule, whether it was shut down, and the snapshot link's inputs.
    fn recreate(&mut self) -> Self {
        let mut fresh = Self::new(
            self.id,
            self.make.clone(),
            self.registry.clone(),
            self.cache.clone(),
            self.stats.clone(),
        );
        let at = self.machine.resume_point();
        fresh.machine = (self.make)().resuming(at);
        fresh.orphans_below = Some(fresh.machine.next_token());
        fresh.directories = std::mem::take(&mut self.directories);
        fresh.containment = std::mem::take(&mut self.containment);
        fresh.terminated = self.terminated;
        fresh.recreated = true;
        fresh.snapshot = self.snapshot.as_ref().map(snapshot::SnapshotLink::recreate);
        fresh
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
                            key: Some((app.clone(), revision)),
                            resolver: self.id,
                            tokens: token..token.saturating_add(1),
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

    /// A replacement that applied its first delivery has asked the cache
    /// for what it needs (its fetches join the flights still running):
    /// its predecessor's requests are let go, so no flight lives on for a
    /// waiter that is gone.
    fn abandon_orphans(&mut self) {
        let (Some(below), Some(cache)) = (self.orphans_below.take(), self.cache.upgrade()) else {
            return;
        };
        cache.do_send(AbandonMetadata {
            key: None,
            resolver: self.id,
            tokens: 0..below,
        });
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
        let updates = self.machine.take_updates();
        self.publish(updates, ctx);
    }

    /// Sends `updates` to the attached directories of their keys.
    fn publish(&mut self, updates: Vec<DirectoryUpdate>, ctx: &mut Context<Self>) {
        let changed = !updates.is_empty();
        for update in updates {
            EngineStats::bump(&self.stats.updates_published);
            self.send_to(update);
        }
        self.snapshot_after_flush(changed, ctx);
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
        if std::mem::take(&mut self.recreated) {
            // A replacement: the directories it took over subscribe again;
            // the machine hands them nothing until it has resynced.
            let now = timer::now();
            let keys: Vec<String> = self.directories.values().map(|(k, _)| k.clone()).collect();
            let actions = keys
                .iter()
                .flat_map(|k| self.machine.subscribe_at(k, now))
                .collect();
            self.perform(actions, ctx);
        }
        self.snapshot_started(ctx);
        if self.orphans_below.is_some() {
            // A replacement learns what the metadata cache holds first, so
            // the registry's state resolves at once (`resolver/resume.rs`).
            self.recall_then_watch(ctx);
        } else {
            // The registry actor answers with the app's whole state when it
            // has one.
            self.watch_app(ctx);
        }
        ctx.notify(Wake);
    }
}

/// The longest wait for the metadata cache's recall (it answers from
/// memory; without an answer the replacement resolves by fetching).
const RECALL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl ResolverActor {
    /// Asks the cache for the app's metadata, seeds the machine with it,
    /// then subscribes to the registry (bounded by [`RECALL_WAIT`]).
    fn recall_then_watch(&mut self, ctx: &mut Context<Self>) {
        let Some(cache) = self.cache.upgrade() else {
            self.watch_app(ctx);
            return;
        };
        let ask = cache.send(RecallMetadata {
            app: self.machine.app().to_string(),
        });
        let wait = async move { tokio::time::timeout(RECALL_WAIT, ask).await };
        ctx.spawn(wait.into_actor(self).map(|known, act, ctx| {
            if act.terminated {
                return;
            }
            if let Ok(Ok(known)) = known {
                act.machine.on_recalled(known);
            }
            act.watch_app(ctx);
        }));
    }

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

impl Supervised for ResolverActor {
    /// Nothing of the old actor's state survives but what
    /// [`ResolverActor::recreate`] names: a panic may have left any of it
    /// half-written. The old context's timers and futures are gone.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        *self = self.recreate();
    }
}

impl Handler<Wake> for ResolverActor {
    type Result = ();
    /// The feed is not empty: every queued delivery and health change is
    /// applied, then the updates are published once.
    fn handle(&mut self, _: Wake, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let mut actions = Vec::new();
            let mut delivered = false;
            for item in act.feed.drain() {
                match item {
                    FeedItem::Delivery(d) => {
                        delivered = true;
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
            if delivered {
                act.abandon_orphans();
            }
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
            let actions = if known {
                // A directory re-attaching (restarted, or it lost an update):
                // its old queue is gone with its old inbox.
                act.directories.remove(&msg.directory);
                Vec::new()
            } else {
                act.machine.subscribe_at(&msg.key, timer::now())
            };
            // What is pending goes to the directories already attached
            // first; the Reset is then everything so far, at the version
            // the key was last sent: its next update applies on top of it
            // (nothing while the machine resyncs: its Reset follows).
            let attach = act.machine.attach_update(&msg.key);
            act.publish(attach.pending, ctx);
            act.directories
                .insert(msg.directory, (msg.key.clone(), msg.updates.clone()));
            if let Some(full) = attach.reset {
                let (n, bound) = (full.change.len(), act.machine.len());
                let machine = &act.machine;
                let reset = || {
                    let u = machine.update_for(&msg.key);
                    let n = u.change.len();
                    Some((u, n))
                };
                if !msg.updates.send(full, n, bound, &act.stats, reset) {
                    act.directories.remove(&msg.directory);
                }
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
