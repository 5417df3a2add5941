//! The registry actor answers what the watch of a subscribed app holds now
//! ([`LiveInstances`]), so a one-shot query of that app needs no registry
//! call.

use actix::prelude::*;
use steadfast_core::LiveState;

use crate::registry_actor::RegistryActor;

/// Lookup -> registry actor: the live state of `app`'s watch; `None` when
/// the app is not subscribed, its watch has no first state yet, or the
/// actor is shut down.
#[derive(Message)]
#[rtype(result = "Option<LiveState>")]
pub(crate) struct LiveInstances {
    /// Provider app.
    pub app: String,
}

impl Handler<LiveInstances> for RegistryActor {
    type Result = Option<LiveState>;
    fn handle(&mut self, msg: LiveInstances, _: &mut Self::Context) -> Self::Result {
        if self.terminated {
            return None;
        }
        self.machine.live_state(&msg.app)
    }
}
