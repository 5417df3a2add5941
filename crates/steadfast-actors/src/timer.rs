//! Timers whose liveness is counted: the count drops when the timer fires,
//! is cancelled, or its actor stops.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::contain::Contain;
use crate::stats::{EngineStats, Live, LiveGuard};

/// Arms `f` to run after `delay` in `ctx`, counted in `timers_pending`;
/// `f` runs contained (a panic restarts the actor, see [`Contain`]).
pub(crate) fn arm<A, F>(
    ctx: &mut Context<A>,
    stats: &Arc<EngineStats>,
    delay: Duration,
    f: F,
) -> SpawnHandle
where
    A: Contain,
    F: FnOnce(&mut A, &mut Context<A>) + 'static,
{
    let guard = LiveGuard::new(stats, Live::Timer);
    let stats = stats.clone();
    ctx.run_later(delay, move |act, ctx| {
        drop(guard);
        EngineStats::bump(&stats.timers_fired);
        act.contained(ctx, f);
    })
}

/// The current time as the state machines take it (virtual under a paused
/// tokio clock).
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
