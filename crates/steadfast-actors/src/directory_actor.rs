//! The directory actor of one reference: a thin shell around
//! [`DirectoryMachine`]. It attaches to the resolvers of the reference's
//! provider apps, takes their queued updates (Resets or Deltas) in one go
//! on each [`Wake`](crate::link::Wake), and publishes each new immutable
//! snapshot into the directory's [`Published`] slot, which handles read
//! without messaging the actor. An update that does not follow the version
//! held ([`Applied::Gap`]) makes it re-attach to that app's resolver (at
//! most once per second per app, counted), which answers with a Reset.
//! Closing notices
//! (from the registry's closing flag in an update, or [`EndpointClosing`]
//! from a caller) write tombstones in the machine; one timer, armed at the
//! machine's next tombstone expiry, delivers the expiry.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::{
    Applied, DirectoryMachine, DirectorySnapshot, DirectoryStatus, DirectoryUpdate, Published,
    Reference, ServiceUrl,
};
use tokio::sync::Notify;

use crate::contain::Contain;
use crate::link::{Inbox, Wake};
use crate::messages::{Attach, Detach, EndpointClosing, Shutdown};
use crate::resolver_actor::ResolverActor;
use crate::stats::{EngineStats, Live, LiveGuard};
use crate::timer;

/// Everything a directory can tell at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryView {
    /// Number of updates applied so far (grows on every change).
    pub version: u64,
    /// What the directory can serve, and why.
    pub status: DirectoryStatus,
    /// Every endpoint.
    pub endpoints: Vec<ServiceUrl>,
}

impl DirectoryView {
    /// The view of `snapshot` (copies its endpoint list).
    pub fn of(snapshot: &DirectorySnapshot) -> Self {
        Self {
            version: snapshot.version(),
            status: snapshot.status().clone(),
            endpoints: snapshot.iter().map(|e| (**e).clone()).collect(),
        }
    }
}

/// What a directory actor shares with its handles: the published snapshot
/// and a wake-up for callers waiting for a change.
#[derive(Debug, Default)]
pub(crate) struct DirectoryShared {
    /// The engine's caller-side settings, read when needed.
    pub(crate) config: crate::live_config::LiveConfig,
    /// The latest snapshot, read lock-free.
    pub(crate) published: Published,
    /// Notified after every publish and on close.
    pub(crate) changed: Notify,
    /// When waiting callers may next ask for a demand-driven re-resolve
    /// (see `directory_actor/probe.rs`).
    pub(crate) probe: std::sync::Mutex<steadfast_core::ProbeThrottle>,
    /// Balancing state shared by the directory's handles and leases
    /// (round-robin cursor, strategy override, ejected count).
    pub(crate) balance: Arc<steadfast_core::DirectoryBalance>,
}

impl DirectoryShared {
    /// Shared state of a new directory reading `config`.
    pub(crate) fn new(config: crate::live_config::LiveConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    fn publish(&self, snapshot: Arc<DirectorySnapshot>) {
        drop(self.published.store(snapshot));
        self.changed.notify_waiters();
    }

    /// Closes the slot for good and wakes every waiter.
    pub(crate) fn close(&self) {
        self.published.close();
        self.changed.notify_waiters();
    }
}

/// The endpoints of one reference.
pub struct DirectoryActor {
    id: u64,
    machine: DirectoryMachine,
    /// The reference's provider apps, in the order of `resolvers`.
    apps: Vec<String>,
    resolvers: Vec<WeakAddr<ResolverActor>>,
    /// The updates of each app's resolver, in the same order.
    inboxes: Vec<Inbox<DirectoryUpdate>>,
    shared: Arc<DirectoryShared>,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    /// The machine's timer (tombstone expiry, a replacement's publish
    /// gate): when it fires, and its handle.
    tomb_timer: Option<(Instant, SpawnHandle)>,
    /// Set on the struct a replacement took over: dropping it must not
    /// close the slot the replacement publishes into.
    handed_over: bool,
    _alive: LiveGuard,
}

impl DirectoryActor {
    /// A directory for `reference`, fed by `resolvers` (one per provider
    /// app, in the reference's app order), publishing into `shared`.
    pub(crate) fn new(
        id: u64,
        reference: &Reference,
        resolvers: Vec<WeakAddr<ResolverActor>>,
        shared: Arc<DirectoryShared>,
        seed: u64,
        stats: Arc<EngineStats>,
    ) -> Self {
        // A reference without apps follows its interface's mapping
        // (`directory_actor/mapped.rs`).
        let machine = if reference.apps.is_empty() {
            DirectoryMachine::following_mapping(reference.subscribe_key(), seed)
        } else {
            DirectoryMachine::new(reference.subscribe_key(), &reference.apps, seed)
        };
        shared.publish(machine.snapshot().clone());
        let inboxes = resolvers.iter().map(|_| Inbox::default()).collect();
        Self {
            id,
            machine,
            apps: reference.apps.clone(),
            resolvers,
            inboxes,
            shared,
            terminated: false,
            containment: Default::default(),
            tomb_timer: None,
            handed_over: false,
            _alive: LiveGuard::new(&stats, Live::Directory),
            stats,
        }
    }
}

impl DirectoryActor {
    /// Restart clean: a new actor from the same inputs (the key, the apps
    /// with their resolvers, the slot it publishes into) with a fresh
    /// machine resuming from this one's
    /// [`DirectoryResume`](steadfast_core::DirectoryResume): the version
    /// readers hold, the closing tombstones, what the mapping said (see
    /// `steadfast_core`'s `directory/resume.rs`). Until every app that had
    /// answered answers the re-attach, it serves that app's last published
    /// set (no partial state, and no removal of another app held back). Also carried: the panic schedule and whether it
    /// was shut down.
    fn recreate(&mut self) -> Self {
        let key = self.machine.subscribe_key().to_string();
        let seed = crate::random::thread_random();
        let mut machine = if self.machine.follows_mapping() {
            let mut m = DirectoryMachine::following_mapping(key, seed);
            for app in &self.apps {
                drop(m.add_app(app));
            }
            m
        } else {
            DirectoryMachine::new(key, &self.apps, seed)
        };
        let published = self.shared.published.load().version();
        let point = self.machine.resume_point().after(published);
        machine = machine.resuming(point, timer::now());
        self.handed_over = true;
        Self {
            id: self.id,
            machine,
            apps: std::mem::take(&mut self.apps),
            inboxes: self.resolvers.iter().map(|_| Inbox::default()).collect(),
            resolvers: std::mem::take(&mut self.resolvers),
            shared: self.shared.clone(),
            terminated: self.terminated,
            containment: std::mem::take(&mut self.containment),
            tomb_timer: None,
            handed_over: false,
            _alive: LiveGuard::new(&self.stats, Live::Directory),
            stats: self.stats.clone(),
        }
    }

    /// Publishes the machine's snapshot.
    fn publish(&self) {
        self.shared.publish(self.machine.snapshot().clone());
    }
}

impl Actor for DirectoryActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.terminated {
            // Restarted after shutdown while an address was still held:
            // stay idle; the actor ends when its last address drops.
            return;
        }
        // On first start and after a restart alike: attach, and each
        // resolver answers with the current update for our key (into a
        // fresh inbox after a restart).
        for i in 0..self.resolvers.len() {
            self.attach(i, ctx);
        }
        // A replacement's gate deadline, a carried tombstone's expiry.
        self.after_change(ctx);
    }
}

impl DirectoryActor {
    /// (Re)attaches to the resolver of app number `i`: it answers with the
    /// key's whole state (a Reset) through the app's inbox.
    fn attach(&self, i: usize, ctx: &mut Context<Self>) {
        let (Some(r), Some(inbox)) = (
            self.resolvers.get(i).and_then(WeakAddr::upgrade),
            self.inboxes.get(i),
        ) else {
            return;
        };
        r.do_send(Attach {
            key: self.machine.subscribe_key().to_string(),
            directory: self.id,
            updates: inbox.sender(ctx.address().downgrade().recipient()),
        });
    }
}

impl DirectoryActor {
    /// Counts what the tombstones did and (re)arms the expiry timer at the
    /// machine's next deadline (one timer at a time).
    fn after_change(&mut self, ctx: &mut Context<Self>) {
        self.stats
            .record_tombstones(&self.machine.take_tombstone_counts());
        let want = self.machine.next_deadline();
        if self.tomb_timer.as_ref().map(|(at, _)| *at) == want {
            return;
        }
        if let Some((_, h)) = self.tomb_timer.take() {
            ctx.cancel_future(h);
        }
        let Some(at) = want else {
            return;
        };
        let delay = at.saturating_duration_since(timer::now());
        let h = timer::arm(ctx, &self.stats, delay, |act: &mut Self, ctx| {
            act.tomb_timer = None;
            if act.terminated {
                return;
            }
            if act.machine.on_timeout(timer::now()).applied() {
                act.publish();
            }
            act.after_change(ctx);
        });
        self.tomb_timer = Some((at, h));
    }
}

impl Drop for DirectoryActor {
    fn drop(&mut self) {
        // However the actor ends, handles must not serve its last state
        // (a struct replaced by a restart did not end it).
        if !self.handed_over {
            self.shared.close();
        }
    }
}

impl Supervised for DirectoryActor {
    /// Restart clean: the actor is replaced by one re-created from the
    /// inputs [`DirectoryActor::recreate`] names (the old context's timers
    /// are gone with it).
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        *self = self.recreate();
    }
}

crate::contain::contained_actor!(DirectoryActor, "directory");

impl Handler<Wake> for DirectoryActor {
    type Result = ();
    /// Some app's inbox is not empty: every queued update of every app is
    /// applied in order, then the result is published once. An update that
    /// does not follow what the directory holds for its app re-attaches to
    /// that app's resolver, which answers with the whole state.
    fn handle(&mut self, _: Wake, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated {
                return;
            }
            // The TTL is read when a tombstone may be written (not frozen).
            let ttl = act.shared.config.load().tombstone_ttl;
            let (mut published, mut gaps) = (false, Vec::new());
            // What the batch replaced is freed once the result is published:
            // a free never delays a publish, and needs no timer (a wake of
            // its own) to run later.
            let mut replaced = Vec::new();
            for i in 0..act.inboxes.len() {
                for update in act.inboxes[i].drain() {
                    match act.machine.apply_at(update, timer::now(), ttl) {
                        (Applied::Yes, old) => {
                            published = true;
                            replaced.extend(old);
                        }
                        (Applied::Gap, _) => gaps.push(i),
                        (Applied::Ignored, _) => {}
                    }
                }
            }
            // A drill panics here: the batch applied, nothing published.
            act.containment.drill_point();
            if published {
                act.publish();
            }
            drop(replaced);
            gaps.dedup();
            for i in gaps {
                EngineStats::bump(&act.stats.resets_requested);
                act.attach(i, ctx);
            }
            act.after_change(ctx);
        });
    }
}

impl Handler<EndpointClosing> for DirectoryActor {
    type Result = ();
    /// A caller (or anyone) says an endpoint closes: the machine removes it
    /// and writes a tombstone if it holds it in that incarnation.
    fn handle(&mut self, msg: EndpointClosing, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated {
                return;
            }
            let ttl = act.shared.config.load().tombstone_ttl;
            if act.machine.close(msg.0, timer::now(), ttl).applied() {
                act.publish();
            }
            act.after_change(ctx);
        });
    }
}

impl Handler<Shutdown> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        self.shared.close();
        for r in self.resolvers.iter().filter_map(WeakAddr::upgrade) {
            r.do_send(Detach {
                key: self.machine.subscribe_key().to_string(),
                directory: self.id,
            });
        }
        ctx.stop();
    }
}

mod inspect;
pub(crate) mod mapped;
pub(crate) mod probe;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tombstone_tests;
