//! Panic containment for handlers. actix restarts a supervised actor only
//! after `ctx.stop()`; a panic that unwinds out of a handler kills the actor
//! for good, and with it every retry it owned. [`Contain::contained`] runs a
//! handler body under `catch_unwind`: a panic is counted, logged, and turned
//! into `ctx.stop()`, so the supervisor restarts the actor with its struct
//! intact and `started()` resyncs it (re-watch, re-attach, re-arm). Futures
//! of user code (fetchers, registries) are contained where they are polled.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use actix::prelude::*;
use steadfast_core::panic_message;

use crate::stats::EngineStats;

/// Makes the receiving actor's handler panic (drills and tests of the
/// containment itself).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DrillPanic;

/// An actor whose handlers run contained.
pub(crate) trait Contain: Actor<Context = Context<Self>> + Sized {
    /// Name for logs.
    const NAME: &'static str;

    /// The engine counters (for `handler_panics`).
    fn engine_stats(&self) -> &Arc<EngineStats>;

    /// Runs `f`; a panic stops the actor for a supervised restart and gives
    /// `None`.
    fn contained<R>(
        &mut self,
        ctx: &mut Context<Self>,
        f: impl FnOnce(&mut Self, &mut Context<Self>) -> R,
    ) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(|| f(self, ctx))) {
            Ok(r) => Some(r),
            Err(payload) => {
                EngineStats::bump(&self.engine_stats().handler_panics);
                tracing::error!(
                    actor = Self::NAME,
                    panic = %panic_message(&*payload),
                    "handler panicked; restarting the actor under its supervisor"
                );
                ctx.stop();
                None
            }
        }
    }
}

/// The drill: panics inside a contained handler.
pub(crate) fn drill<A: Contain>(act: &mut A, ctx: &mut Context<A>) {
    act.contained(ctx, |_, _| -> () {
        panic!("drill: {} handler panic", A::NAME);
    });
}

/// Makes an actor with a `stats: Arc<EngineStats>` field [`Contain`]ed under
/// `name`, and lets it take [`DrillPanic`].
macro_rules! contained_actor {
    ($actor:ty, $name:literal) => {
        impl $crate::contain::Contain for $actor {
            const NAME: &'static str = $name;
            fn engine_stats(&self) -> &::std::sync::Arc<$crate::stats::EngineStats> {
                &self.stats
            }
        }

        impl ::actix::Handler<$crate::contain::DrillPanic> for $actor {
            type Result = ();
            fn handle(&mut self, _: $crate::contain::DrillPanic, ctx: &mut Self::Context) {
                $crate::contain::drill(self, ctx);
            }
        }
    };
}
pub(crate) use contained_actor;
