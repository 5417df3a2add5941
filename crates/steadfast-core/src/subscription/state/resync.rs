//! The full re-read of one app: periodic (jittered), owed on resume after
//! an outage (unless the backend re-reads by itself), dropped when a push
//! overtakes it and then retried on the recover schedule, and applied only
//! where it differs from the pushed state.

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
            // Already invalidated by the snapshot; retried soon on its result.
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
            // A push overtook the list. The resume resync is still owed:
            // retried on the recover schedule (a busy app backs off).
            if !resume {
                self.ensure_periodic(ctx);
                return;
            }
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
            return;
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

    /// Applies a listed state that differs from the pushed one.
    /// Applies a full listing where it is not older than the pushed state
    /// and differs from it, and reports the difference (a listing at the
    /// version held that differs means the source lost a notification).
    pub(super) fn reconcile(&mut self, list: Listing, now: Instant, ctx: &mut Ctx<'_>) {
        if self.real.version().is_none_or(|v| list.version < v) {
            return;
        }
        let event = RegistryEvent::reset(list);
        let Some(changes) = self.apply(&event, false, true, now, ctx) else {
            return;
        };
        if changes.is_empty() {
            return;
        }
        let app = ctx.app.to_string();
        ctx.push(SubscriptionAction::Reconciled {
            app,
            added: changes.added.len(),
            removed: changes.removed.len(),
            changed: changes.replaced.len(),
        });
    }
}
