//! Deferred frees. Replacing a 100k-instance snapshot or URL list frees
//! hundreds of thousands of allocations; doing that inside the handler that
//! publishes an update would delay the update. Actors park what they
//! replaced here and free it a moment later, off the update path.

use std::any::Any;
use std::time::Duration;

use actix::prelude::*;

/// How long retired data waits before it is freed.
const REAP_DELAY: Duration = Duration::from_millis(20);

/// Retired values waiting to be dropped.
#[derive(Default)]
pub(crate) struct Graveyard {
    items: Vec<Box<dyn Any>>,
    armed: bool,
}

/// An actor that owns a [`Graveyard`].
pub(crate) trait Buries: Actor<Context = Context<Self>> {
    fn graveyard(&mut self) -> &mut Graveyard;
}

impl Graveyard {
    /// Parks `item` until the next reap (see [`Graveyard::arm`]).
    pub(crate) fn bury(&mut self, item: impl Any) {
        self.items.push(Box::new(item));
    }

    /// Schedules a reap of what is parked, unless one is scheduled. Call it
    /// once the update that replaced the items is on its way, so the reap
    /// cannot come due before then.
    pub(crate) fn arm<A: Buries>(actor: &mut A, ctx: &mut Context<A>) {
        let g = actor.graveyard();
        if g.items.is_empty() || g.armed {
            return;
        }
        g.armed = true;
        ctx.run_later(REAP_DELAY, |act: &mut A, _| {
            let g = act.graveyard();
            g.armed = false;
            g.items.clear();
        });
    }
}
