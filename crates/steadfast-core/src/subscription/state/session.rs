//! A registry session loss, for one app: the watch is dropped and re-opened
//! (its first item is a full re-read, a Reset, so changes missed while the
//! session was gone are applied) at a random point of the spread window.

use std::time::{Duration, Instant};

use rand::Rng;

use super::{AppSub, Watch};
use crate::subscription::{Ctx, TimerKind};

impl AppSub {
    /// The session was lost: stale now, re-opened after `delay`.
    pub(in crate::subscription) fn session_lost(
        &mut self,
        delay: Duration,
        now: Instant,
        ctx: &mut Ctx<'_>,
    ) {
        self.cancel_watch(ctx);
        self.mark_stale(now, ctx);
        self.watch = Watch::Respread(ctx.arm(delay, TimerKind::Reopen));
    }
}

/// A uniform random delay within `spread`.
pub(in crate::subscription) fn spread_delay(spread: Duration, rng: &mut impl Rng) -> Duration {
    let max = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX);
    if max == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.gen_range(0..=max))
}
