//! Subscriptions of the coordinator and their lifetimes: `subscribe`
//! (reference-counted, one shared [`HandleHold`] for every live handle of a
//! reference), `unsubscribe` (the last one stops the directory at once), and
//! the linger after the last handle of a reference dropped (unsubscribes it
//! unless a handle of it exists again by then).

use std::sync::{Arc, Weak};

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::Reference;

use super::{panicked, Coordinator, Counted, Subscribe, Unsubscribe};
use crate::contain::Contain;
use crate::directory_actor::{DirectoryActor, DirectoryShared};
use crate::error::EngineError;
use crate::handle::{Directory, EngineLife, HandleHold};
use crate::messages::Shutdown;
use crate::stats::EngineStats;

/// The last handle of `reference` (its hold number `id`) was dropped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HandlesDropped {
    pub reference: Reference,
    pub id: u64,
}

/// One subscribed reference.
pub(super) struct Subscribed {
    /// The actor and the count of `subscribe` calls not yet unsubscribed.
    pub(super) counted: Counted<DirectoryActor>,
    /// The coordinator's own copy of the handle (holds nothing).
    pub(super) handle: Directory,
    /// The hold every live handle shares, and its number.
    pub(super) hold: (Weak<HandleHold>, u64),
    /// The linger timer armed when the last handle dropped.
    pub(super) linger: Option<SpawnHandle>,
}

impl Handler<Subscribe> for Coordinator {
    type Result = Result<Directory, EngineError>;
    fn handle(&mut self, msg: Subscribe, ctx: &mut Self::Context) -> Self::Result {
        let me = ctx.address().downgrade();
        panicked(self.contained(ctx, |act, ctx| act.subscribe(msg.0, msg.1, me, ctx)))
    }
}

impl Coordinator {
    fn subscribe(
        &mut self,
        reference: Reference,
        life: Arc<EngineLife>,
        me_weak: WeakAddr<Coordinator>,
        ctx: &mut Context<Self>,
    ) -> Result<Directory, EngineError> {
        self.containment.drill_point();
        if self.shut_down {
            return Err(EngineError::ShutDown);
        }
        // No app and no interface: there is no mapping to follow either.
        if reference.apps.is_empty() && reference.interface.is_empty() {
            return Err(EngineError::NoProviderApps(reference.subscribe_key()));
        }
        if self.directories.contains_key(&reference) {
            let next = self.id();
            let d = self.directories.get_mut(&reference).expect("present above");
            d.counted.refs += 1;
            // Subscribed again within the linger: the directory stays.
            if let Some(t) = d.linger.take() {
                ctx.cancel_future(t);
            }
            let hold = match d.hold.0.upgrade() {
                Some(hold) => hold,
                None => {
                    let hold = Arc::new(HandleHold::new(life, reference, next));
                    d.hold = (Arc::downgrade(&hold), next);
                    hold
                }
            };
            return Ok(d.handle.with_hold(hold));
        }
        let mut resolvers = Vec::with_capacity(reference.apps.len());
        for app in &reference.apps {
            resolvers.push(self.resolver_for(app)?);
        }
        let id = self.id();
        let seed = self.seed(id);
        let stats = self.stats.clone();
        let r = reference.clone();
        let shared = Arc::new(DirectoryShared::new(self.live.clone()));
        let published = shared.clone();
        let addr = Supervisor::start(move |_| {
            DirectoryActor::new(id, &r, resolvers, published, seed, stats)
        });
        let handle = Directory::new(reference.clone(), addr.downgrade(), shared);
        let hold_id = self.id();
        let hold = Arc::new(HandleHold::new(life, reference.clone(), hold_id));
        let returned = handle.with_hold(hold.clone());
        let mapped = reference.apps.is_empty().then(|| reference.clone());
        self.directories.insert(
            reference,
            Subscribed {
                counted: Counted { addr, refs: 1 },
                handle,
                hold: (Arc::downgrade(&hold), hold_id),
                linger: None,
            },
        );
        // No apps named: the directory follows the interface's mapping.
        if let Some(reference) = mapped {
            self.follow_mapping(&reference, me_weak)?;
        }
        Ok(returned)
    }
}

impl Handler<Unsubscribe> for Coordinator {
    type Result = Result<bool, EngineError>;
    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Self::Context) -> Self::Result {
        panicked(self.contained(ctx, |act, ctx| act.unsubscribe(msg, ctx)))
    }
}

impl Coordinator {
    fn unsubscribe(
        &mut self,
        msg: Unsubscribe,
        ctx: &mut Context<Self>,
    ) -> Result<bool, EngineError> {
        if self.shut_down {
            return Err(EngineError::ShutDown);
        }
        let Some(d) = self.directories.get_mut(&msg.0) else {
            return Err(EngineError::NotSubscribed(msg.0.subscribe_key()));
        };
        d.counted.refs = d.counted.refs.saturating_sub(1);
        if d.counted.refs > 0 {
            return Ok(false);
        }
        self.remove_directory(&msg.0, ctx);
        Ok(true)
    }

    /// Ends every subscription of `reference`: closes its handles, stops
    /// its directory and releases its resolvers.
    fn remove_directory(&mut self, reference: &Reference, ctx: &mut Context<Self>) {
        let Some(d) = self.directories.remove(reference) else {
            return;
        };
        if let Some(t) = d.linger {
            ctx.cancel_future(t);
        }
        d.handle.close();
        d.counted.addr.do_send(Shutdown);
        for app in &reference.apps {
            self.release_resolver(app);
        }
        if reference.apps.is_empty() {
            self.unfollow_mapping(reference);
        }
    }
}

impl Handler<HandlesDropped> for Coordinator {
    type Result = ();
    fn handle(&mut self, msg: HandlesDropped, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| act.handles_dropped(msg, ctx));
    }
}

impl Coordinator {
    /// The last handle of a reference dropped: arm its linger, unless a
    /// newer hold took over, or the linger is off.
    fn handles_dropped(&mut self, msg: HandlesDropped, ctx: &mut Context<Self>) {
        if self.shut_down {
            return;
        }
        let Some(linger) = self.live.load().unsubscribe_linger else {
            return;
        };
        let Some(d) = self.directories.get_mut(&msg.reference) else {
            return;
        };
        if d.hold.1 != msg.id || d.hold.0.strong_count() > 0 {
            return;
        }
        self.arm_linger(msg.reference, msg.id, linger, ctx);
    }

    /// Arms the linger of `reference`, whose hold number `id` is gone: once
    /// it passes with still no handle of it, the reference is unsubscribed.
    fn arm_linger(
        &mut self,
        reference: Reference,
        id: u64,
        linger: std::time::Duration,
        ctx: &mut Context<Self>,
    ) {
        let key = reference.clone();
        let timer = crate::timer::arm(ctx, &self.stats, linger, move |act: &mut Self, ctx| {
            let Some(d) = act.directories.get_mut(&reference) else {
                return;
            };
            d.linger = None;
            // Still no handle of this reference since it lingered.
            if d.hold.1 == id && d.hold.0.strong_count() == 0 {
                EngineStats::bump(&act.stats.linger_unsubscribes);
                act.remove_directory(&reference, ctx);
            }
        });
        if let Some(d) = self.directories.get_mut(&key) {
            if let Some(old) = d.linger.replace(timer) {
                ctx.cancel_future(old);
            }
        }
    }

    /// After a supervised restart (which drops every timer of the old
    /// context): lingers start again for references with no handle, so none
    /// is forgotten (a restart can only make a linger longer).
    pub(super) fn rearm_lingers(&mut self, ctx: &mut Context<Self>) {
        let Some(linger) = self.live.load().unsubscribe_linger else {
            return;
        };
        let orphans: Vec<(Reference, u64)> = self
            .directories
            .iter_mut()
            .filter(|(_, d)| d.hold.0.strong_count() == 0)
            .map(|(r, d)| {
                d.linger = None;
                (r.clone(), d.hold.1)
            })
            .collect();
        for (reference, id) in orphans {
            self.arm_linger(reference, id, linger, ctx);
        }
    }
}
