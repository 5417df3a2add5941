//! Session loss and subscribe failure, for one app.
//!
//! On a registry session loss the watch is dropped and re-opened (its first
//! item is a full re-read, a Reset, so changes missed while the session was
//! gone are applied) at a random point of the spread window.
//!
//! A failing watch (the #3624 case) is tracked (since, attempts, last
//! error) and told to subscribers until the first `Ok` item.

use std::time::{Duration, Instant};

use super::{AppSub, Watch};
use crate::error::RegistryError;
use crate::pending::RegistryFailure;
use crate::subscription::{Ctx, SubscriptionAction, TimerKind, To};

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

impl AppSub {
    /// Opening (or keeping) the watch failed with `err`, after the recover
    /// schedule counted it: track it and tell every subscriber.
    pub(super) fn record_failure(&mut self, err: &RegistryError, now: Instant, ctx: &mut Ctx<'_>) {
        // One failure until the watch answers: its start and its attempts
        // go on across a backoff started over (a replacement machine).
        let (since, attempts) = match &self.failing {
            Some(f) => (f.since, f.attempts.saturating_add(1)),
            None => (
                self.recover.down_since().unwrap_or(now),
                self.recover.failures(),
            ),
        };
        self.failing = Some(RegistryFailure {
            since,
            attempts,
            last_error: err.clone(),
        });
        self.tell_failure(To::All, ctx);
    }

    /// The watch answered: the failure is over (told once).
    pub(super) fn clear_failure(&mut self, ctx: &mut Ctx<'_>) {
        if self.failing.take().is_some() {
            let app = ctx.app.to_string();
            ctx.push(SubscriptionAction::SubscribeFailing {
                app,
                to: To::All,
                failure: None,
            });
        }
    }

    /// Tells `to` the current failure, if any.
    pub(super) fn tell_failure(&self, to: To, ctx: &mut Ctx<'_>) {
        if let Some(failure) = &self.failing {
            let (app, failure) = (ctx.app.to_string(), Some(failure.clone()));
            ctx.push(SubscriptionAction::SubscribeFailing { app, to, failure });
        }
    }
}
