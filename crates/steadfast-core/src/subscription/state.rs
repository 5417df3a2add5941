//! The subscription state of one app and its transitions. Every call, timer
//! and stream carries a token; a result or firing whose token is not the
//! current one of its kind is dropped, so a late answer never acts.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::hold::Hold;
use super::resume::Carried;
use super::{Ctx, Delivery, Feed, SubscriptionAction, TimerKind, To};
use std::sync::Arc;

use crate::change::{delta_budget, Change, Fit, ResetAsk, Version};
use crate::error::RegistryError;
use crate::event::{ChangeCounts, Changes, InstanceMap, MapApplied, RegistryEvent};
use crate::instance::Instance;
use crate::recover::{Recover, Retry};
use crate::resolver::Token;

mod resync;
mod session;

/// The registry watch of the app.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Watch {
    /// Nothing under way (before the first open, after a restart).
    #[default]
    Idle,
    /// The `watch` call is under way.
    Opening(Token),
    /// Its stream is read.
    Open(Token),
    /// Re-opening after the timer with this token.
    Waiting(Token),
    /// The error was final: nothing more is tried until a new subscriber
    /// or a restart.
    GaveUp,
    /// After a registry session loss: re-opened (with a full re-read) when
    /// the timer with this token fires, at a random point of the spread
    /// window. Not a retry: no probe shortens it.
    Respread(Token),
}

/// The full re-read of the app.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Resync {
    #[default]
    Idle,
    Armed {
        token: Token,
        resume: bool,
    },
    /// `valid` turns false when the watch goes stale meanwhile (the result
    /// is not applied during an outage; a listing older than a pushed event
    /// is refused by its version anyway); `resume` marks a resync owed (after
    /// an outage, after a gap), retried soon when dropped.
    InFlight {
        token: Token,
        valid: bool,
        resume: bool,
    },
}

/// Everything the machine keeps for one subscribed app.
#[derive(Debug, Default)]
pub(super) struct AppSub {
    pub(super) subscribers: BTreeSet<u64>,
    watch: Watch,
    recover: Recover,
    stale_since: Option<Instant>,
    /// While the open stream is unhealthy (an `Err` item, no `Ok` since):
    /// the timer that re-opens it unless it heals first.
    heal: Option<Token>,
    /// The registry's latest state (held instances not included).
    pub(crate) real: InstanceMap,
    /// Version of the latest delivery to every subscriber (the base of the
    /// next delta; subscribers that attach later get a Reset at it).
    out: Option<Version>,
    /// Reset asks of the source (re-reads) after deltas that did not follow.
    pub(super) ask: ResetAsk,
    /// Deltas that arrived during a gap, replayed in order once the re-read
    /// applied (those that then follow apply; older ones are dropped), so a
    /// change notified while the re-read was under way is not lost. Bounded:
    /// past the bound they are dropped and the app is re-read once more.
    gapped: Vec<RegistryEvent>,
    gapped_items: usize,
    gapped_overflow: bool,
    resync: Resync,
    resync_recover: Recover,
    hold: Hold,
    hold_timer: Option<(Token, Instant)>,
    /// While opening the watch keeps failing: since when, attempts, last
    /// error (cleared by the first `Ok` item).
    pub(super) failing: Option<crate::pending::RegistryFailure>,
    /// Carried over from a machine that was replaced (`resume.rs`): the
    /// next delivery is the whole state, whatever changed, so subscribers
    /// hold exactly this machine's state from then on.
    pub(super) resumed: bool,
}

impl AppSub {
    pub(super) fn stale_since(&self) -> Option<Instant> {
        self.stale_since
    }

    /// Instances subscribers see (registry and held ones).
    pub(super) fn len(&self) -> usize {
        self.real.len().saturating_add(self.hold.len())
    }

    pub(super) fn watch_token(&self) -> Option<Token> {
        match self.watch {
            Watch::Opening(t) | Watch::Open(t) => Some(t),
            _ => None,
        }
    }

    fn cancel_watch(&mut self, ctx: &mut Ctx<'_>) {
        if let Watch::Opening(t) | Watch::Open(t) | Watch::Waiting(t) | Watch::Respread(t) =
            self.watch
        {
            ctx.cancel(Some(t));
        }
        ctx.cancel(self.heal.take());
        self.watch = Watch::Idle;
    }

    /// While waiting to re-open, the delay of the next probe this app
    /// asks for (see [`Recover::probe_delay`]).
    pub(super) fn wants_probe(&self, ctx: &mut Ctx<'_>, now: Instant) -> Option<Duration> {
        match self.watch {
            Watch::Waiting(_) => self.recover.probe_delay(&ctx.config.recover, now, ctx.rng),
            _ => None,
        }
    }

    /// Whether the app waits to re-open its watch.
    pub(super) fn is_waiting(&self) -> bool {
        matches!(self.watch, Watch::Waiting(_))
    }

    /// A probe found the registry answering: re-subscribe now, not after
    /// the grown backoff.
    pub(super) fn on_registry_answers(&mut self, ctx: &mut Ctx<'_>) {
        if let Watch::Waiting(reopen) = self.watch {
            self.recover.on_probe_ok();
            ctx.cancel(Some(reopen));
            self.watch = Watch::Idle;
            self.open_watch(ctx);
        }
    }

    pub(super) fn cancel_all(&mut self, ctx: &mut Ctx<'_>) {
        self.gapped.clear();
        self.gapped_items = 0;
        self.gapped_overflow = false;
        self.cancel_watch(ctx);
        if let Resync::Armed { token, .. } | Resync::InFlight { token, .. } = self.resync {
            ctx.cancel(Some(token));
        }
        self.resync = Resync::Idle;
        ctx.cancel(self.hold_timer.take().map(|(t, _)| t));
    }

    pub(super) fn open_watch(&mut self, ctx: &mut Ctx<'_>) {
        self.cancel_watch(ctx);
        let token = ctx.token();
        self.watch = Watch::Opening(token);
        let (app, deadline) = (ctx.app.to_string(), ctx.config.call_timeout);
        ctx.push(SubscriptionAction::OpenWatch {
            app,
            token,
            deadline,
        });
    }

    /// The whole state as delivered last (a Reset at the latest delivery's
    /// version), for a subscriber that needs everything; `None` before the
    /// first delivery.
    pub(super) fn full(&self, grace: Duration) -> Option<Delivery> {
        let version = self.out?;
        Some(Delivery {
            feed: Change::Reset {
                version,
                items: self.merged(),
            },
            held: self.hold.info(grace),
            stale_since: self.stale_since,
        })
    }

    /// A subscriber that attached to a running app gets its state at once.
    pub(super) fn catch_up(&mut self, id: u64, _now: Instant, ctx: &mut Ctx<'_>) {
        if let Some(delivery) = self.full(ctx.config.mass_removal_grace) {
            // The state at the latest delivery, stale or not as of now.
            let app = ctx.app.to_string();
            ctx.push(SubscriptionAction::Deliver {
                app,
                to: To::One(id),
                delivery,
            });
        }
        if let Some(since) = self.stale_since {
            let app = ctx.app.to_string();
            ctx.push(SubscriptionAction::Health {
                app,
                to: To::One(id),
                stale_since: Some(since),
            });
        }
        self.tell_failure(To::One(id), ctx);
        if self.watch == Watch::GaveUp {
            self.recover = Recover::new();
            self.open_watch(ctx);
        }
    }

    pub(super) fn on_watch_opened(
        &mut self,
        token: Token,
        result: Result<(), RegistryError>,
        now: Instant,
        ctx: &mut Ctx<'_>,
    ) {
        if self.watch != Watch::Opening(token) {
            return;
        }
        match result {
            Ok(()) => {
                self.watch = Watch::Open(token);
                let app = ctx.app.to_string();
                ctx.push(SubscriptionAction::ReadStream { app, token });
            }
            Err(e) => self.on_watch_failed(&e, now, ctx),
        }
    }

    pub(super) fn on_stream_item(
        &mut self,
        token: Token,
        item: Result<RegistryEvent, RegistryError>,
        now: Instant,
        ctx: &mut Ctx<'_>,
    ) {
        if self.watch != Watch::Open(token) {
            return;
        }
        match item {
            Ok(event) => self.on_fresh(event, now, ctx),
            // Unhealthy now, but the stream is kept: it may heal.
            Err(e) => {
                self.mark_stale(now, ctx);
                self.arm_heal(&e, now, ctx);
            }
        }
    }

    /// An unhealthy stream is kept while it may heal by itself, but not for
    /// ever: unless an `Ok` item comes first, it is dropped and re-opened
    /// after the next step of the recover schedule, and never sooner than
    /// the backoff cap (30 s by default), which leaves a self-healing
    /// backend (etcd moves to a healthy endpoint or resumes within a few
    /// seconds) the time to heal. Armed once per run of `Err` items; a
    /// schedule that gives up keeps reading the stream.
    fn arm_heal(&mut self, err: &RegistryError, now: Instant, ctx: &mut Ctx<'_>) {
        if self.heal.is_some() {
            return;
        }
        let policy = &ctx.config.recover;
        if let Retry::After(delay) = self.recover.on_failure(policy, err.class(), now, ctx.rng) {
            let delay = delay.max(policy.backoff.cap());
            self.heal = Some(ctx.arm(delay, TimerKind::Reopen));
        }
    }

    /// The watch failed to open or its stream ended: stale, and re-open on
    /// the recover schedule, probing meanwhile.
    pub(super) fn on_watch_failed(&mut self, err: &RegistryError, now: Instant, ctx: &mut Ctx<'_>) {
        self.cancel_watch(ctx);
        self.mark_stale(now, ctx);
        let retry = self
            .recover
            .on_failure(&ctx.config.recover, err.class(), now, ctx.rng);
        self.record_failure(err, now, ctx);
        match retry {
            Retry::After(delay) => self.watch = Watch::Waiting(ctx.arm(delay, TimerKind::Reopen)),
            Retry::GiveUp => self.watch = Watch::GaveUp,
        }
    }

    fn mark_stale(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        self.hold.close_window();
        if let Resync::InFlight { valid, .. } = &mut self.resync {
            // Delivered while down it would clear the stale mark downstream.
            *valid = false;
        }
        if self.stale_since.is_none() {
            self.stale_since = Some(now);
            let app = ctx.app.to_string();
            ctx.push(SubscriptionAction::Health {
                app,
                to: To::All,
                stale_since: Some(now),
            });
        }
    }

    fn on_fresh(&mut self, event: RegistryEvent, now: Instant, ctx: &mut Ctx<'_>) {
        self.recover.on_success();
        self.clear_failure(ctx);
        ctx.cancel(self.heal.take());
        let was_stale = self.stale_since.take().is_some();
        if was_stale {
            let present = self.real.version().is_some().then_some(&self.real);
            self.hold.open_window(present, now);
        }
        // After an outage delivered even when it changes nothing: it
        // carries the cleared stale mark. (A resync in flight meanwhile is
        // applied only if its listing is not older than this event.)
        self.apply(event, was_stale, now, ctx);
        if was_stale && ctx.resume_resync {
            self.resume_resync(ctx);
        } else {
            self.ensure_periodic(ctx);
        }
    }

    /// Applies `event` to the registry state where it fits the version held
    /// ([`Change::fit`]) and delivers what changed (also an empty change when
    /// `always`). An event not newer than the state is ignored and reported;
    /// a delta that does not follow is reported as a gap and answered by a
    /// re-read (see [`ResetAsk`]). Returns what changed.
    pub(super) fn apply(
        &mut self,
        event: RegistryEvent,
        always: bool,
        now: Instant,
        ctx: &mut Ctx<'_>,
    ) -> Option<ChangeCounts> {
        let expired = self.hold.expire(now);
        let grace = ctx.config.mass_removal_grace;
        let (version, is_reset) = (event.version(), event.is_reset());
        let base = match &event {
            Change::Delta { base, .. } => *base,
            Change::Reset { version, .. } => *version,
        };
        let budget = delta_budget(self.real.len().max(event.len()));
        let applied = if event.fit(self.real.version()) == Fit::Gap {
            self.keep_gapped(event);
            MapApplied::Gap
        } else {
            let keep_removed = self.hold.wants_removals(now, grace);
            self.real.apply_keeping(event, budget, keep_removed)
        };
        let changes = match applied {
            MapApplied::Changed(changes) => changes,
            skipped => {
                let app = ctx.app.to_string();
                let held = self.real.version();
                if matches!(skipped, MapApplied::Gap) {
                    let asked = self.ask.on_gap(now);
                    ctx.push(SubscriptionAction::Gap {
                        app,
                        held,
                        base,
                        asked,
                    });
                    if asked {
                        self.gap_resync(ctx);
                    }
                } else {
                    ctx.push(SubscriptionAction::IgnoredOlder {
                        app,
                        version,
                        held: held.unwrap_or_default(),
                    });
                }
                if always || self.resumed || !expired.is_empty() {
                    self.deliver_change(Changes::default(), Vec::new(), expired, ctx);
                }
                self.sync_hold_timer(now, ctx);
                return None;
            }
        };
        if is_reset {
            self.ask.on_reset();
        }
        let step = self.hold.on_changes(&changes, &self.real, grace, now);
        if let (false, Some(held)) = (step.newly_held.is_empty(), self.hold.info(grace)) {
            let app = ctx.app.to_string();
            ctx.push(SubscriptionAction::Holding {
                app,
                newly_held: step.newly_held.len(),
                held,
            });
        }
        // The first state is delivered even when empty: "the registry holds
        // no instance" is news too.
        let deliver = always
            || self.resumed
            || self.out.is_none()
            || !changes.is_empty()
            || !step.newly_held.is_empty()
            || !expired.is_empty();
        let counts = changes.counts();
        if deliver {
            self.deliver_change(changes, step.newly_held, expired, ctx);
        }
        self.sync_hold_timer(now, ctx);
        if is_reset {
            self.replay_gapped(now, ctx);
        }
        Some(counts)
    }

    /// Keeps a delta that arrived during a gap for [`AppSub::replay_gapped`]
    /// (within a bound: past it, all are dropped and the app is re-read once
    /// more after the re-read under way).
    fn keep_gapped(&mut self, event: RegistryEvent) {
        let bound = delta_budget(self.real.len()).max(64);
        let items = self.gapped_items.saturating_add(event.len());
        if self.gapped_overflow || items > bound {
            self.gapped.clear();
            self.gapped_items = 0;
            self.gapped_overflow = true;
            return;
        }
        self.gapped_items = items;
        self.gapped.push(event);
    }

    /// A Reset applied: the deltas kept during the gap are applied in order
    /// where they now follow; if some were dropped, the app is re-read again.
    fn replay_gapped(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        self.gapped_items = 0;
        let overflow = std::mem::take(&mut self.gapped_overflow);
        for event in std::mem::take(&mut self.gapped) {
            if event.fit(self.real.version()) != Fit::Older {
                self.apply(event, false, now, ctx);
            }
        }
        if overflow {
            self.resume_resync(ctx);
        }
    }

    /// Every instance subscribers see: the registry's plus the held ones.
    pub(crate) fn merged(&self) -> Vec<Arc<Instance>> {
        let mut all = Vec::with_capacity(self.real.len());
        all.extend(self.real.iter().cloned());
        all.extend(self.hold.held().cloned());
        all
    }

    /// Delivers `changes` of the registry state, except that instances
    /// newly held stay (or come back), and `expired` held ones leave: as a
    /// delta, or as the whole state when there is none yet or the change is
    /// larger than [`delta_budget`] of the app.
    fn deliver_change(
        &mut self,
        changes: Changes,
        newly_held: Vec<Arc<Instance>>,
        expired: Vec<Arc<Instance>>,
        ctx: &mut Ctx<'_>,
    ) {
        let Some(base) = self.out.filter(|_| !self.resumed) else {
            if self.real.version().is_some() {
                self.deliver_all(ctx);
            }
            return;
        };
        let size = self.real.len().saturating_add(self.hold.len());
        let total = changes
            .len()
            .saturating_add(newly_held.len())
            .saturating_add(expired.len());
        let upserts = match changes.upserts {
            Some(upserts) if total <= delta_budget(size) => upserts,
            _ => return self.deliver_state(changes.all, ctx),
        };
        let mut upserts = upserts;
        let mut removals: Vec<Arc<str>> =
            changes.removed.iter().map(|i| i.id_arc().clone()).collect();
        for h in newly_held {
            match removals.iter().position(|r| **r == *h.id()) {
                // Removed now: it stays.
                Some(pos) => {
                    removals.swap_remove(pos);
                }
                // Removed earlier in the window: it comes back.
                None => upserts.push(h),
            }
        }
        removals.extend(expired.iter().map(|i| i.id_arc().clone()));
        let version = self.next_version();
        self.deliver(
            Change::Delta {
                base,
                version,
                upserts,
                removals,
            },
            ctx,
        );
    }

    /// The version of the next delivery: the registry's, or the step after
    /// the latest delivery for a change made at the same registry version.
    fn next_version(&self) -> Version {
        Version::after(self.out, self.real.version().unwrap_or_default())
    }

    /// Delivers the whole state (registry instances plus held ones).
    fn deliver_all(&mut self, ctx: &mut Ctx<'_>) {
        self.deliver_state(None, ctx);
    }

    /// Delivers the whole state: `all` as it is when it is the registry
    /// state (a Reset's records) and nothing is held, else the state copied
    /// out with the held instances.
    fn deliver_state(&mut self, all: Option<Vec<Arc<Instance>>>, ctx: &mut Ctx<'_>) {
        let version = self.next_version();
        let items = match all {
            Some(all) if self.hold.is_empty() && all.len() == self.real.len() => all,
            _ => self.merged(),
        };
        self.deliver(Change::Reset { version, items }, ctx);
    }

    fn deliver(&mut self, feed: Feed, ctx: &mut Ctx<'_>) {
        self.out = Some(feed.version());
        self.resumed = false;
        let delivery = Delivery {
            feed,
            held: self.hold.info(ctx.config.mass_removal_grace),
            stale_since: self.stale_since,
        };
        let app = ctx.app.to_string();
        ctx.push(SubscriptionAction::Deliver {
            app,
            to: To::All,
            delivery,
        });
    }

    fn sync_hold_timer(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        let due = self.hold.next_deadline();
        if self.hold_timer.map(|(_, at)| at) == due {
            return;
        }
        ctx.cancel(self.hold_timer.take().map(|(t, _)| t));
        if let Some(at) = due {
            let token = ctx.arm(at.saturating_duration_since(now), TimerKind::HoldEnd);
            self.hold_timer = Some((token, at));
        }
    }

    pub(super) fn on_timer(&mut self, token: Token, now: Instant, ctx: &mut Ctx<'_>) {
        let resync_due = match self.resync {
            Resync::Armed { token: t, resume } if t == token => Some(resume),
            _ => None,
        };
        if self.watch == Watch::Waiting(token) || self.watch == Watch::Respread(token) {
            self.watch = Watch::Idle;
            self.open_watch(ctx);
        } else if self.heal == Some(token) {
            // Unhealthy and silent past its time to heal: re-open.
            self.heal = None;
            self.open_watch(ctx);
        } else if let Some(resume) = resync_due {
            self.resync = Resync::Idle;
            if self.can_resync() {
                self.start_resync(resume, ctx);
            } else {
                self.ensure_periodic(ctx);
            }
        } else if self.hold_timer.is_some_and(|(t, _)| t == token) {
            self.hold_timer = None;
            self.deliver_expired(now, ctx);
        }
    }

    /// What a replacement of this app's subscription carries over: what the
    /// subscribers were handed (`resume.rs`).
    pub(super) fn carry(&self) -> Carried {
        Carried {
            version: self.real.version(),
            instances: self.real.iter().cloned().collect(),
            out: self.out,
            stale_since: self.stale_since,
            failing: self.failing.clone(),
            hold: self.hold.clone(),
        }
    }

    /// A subscription of `subscribers` re-created from `carried`: the
    /// registry state is rebuilt from its instances (no index of the old
    /// one is kept), nothing is under way, and the next delivery is whole.
    pub(super) fn resumed(subscribers: BTreeSet<u64>, carried: Carried) -> Self {
        let mut real = InstanceMap::default();
        if let Some(version) = carried.version {
            let reset = Change::Reset {
                version,
                items: carried.instances,
            };
            // An empty map takes any Reset.
            let _ = real.apply(reset, 0);
        }
        Self {
            subscribers,
            real,
            out: carried.out,
            stale_since: carried.stale_since,
            failing: carried.failing,
            hold: carried.hold,
            resumed: true,
            ..Self::default()
        }
    }

    /// Drops the held instances whose grace ended and delivers that.
    pub(super) fn deliver_expired(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        let expired = self.hold.expire(now);
        if !expired.is_empty() {
            self.deliver_change(Changes::default(), Vec::new(), expired, ctx);
        }
        self.sync_hold_timer(now, ctx);
    }
}
