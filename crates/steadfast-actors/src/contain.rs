//! Panic containment for handlers. actix restarts a supervised actor only
//! after `ctx.stop()`; a panic that unwinds out of a handler kills the actor
//! for good, and with it every retry it owned. [`Contain::contained`] runs a
//! handler body under `catch_unwind`: a panic is counted, logged, and turned
//! into a supervised restart. Every actor's `restarting` but the
//! coordinator's then re-creates it from its inputs (restart clean: the
//! registry actor, the resolvers, the cache, the directories, the lookup
//! actor, the mapping followers, the registrar and the exports); the
//! coordinator keeps its struct (its decisions are in `Lifetimes`) and
//! `started()` re-arms it. Futures of user code (fetchers, registries,
//! publishers) are contained where they are called
//! (`steadfast_core::contain`).
//!
//! A panic that comes back with the same input after every restart must not
//! spin: [`Containment`] keeps the actor's panic schedule on the one retry
//! primitive. The first panic in a while restarts at once; each further one
//! within [`PANIC_QUIET`] quarantines the actor (its mailbox waits) for the
//! next backoff step (100 ms doubling to 30 s) before the restart.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::{BoxFuture, FutureExt};
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{
    contain_registry_call, panic_message, BackoffPolicy, ErrorClass, Recover, RecoverPolicy,
    RegistryError, Retry,
};

use crate::stats::EngineStats;
use crate::timer;

/// Arms a drill: the receiving actor's next real handler panics at its
/// drill point (tests and drills of the containment itself).
#[cfg(any(test, feature = "testkit"))]
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DrillPanic;

/// A panic this long after the previous one starts the schedule over.
pub(crate) const PANIC_QUIET: Duration = Duration::from_secs(60);

/// Quarantine schedule of repeated panics (no jitter: one actor, no fleet).
const PANIC_BACKOFF: BackoffPolicy = BackoffPolicy {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(30),
    multiplier: 2.0,
    jitter: 0.0,
};

/// The panic schedule and drill state of one actor.
#[derive(Debug, Default)]
pub(crate) struct Containment {
    panics: Recover,
    last: Option<Instant>,
    #[cfg(any(test, feature = "testkit"))]
    armed: bool,
}

impl Containment {
    /// Records a panic at `now`; returns how long to quarantine the actor
    /// before its restart (zero for the first panic in a while).
    pub(crate) fn on_panic(&mut self, now: Instant) -> Duration {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) > PANIC_QUIET)
        {
            self.panics.on_success();
        }
        self.last = Some(now);
        let first = self.panics.failures() == 0;
        let policy = RecoverPolicy::new(PANIC_BACKOFF);
        // No jitter in the policy: the generator is never drawn from.
        let mut rng = StdRng::seed_from_u64(0);
        match self
            .panics
            .on_failure(&policy, ErrorClass::Transient, now, &mut rng)
        {
            Retry::After(_) if first => Duration::ZERO,
            Retry::After(delay) => delay,
            Retry::GiveUp => PANIC_BACKOFF.max,
        }
    }

    /// Arms the drill: the next [`Containment::drill_point`] panics.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn arm_drill(&mut self) {
        self.armed = true;
    }

    /// A point in a real handler path where an armed drill panics (once);
    /// nothing without the `testkit` feature.
    #[inline]
    pub(crate) fn drill_point(&mut self) {
        #[cfg(any(test, feature = "testkit"))]
        if std::mem::take(&mut self.armed) {
            panic!("drill: handler panic");
        }
    }
}

/// An actor whose handlers run contained.
pub(crate) trait Contain: Actor<Context = Context<Self>> + Sized {
    /// Name for logs.
    const NAME: &'static str;

    /// The engine counters (for `handler_panics`).
    fn engine_stats(&self) -> &Arc<EngineStats>;

    /// The actor's panic schedule and drill state.
    fn containment(&mut self) -> &mut Containment;

    /// Runs `f`; a panic restarts the actor under its supervisor (at once,
    /// or after a quarantine when it keeps panicking) and gives `None`.
    fn contained<R>(
        &mut self,
        ctx: &mut Context<Self>,
        f: impl FnOnce(&mut Self, &mut Context<Self>) -> R,
    ) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(|| f(self, ctx))) {
            Ok(r) => Some(r),
            Err(payload) => {
                EngineStats::bump(&self.engine_stats().handler_panics);
                let quarantine = self.containment().on_panic(timer::now());
                tracing::error!(
                    actor = Self::NAME,
                    panic = %panic_message(&*payload),
                    ?quarantine,
                    "handler panicked; restarting the actor under its supervisor"
                );
                if quarantine.is_zero() {
                    ctx.stop();
                } else {
                    // The mailbox waits out the quarantine, then restarts.
                    ctx.wait(
                        actix::fut::wrap_future::<_, Self>(tokio::time::sleep(quarantine))
                            .map(|_, _, ctx: &mut Context<Self>| ctx.stop()),
                    );
                }
                None
            }
        }
    }
}

/// A registry call (user code) with its panics contained
/// (`steadfast_core::contain_registry_call`), bounded by `limit`; running
/// out is [`RegistryError::Timeout`].
pub(crate) fn registry_call<T: Send + 'static>(
    limit: Duration,
    call: impl FnOnce() -> BoxFuture<'static, Result<T, RegistryError>>,
) -> BoxFuture<'static, Result<T, RegistryError>> {
    let fut = contain_registry_call(call);
    async move {
        tokio::time::timeout(limit, fut)
            .await
            .unwrap_or(Err(RegistryError::Timeout))
    }
    .boxed()
}

/// Makes an actor with `stats: Arc<EngineStats>` and `containment:
/// Containment` fields [`Contain`]ed under `name`, and lets it take
/// [`DrillPanic`] and `ForceRestart` (a crash-restart under its supervisor).
macro_rules! contained_actor {
    ($actor:ty, $name:literal) => {
        impl $crate::contain::Contain for $actor {
            const NAME: &'static str = $name;
            fn engine_stats(&self) -> &::std::sync::Arc<$crate::stats::EngineStats> {
                &self.stats
            }
            fn containment(&mut self) -> &mut $crate::contain::Containment {
                &mut self.containment
            }
        }

        #[cfg(any(test, feature = "testkit"))]
        impl ::actix::Handler<$crate::contain::DrillPanic> for $actor {
            type Result = ();
            fn handle(&mut self, _: $crate::contain::DrillPanic, _: &mut Self::Context) {
                self.containment.arm_drill();
            }
        }

        /// A forced crash-restart (tests, drills): stop, and the supervisor
        /// restarts the actor.
        #[cfg(any(test, feature = "testkit"))]
        impl ::actix::Handler<$crate::coordinator::ForceRestart> for $actor {
            type Result = ();
            fn handle(&mut self, _: $crate::coordinator::ForceRestart, ctx: &mut Self::Context) {
                ::actix::ActorContext::stop(ctx);
            }
        }
    };
}
pub(crate) use contained_actor;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_panics_are_quarantined_on_a_growing_schedule_then_forgiven() {
        let t0 = Instant::now();
        let mut c = Containment::default();
        let ms = Duration::from_millis;
        assert_eq!(c.on_panic(t0), Duration::ZERO, "the first restarts at once");
        assert_eq!(c.on_panic(t0 + ms(10)), ms(200));
        assert_eq!(c.on_panic(t0 + ms(300)), ms(400));
        for _ in 0..20 {
            assert!(c.on_panic(t0 + ms(400)) <= Duration::from_secs(30));
        }
        assert_eq!(c.on_panic(t0 + ms(400)), Duration::from_secs(30), "capped");
        let later = t0 + ms(400) + PANIC_QUIET + ms(1);
        assert_eq!(
            c.on_panic(later),
            Duration::ZERO,
            "forgiven after a quiet minute"
        );
    }

    #[test]
    fn an_armed_drill_panics_once() {
        let mut c = Containment::default();
        c.drill_point();
        c.arm_drill();
        assert!(catch_unwind(AssertUnwindSafe(|| c.drill_point())).is_err());
        c.drill_point();
    }
}
