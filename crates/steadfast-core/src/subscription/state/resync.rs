//! The full re-read of one app: periodic (jittered), owed on resume after
//! an outage (unless the backend re-reads by itself) and after a delta that
//! did not follow (a lost notification), dropped when the watch goes stale
//! meanwhile and then retried on the recover schedule, and applied only
//! where it differs from the pushed state and is not older than it.

use std::time::Instant;

use super::{AppSub, Resync, Watch};
use crate::error::{ErrorClass, RegistryError};
use crate::event::{Listing, RegistryEvent};
use crate::recover::{Recover, Retry};
use crate::resolver::Token;
use crate::subscription::{Ctx, SubscriptionAction, TimerKind};

impl AppSub {
    pub(super) fn can_resync(&self) -> bool {
        self.stale_since.is_none()
            && self.real.version().is_some()
            && matches!(self.watch, Watch::Open(_))
    }

    pub(super) fn start_resync(&mut self, resume: bool, ctx: &mut Ctx<'_>) {
        if let Resync::Armed { token, .. } = self.resync {
            ctx.cancel(Some(token));
        }
        let token = ctx.token();
        self.resync = Resync::InFlight {
            token,
            valid: true,
            resume,
        };
        let (app, deadline) = (ctx.app.to_string(), ctx.config.call_timeout);
        ctx.push(SubscriptionAction::List {
            app,
            token,
            deadline,
        });
    }

    pub(super) fn resume_resync(&mut self, ctx: &mut Ctx<'_>) {
        match &mut self.resync {
            // In flight: its listing answers; if dropped, retried soon.
            Resync::InFlight { resume, .. } => *resume = true,
            Resync::Idle | Resync::Armed { .. } => self.start_resync(true, ctx),
        }
    }

    pub(super) fn ensure_periodic(&mut self, ctx: &mut Ctx<'_>) {
        if self.resync == Resync::Idle {
            if let Some(delay) = ctx.reconcile_delay() {
                let token = ctx.arm(delay, TimerKind::Resync);
                self.resync = Resync::Armed {
                    token,
                    resume: false,
                };
            }
        }
    }

    pub(in crate::subscription) fn on_list_result(
        &mut self,
        token: Token,
        result: Result<Listing, RegistryError>,
        now: Instant,
        ctx: &mut Ctx<'_>,
    ) {
        let Resync::InFlight {
            token: t,
            valid,
            resume,
        } = self.resync
        else {
            return;
        };
        if t != token {
            return;
        }
        self.resync = Resync::Idle;
        if !self.can_resync() {
            self.ensure_periodic(ctx);
            return;
        }
        if !valid {
            // The watch went stale meanwhile. A resync owed still is.
            if !resume {
                self.ensure_periodic(ctx);
                return;
            }
            return self.retry_owed(now, ctx);
        }
        // A listing older than the state pushed since is not applied; a
        // re-read that is owed is then tried again on the recover schedule
        // (a busy app backs off).
        let overtaken = matches!(&result, Ok(list)
            if self.real.version().is_some_and(|held| list.version < held));
        if overtaken && resume {
            return self.retry_owed(now, ctx);
        }
        match result {
            Ok(list) => {
                self.resync_recover.on_success();
                self.reconcile(list, now, ctx);
                self.ensure_periodic(ctx);
            }
            Err(e) => {
                match self
                    .resync_recover
                    .on_failure(&ctx.config.recover, e.class(), now, ctx.rng)
                {
                    Retry::After(delay) => {
                        let token = ctx.arm(delay, TimerKind::Resync);
                        self.resync = Resync::Armed { token, resume };
                    }
                    Retry::GiveUp => {
                        self.resync_recover = Recover::new();
                        self.ensure_periodic(ctx);
                    }
                }
            }
        }
    }

    /// An owed re-read did not land: tried again on the recover schedule.
    fn retry_owed(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        let policy = &ctx.config.recover;
        match self
            .resync_recover
            .on_failure(policy, ErrorClass::Transient, now, ctx.rng)
        {
            Retry::After(delay) => {
                let token = ctx.arm(delay, TimerKind::Resync);
                self.resync = Resync::Armed {
                    token,
                    resume: true,
                };
            }
            Retry::GiveUp => {
                self.resync_recover = Recover::new();
                self.ensure_periodic(ctx);
            }
        }
    }

    /// Applies a full listing where it is not older than the pushed state
    /// and differs from it, and reports the difference (a listing at the
    /// version held that differs means the source lost a notification).
    pub(super) fn reconcile(&mut self, list: Listing, now: Instant, ctx: &mut Ctx<'_>) {
        if self.real.version().is_none_or(|v| list.version < v) {
            return;
        }
        let event = RegistryEvent::reset(list);
        let Some(changes) = self.apply(event, false, now, ctx) else {
            return;
        };
        if changes.is_empty() {
            return;
        }
        let app = ctx.app.to_string();
        ctx.push(SubscriptionAction::Reconciled {
            app,
            added: changes.added,
            removed: changes.removed,
            changed: changes.replaced,
        });
    }

    /// A delta did not follow the state held: re-read the app now, as a
    /// re-read that is owed (retried on the recover schedule if a push
    /// overtakes it); one in flight already answers the gap.
    pub(in crate::subscription) fn gap_resync(&mut self, ctx: &mut Ctx<'_>) {
        self.resume_resync(ctx);
    }
}
