//! A directory whose reference names no app follows its interface's
//! mapping: the coordinator adds an app (with its resolver, whose reference
//! it counts) when the mapping lists it, removes it when the mapping stops
//! listing it, and says what the mapping reads while no app is known.

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::Pending;

use super::DirectoryActor;
use crate::contain::Contain;
use crate::messages::Detach;
use crate::resolver_actor::ResolverActor;

/// Serve `app` too, fed by `resolver`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AddApp {
    pub app: String,
    pub resolver: WeakAddr<ResolverActor>,
}

/// Stop serving `app` (its endpoints leave the directory).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RemoveApp(pub String);

/// What the mapping says while no app is known.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct MappingPending(pub Option<Pending>);

impl Handler<AddApp> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, msg: AddApp, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated || act.apps.contains(&msg.app) {
                return;
            }
            if let Some(old) = act.machine.add_app(&msg.app) {
                drop(old);
                act.publish();
            }
            act.apps.push(msg.app);
            act.resolvers.push(msg.resolver);
            act.inboxes.push(Default::default());
            act.attach(act.resolvers.len() - 1, ctx);
        });
    }
}

impl Handler<RemoveApp> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, msg: RemoveApp, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let Some(i) = act.apps.iter().position(|a| *a == msg.0) else {
                return;
            };
            act.apps.remove(i);
            act.inboxes.remove(i);
            let resolver = act.resolvers.remove(i);
            if let Some(r) = resolver.upgrade() {
                r.do_send(Detach {
                    key: act.machine.subscribe_key().to_string(),
                    directory: act.id,
                });
            }
            if act.terminated {
                return;
            }
            if let Some(old) = act.machine.remove_app(&msg.0) {
                // Freed after the publish, which it never delays.
                act.publish();
                drop(old);
            }
            act.after_change(ctx);
        });
    }
}

impl Handler<MappingPending> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, msg: MappingPending, ctx: &mut Self::Context) {
        self.contained(ctx, |act, _ctx| {
            if act.terminated {
                return;
            }
            if act.machine.set_mapping_pending(msg.0).is_some() {
                act.publish();
            }
        });
    }
}
