//! The directory actor of one reference: a thin shell around
//! [`DirectoryMachine`]. It attaches to the resolvers of the reference's
//! provider apps, applies their full updates, and answers queries.

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::{Applied, DirectoryMachine, DirectoryStatus, Reference, ServiceUrl};

use crate::contain::Contain;
use crate::graveyard::{Buries, Graveyard};
use crate::messages::{ApplyUpdate, Attach, Detach, ForceRestart, Shutdown};
use crate::resolver_actor::ResolverActor;
use crate::stats::{EngineStats, Live, LiveGuard};

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

/// Query: the whole view (`None` once the directory is closed).
#[derive(Message)]
#[rtype(result = "Option<DirectoryView>")]
pub struct GetView;

/// Query: pick one endpoint, weighted at random (outer `None` once the
/// directory is closed).
#[derive(Message)]
#[rtype(result = "Option<Option<ServiceUrl>>")]
pub struct SelectEndpoint;

/// The endpoints of one reference.
pub struct DirectoryActor {
    id: u64,
    machine: DirectoryMachine,
    resolvers: Vec<WeakAddr<ResolverActor>>,
    graveyard: Graveyard,
    terminated: bool,
    stats: Arc<EngineStats>,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

impl DirectoryActor {
    /// A directory for `reference`, fed by `resolvers` (one per provider app).
    pub fn new(
        id: u64,
        reference: &Reference,
        resolvers: Vec<WeakAddr<ResolverActor>>,
        seed: u64,
        stats: Arc<EngineStats>,
    ) -> Self {
        Self {
            id,
            machine: DirectoryMachine::new(reference.subscribe_key(), &reference.apps, seed),
            resolvers,
            graveyard: Graveyard::default(),
            terminated: false,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Directory),
            stats,
        }
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
        // On first start and after a restart alike: (re)attach, and each
        // resolver answers with the current update for our key.
        self.attach(ctx);
    }
}

impl DirectoryActor {
    /// Attaches to every resolver of the reference (idempotent: a known
    /// directory gets the full list again).
    fn attach(&self, ctx: &mut Context<Self>) {
        for r in self.resolvers.iter().filter_map(WeakAddr::upgrade) {
            r.do_send(Attach {
                key: self.machine.subscribe_key().to_string(),
                directory: self.id,
                recipient: ctx.address().downgrade().recipient(),
            });
        }
    }
}

impl Buries for DirectoryActor {
    fn graveyard(&mut self) -> &mut Graveyard {
        &mut self.graveyard
    }
}

impl Supervised for DirectoryActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        self.graveyard.reset();
    }
}

crate::contain::contained_actor!(DirectoryActor, "directory");

impl Handler<ApplyUpdate> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, msg: ApplyUpdate, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            act.containment.drill_point();
            if !act.terminated && act.machine.apply_update(msg.0) == Applied::NeedFull {
                // A patch on top of an update this directory missed: ask
                // for everything again (the resolvers answer a known
                // directory's re-attach with their full list).
                act.attach(ctx);
            }
        });
    }
}

impl Handler<GetView> for DirectoryActor {
    type Result = MessageResult<GetView>;
    fn handle(&mut self, _: GetView, ctx: &mut Self::Context) -> Self::Result {
        // A query racing an unsubscribe must not be answered from a closed
        // directory's stale state.
        let view = self.contained(ctx, |act, _| {
            (!act.terminated).then(|| DirectoryView {
                version: act.machine.version(),
                status: act.machine.status(),
                endpoints: act.machine.list(),
            })
        });
        MessageResult(view.flatten())
    }
}

impl Handler<SelectEndpoint> for DirectoryActor {
    type Result = Option<Option<ServiceUrl>>;
    fn handle(&mut self, _: SelectEndpoint, ctx: &mut Self::Context) -> Self::Result {
        self.contained(ctx, |act, _| {
            (!act.terminated).then(|| act.machine.select())
        })
        .flatten()
    }
}

impl Handler<Shutdown> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.terminated = true;
        for r in self.resolvers.iter().filter_map(WeakAddr::upgrade) {
            r.do_send(Detach {
                key: self.machine.subscribe_key().to_string(),
                directory: self.id,
            });
        }
        ctx.stop();
    }
}

impl Handler<ForceRestart> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, _: ForceRestart, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
