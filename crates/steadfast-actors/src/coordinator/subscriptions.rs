//! Subscriptions of the coordinator and their lifetimes, performed as the
//! [`Lifetimes`](steadfast_core::Lifetimes) machine decides: `subscribe`
//! (one shared [`HandleHold`] for every live handle of a reference),
//! `unsubscribe` (the last one stops the directory at once), and the linger
//! after the last handle of a reference dropped (one timer, at the
//! machine's next deadline).

use std::sync::{Arc, Weak};

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::{Reference, Released, SubscribeOutcome};

use super::{panicked, refused, Coordinator, Subscribe, Unsubscribe};
use crate::contain::Contain;
use crate::directory_actor::{DirectoryActor, DirectoryShared};
use crate::error::EngineError;
use crate::handle::{Directory, EngineLife, HandleHold};
use crate::messages::Shutdown;
use crate::stats::EngineStats;
use crate::timer;

/// The last handle of `reference` (its hold number `id`) was dropped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HandlesDropped {
    pub reference: Reference,
    pub id: u64,
}

/// One subscribed reference.
pub(super) struct Subscribed {
    /// Its directory actor.
    pub(super) addr: Addr<DirectoryActor>,
    /// The coordinator's own copy of the handle (holds nothing).
    pub(super) handle: Directory,
    /// The hold every live handle shares, and its number.
    pub(super) hold: (Weak<HandleHold>, u64),
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
        me: WeakAddr<Coordinator>,
        ctx: &mut Context<Self>,
    ) -> Result<Directory, EngineError> {
        self.containment.drill_point();
        // Upgraded first, so the hold cannot go between the question and
        // the handle.
        let live = self
            .directories
            .get(&reference)
            .and_then(|d| d.hold.0.upgrade());
        let outcome = self
            .lifetimes
            .subscribe(&reference, live.is_some())
            .map_err(refused)?;
        match outcome {
            SubscribeOutcome::Again { new_hold } => {
                // A linger it had is over.
                self.arm_linger(ctx);
                let d = self
                    .directories
                    .get_mut(&reference)
                    .ok_or(EngineError::ShutDown)?;
                let hold = match (live, new_hold) {
                    (Some(hold), None) => hold,
                    (_, n) => {
                        let n = n.unwrap_or(d.hold.1);
                        let hold = Arc::new(HandleHold::new(life, reference, n));
                        d.hold = (Arc::downgrade(&hold), n);
                        hold
                    }
                };
                Ok(d.handle.with_hold(hold))
            }
            SubscribeOutcome::New {
                start_resolvers,
                follow,
                hold,
            } => {
                let started = self.start_subscription(&reference, &start_resolvers, life, hold);
                match started {
                    Ok(handle) => {
                        if let Some(interface) = follow {
                            self.follow_interface(&interface, me);
                        }
                        // No apps named: the directory follows the
                        // interface's mapping.
                        if reference.apps.is_empty() {
                            self.attach_follower(&reference);
                        }
                        Ok(handle)
                    }
                    Err(e) => {
                        // Undone as the machine says.
                        if let Ok(Some(released)) = self.lifetimes.unsubscribe(&reference) {
                            self.perform_release(released, ctx);
                        }
                        Err(e)
                    }
                }
            }
        }
    }

    /// Starts the resolvers [`Lifetimes`](steadfast_core::Lifetimes) asked
    /// for and the reference's directory, whose handles share hold `hold`.
    fn start_subscription(
        &mut self,
        reference: &Reference,
        start_resolvers: &[String],
        life: Arc<EngineLife>,
        hold: u64,
    ) -> Result<Directory, EngineError> {
        for app in start_resolvers {
            self.start_resolver(app)?;
        }
        let resolvers = reference
            .apps
            .iter()
            .map(|app| self.resolver_of(app))
            .collect::<Result<Vec<_>, _>>()?;
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
        let held = Arc::new(HandleHold::new(life, reference.clone(), hold));
        let returned = handle.with_hold(held.clone());
        self.directories.insert(
            reference.clone(),
            Subscribed {
                addr,
                handle,
                hold: (Arc::downgrade(&held), hold),
            },
        );
        Ok(returned)
    }
}

impl Handler<Unsubscribe> for Coordinator {
    type Result = Result<bool, EngineError>;
    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Self::Context) -> Self::Result {
        panicked(self.contained(ctx, |act, ctx| {
            let released = act.lifetimes.unsubscribe(&msg.0).map_err(refused)?;
            let last = released.is_some();
            if let Some(released) = released {
                act.perform_release(released, ctx);
            }
            Ok(last)
        }))
    }
}

impl Coordinator {
    /// Ends a subscription as the machine released it: closes its handles,
    /// stops its directory, then the resolvers and the mapping follower no
    /// one needs any more.
    pub(super) fn perform_release(&mut self, released: Released, ctx: &mut Context<Self>) {
        if let Some(d) = self.directories.remove(&released.reference) {
            d.handle.close();
            d.addr.do_send(Shutdown);
        }
        for app in &released.stop_resolvers {
            self.stop_resolver(app);
        }
        if let Some(interface) = released.unfollow {
            self.unfollow_interface(&interface);
        }
        self.arm_linger(ctx);
    }
}

impl Handler<HandlesDropped> for Coordinator {
    type Result = ();
    fn handle(&mut self, msg: HandlesDropped, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let linger = act.live.load().unsubscribe_linger;
            act.lifetimes
                .handles_dropped(&msg.reference, msg.id, timer::now(), linger);
            act.arm_linger(ctx);
        });
    }
}

impl Coordinator {
    /// Keeps the one linger timer at the machine's next deadline: when it
    /// fires, every reference whose linger ran out is released.
    pub(super) fn arm_linger(&mut self, ctx: &mut Context<Self>) {
        let want = self.lifetimes.poll_timeout();
        if self.linger.as_ref().map(|(at, _)| *at) == want {
            return;
        }
        if let Some((_, h)) = self.linger.take() {
            ctx.cancel_future(h);
        }
        let Some(at) = want else {
            return;
        };
        let delay = at.saturating_duration_since(timer::now());
        let h = timer::arm(ctx, &self.stats, delay, |act: &mut Self, ctx| {
            act.linger = None;
            for released in act.lifetimes.handle_timeout(timer::now()) {
                EngineStats::bump(&act.stats.linger_unsubscribes);
                act.perform_release(released, ctx);
            }
            act.arm_linger(ctx);
        });
        self.linger = Some((at, h));
    }

    /// After a supervised restart (which drops every timer of the old
    /// context): every reference with no handle left is reported to the
    /// machine again (a report lost to the panic is made up for; a linger
    /// under way keeps its deadline), and the timer is armed anew.
    pub(super) fn rearm_lingers(&mut self, ctx: &mut Context<Self>) {
        self.linger = None;
        let (now, linger) = (timer::now(), self.live.load().unsubscribe_linger);
        for (reference, d) in &self.directories {
            if d.hold.0.strong_count() == 0 {
                self.lifetimes
                    .handles_dropped(reference, d.hold.1, now, linger);
            }
        }
        self.arm_linger(ctx);
    }
}
