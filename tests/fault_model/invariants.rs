//! The invariants checked after every event and every step, and what the
//! model remembers to check them. Each violation message starts with its
//! kind: `[urls]`, `[timers]`, `[rate]`, `[liveness]`, `[after-shutdown]`,
//! `[converge]`, `[storm]`, and `[older]` and `[full]` (see `views.rs`).
//!
//! - `[urls]` no directory serves a URL of an instance absent from the
//!   latest registry state the registry actor received (the last `Ok` item
//!   of the current watch, or a resync's list that it applied), except an
//!   instance removed in a mass expiry at most `mass_removal_grace` ago
//!   while the directory's status says it holds that app's instances; and
//!   every URL names a serving instance of the state its resolver holds
//!   (reassembled from the Resets and Deltas it applied), unless that
//!   resolver is a replacement still resyncing.
//! - `[timers]` at most one pending timer per revision, and never a timer
//!   and a fetch at once; none for a revision outside the snapshot, none
//!   while no subscriber is attached; the machine's own counts agree with
//!   the shell's. Per app at most one watch handle (open, opening or
//!   waiting), one resync timer, one hold timer; one probe per engine.
//! - `[rate]` a resolver starts no fetch of a revision before its schedule
//!   allows: after `f` consecutive failures the last of which was at `t`,
//!   not before `t + min(initial * 2^(f-1), cap)` (transient) or `t + cap`
//!   (persistent), jitter only adding to that; a revision that leaves and
//!   returns within twice the cap keeps its schedule; a resolver re-created
//!   after a panic starts every schedule afresh (restart clean: its
//!   restarts are paced by the panic quarantine). A flight makes at most
//!   `fanout` provider calls, and at most `retry_calls` when its revision's
//!   previous flight failed within `revision_memory`.
//! - `[liveness]` every unresolved revision of an active resolver has a
//!   timer or a fetch; every fetch waited for has a flight; every
//!   subscribed app has a watch handle.
//! - `[after-shutdown]` after close no machine returns an action for any
//!   input, no update is published, and close itself cancelled everything.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use steadfast_core::{
    BackoffPolicy, CacheKey, ErrorClass, FetchError, RegistryEvent, ResolverMachine, Token,
};
use steadfast_core::{Delivery, Feed, TimerKind};

use super::heal::HealWatch;
use super::registry::Handle;
use super::sim::Sim;
use super::views::Received;
use super::world::{app_of, REFS};

/// Float rounding allowance of the schedule check.
const TOLERANCE: Duration = Duration::from_millis(1);

/// The model's record of one revision's retry schedule.
#[derive(Clone, Copy, Debug)]
pub struct Sched {
    failures: u32,
    last: Duration,
    class: ErrorClass,
}

/// What the invariants remember across events.
#[derive(Default)]
pub struct Track {
    /// Latest registry state received per app.
    pub received: BTreeMap<String, Received>,
    /// When each instance left the received state.
    pub removed_at: BTreeMap<String, Duration>,
    /// Retry schedules per (resolver, revision).
    sched: BTreeMap<(u64, String), Sched>,
    /// Schedules of revisions that left, with when they left.
    parked: BTreeMap<(u64, String), (Sched, Duration)>,
    /// When the latest flight of a key failed (cleared on success).
    pub flight_failed: BTreeMap<CacheKey, Duration>,
    /// A registry fault happened (down, stream error, end or panic).
    pub reg_faulted: bool,
    /// A registry change was never notified.
    pub missed: bool,
    /// Shutdown completed: nothing may happen any more.
    pub all_closed: bool,
    /// Convergence watch of the heal phase.
    pub heal: Option<HealWatch>,
    /// Directories, registry views or resolver snapshots changed since the
    /// URL invariant last looked.
    pub urls_dirty: bool,
    /// The registry actor acted since its invariants last looked.
    pub reg_dirty: bool,
    /// Some URL was allowed only as held (its grace runs out with time).
    held_seen: bool,
    issued_res: VecDeque<(String, Token)>,
    issued_reg: VecDeque<(String, Token)>,
}

impl Track {
    /// Remembers a resolver token (the latest few are fed to closed machines).
    pub fn issued_res(&mut self, revision: &str, token: Token) {
        self.issued_res.push_back((revision.to_string(), token));
        if self.issued_res.len() > 12 {
            self.issued_res.pop_front();
        }
    }

    /// Remembers a registry token.
    pub fn issued_reg(&mut self, app: &str, token: Token) {
        self.issued_reg.push_back((app.to_string(), token));
        if self.issued_reg.len() > 12 {
            self.issued_reg.pop_front();
        }
    }

    /// The subscription machine dropped `app`: so does the model.
    pub fn forget_app(&mut self, app: &str) {
        self.urls_dirty = true;
        self.received.remove(app);
        self.removed_at.retain(|id, _| app_of(id) != app);
    }
}

/// The least delay the backoff allows after the failures of `s`.
fn min_delay(p: &BackoffPolicy, s: &Sched) -> Duration {
    if s.class != ErrorClass::Transient {
        return p.max;
    }
    let n = s.failures.saturating_sub(1).min(64) as i32;
    let secs = p.initial.as_secs_f64() * p.multiplier.powi(n);
    Duration::from_secs_f64(secs.min(p.max.as_secs_f64()))
}

impl Sim {
    /// Resolver `id` was re-created: its schedules start afresh.
    pub fn track_resolver_recreated(&mut self, id: u64) {
        self.track.sched.retain(|(r, _), _| *r != id);
        self.track.parked.retain(|(r, _), _| *r != id);
    }

    /// Resolver `id` applied a delivery and now holds revisions `revs`:
    /// schedules of revisions that left are parked, those that came back
    /// within the window resume.
    pub fn track_snapshot_applied(&mut self, id: u64, revs: &BTreeSet<String>) {
        let now = self.now;
        let window = self.cfg.backoff.cap().saturating_mul(2);
        let revs: BTreeSet<&str> = revs.iter().map(String::as_str).collect();
        let gone: Vec<(u64, String)> = self
            .track
            .sched
            .keys()
            .filter(|(r, rev)| *r == id && !revs.contains(rev.as_str()))
            .cloned()
            .collect();
        for key in gone {
            if let Some(s) = self.track.sched.remove(&key) {
                self.track.parked.insert(key, (s, now));
            }
        }
        for rev in revs {
            let key = (id, rev.to_string());
            if self.track.sched.contains_key(&key) {
                continue;
            }
            if let Some((s, left)) = self.track.parked.remove(&key) {
                // At the window's edge the machine may have forgotten it.
                if now.saturating_sub(left) + TOLERANCE < window {
                    self.track.sched.insert(key, s);
                }
            }
        }
    }

    /// Resolver `id` took the result of its current fetch of `revision`.
    pub fn track_fetch_result(&mut self, id: u64, revision: &str, outcome: Result<(), ErrorClass>) {
        let key = (id, revision.to_string());
        let now = self.now;
        match outcome {
            Ok(()) => {
                self.track.sched.remove(&key);
            }
            Err(class) => {
                let s = self.track.sched.entry(key).or_insert(Sched {
                    failures: 0,
                    last: now,
                    class,
                });
                s.failures += 1;
                s.last = now;
                s.class = class;
            }
        }
    }

    /// `[rate]`: resolver `id` starts a fetch of `revision` now.
    pub fn check_fetch_due(&mut self, id: u64, app: &str, revision: &str) {
        let Some(s) = self.track.sched.get(&(id, revision.to_string())).copied() else {
            return;
        };
        let due = s.last + min_delay(&self.cfg.backoff, &s);
        if self.now + TOLERANCE < due {
            self.violate(format!(
                "[rate] resolver {app}#{id} fetched {revision} after {} failure(s) ({:?}), the \
                 last at {:.3}s: before its schedule allows ({:.3}s)",
                s.failures,
                s.class,
                s.last.as_secs_f64(),
                due.as_secs_f64()
            ));
        }
    }

    /// Checks every invariant that holds between events. Each part runs
    /// when what it reads changed (every such change sets a flag), and the
    /// hold check also while anything is held, since its grace runs out.
    pub fn check(&mut self) {
        if self.failed() {
            return;
        }
        let mut found = None;
        let full_due = self.track.urls_dirty || self.resolvers.values().any(|r| r.dirty);
        if self.track.urls_dirty || self.track.held_seen {
            let (v, held) = self.check_urls();
            self.track.held_seen = held;
            found = v;
        }
        let found = found
            .or_else(|| full_due.then(|| self.check_full()).flatten())
            .or_else(|| self.check_pending())
            .or_else(|| {
                self.track
                    .reg_dirty
                    .then(|| self.check_registry())
                    .flatten()
            });
        self.track.urls_dirty = false;
        self.track.reg_dirty = false;
        for r in self.resolvers.values_mut() {
            r.dirty = false;
        }
        if let Some(v) = found {
            self.violate(v);
        }
    }

    /// The `[urls]` invariant; also says whether a URL was allowed as held.
    fn check_urls(&self) -> (Option<String>, bool) {
        let grace = self.cfg.sub.mass_removal_grace;
        let mut held_seen = false;
        for d in self.dirs.values() {
            for u in &d.urls {
                let id = u.instance_id();
                let app = app_of(id);
                let key = d.m.subscribe_key();
                let resolver = d.resolvers.get(app).and_then(|r| self.resolvers.get(r));
                // A replacement still resyncing has handed out nothing: the
                // directory serves what the old resolver held (the
                // registry's own state still bounds it, below).
                // Likewise a replacement directory serving an app from its
                // predecessor's set until the app answers (at most 1 s).
                let resyncing = resolver.is_some_and(|r| r.m.is_resyncing()) || d.m.awaits(app);
                let serving = resolver
                    .and_then(|r| r.instances.as_ref())
                    .and_then(|m| m.get(id))
                    .is_some_and(|i| i.is_serving());
                if !serving && !resyncing {
                    let v = format!(
                        "[urls] directory {key} serves {id}, not a serving instance of its \
                         resolver's latest snapshot"
                    );
                    return (Some(v), held_seen);
                }
                let present = self
                    .track
                    .received
                    .get(app)
                    .is_some_and(|r| r.by_id.contains_key(id));
                if present {
                    continue;
                }
                let within = self
                    .track
                    .removed_at
                    .get(id)
                    .is_some_and(|t| self.now <= *t + grace);
                let says = match d.m.status() {
                    steadfast_core::DirectoryStatus::Ready { held, .. } => {
                        held.iter().any(|(a, _)| a == app)
                    }
                    _ => false,
                };
                if !(within && says) {
                    let v = format!(
                        "[urls] directory {key} serves {id}, absent from the latest registry \
                         state of {app} (removed at {:?}, held within grace: {within}, status \
                         says held: {says})",
                        self.track.removed_at.get(id)
                    );
                    return (Some(v), held_seen);
                }
                held_seen = true;
            }
        }
        (None, held_seen)
    }

    /// The `[timers]` and `[liveness]` invariants of resolvers and the cache.
    fn check_pending(&self) -> Option<String> {
        for r in self.resolvers.values().filter(|r| !r.terminated) {
            let app = &r.app;
            // A flight can vanish without the resolver hearing of it: looked
            // at every time.
            for rev in r.fetches.values() {
                let key = (app.clone(), rev.clone());
                if !self.cache.terminated && !self.cache.flights.contains_key(&key) {
                    return Some(format!("[liveness] {app} waits for {rev}, no flight runs"));
                }
            }
            if !r.dirty {
                continue;
            }
            let mut per: BTreeMap<&str, usize> = BTreeMap::new();
            for rev in r.timers.values().chain(r.fetches.values()) {
                *per.entry(rev.as_str()).or_default() += 1;
            }
            if let Some((rev, n)) = per.iter().find(|(_, n)| **n > 1) {
                return Some(format!(
                    "[timers] revision {rev} of {app} has {n} timers/fetches pending at once"
                ));
            }
            if let Some(rev) = per.keys().find(|rev| !r.revs.contains(**rev)) {
                return Some(format!(
                    "[timers] {app} has a timer or fetch of {rev}, which left the snapshot"
                ));
            }
            if !r.m.is_active() && !per.is_empty() {
                return Some(format!(
                    "[timers] {app} has timers or fetches {per:?} while inactive"
                ));
            }
            if r.m.pending_timers() != r.timers.len() || r.m.pending_fetches() != r.fetches.len() {
                return Some(format!(
                    "[timers] {app}: the machine counts {} timers and {} fetches, the shell {} and {}",
                    r.m.pending_timers(),
                    r.m.pending_fetches(),
                    r.timers.len(),
                    r.fetches.len()
                ));
            }
            let unresolved = r.m.unresolved().map_or(0, |u| u.revisions.len());
            if r.m.is_active() && unresolved != per.len() {
                return Some(format!(
                    "[liveness] {app}: {unresolved} unresolved revision(s), {} busy",
                    per.len()
                ));
            }
        }
        if !self.cache.terminated && self.cache.cache.flights() != self.cache.flights.len() {
            return Some("[liveness] the cache machine and its shell disagree on flights".into());
        }
        None
    }

    /// The registry actor's `[timers]` and `[liveness]` invariants.
    fn check_registry(&self) -> Option<String> {
        if self.reg.terminated {
            return None;
        }
        let mut per: BTreeMap<(&str, u8), usize> = BTreeMap::new();
        for (app, h) in self.reg.handles.values() {
            // A re-open timer may run beside a kept unhealthy stream (it
            // re-opens a stream that stays silent), so it is its own kind.
            let kind = match h {
                Handle::Open | Handle::Stream => 0,
                Handle::Timer(TimerKind::Reopen) => 5,
                Handle::Timer(TimerKind::Resync) => 1,
                Handle::Timer(TimerKind::HoldEnd) => 2,
                Handle::List => 3,
                Handle::Timer(TimerKind::Probe) => 4,
            };
            let app = if kind == 4 { "" } else { app.as_str() };
            *per.entry((app, kind)).or_default() += 1;
        }
        if let Some(((app, kind), n)) = per
            .iter()
            .find(|((_, k), n)| **n > if *k == 3 { 2 } else { 1 })
        {
            return Some(format!(
                "[timers] registry: {n} handles of kind {kind} for app {app:?}"
            ));
        }
        for app in self.reg.m.apps() {
            if !per.contains_key(&(app, 0)) && !per.contains_key(&(app, 5)) {
                return Some(format!("[liveness] {app} is subscribed but has no watch"));
            }
        }
        let subscribed: BTreeSet<&str> = self.reg.m.apps().collect();
        if let Some(((app, _), _)) = per
            .iter()
            .find(|((a, k), _)| *k < 3 && !subscribed.contains(a))
        {
            return Some(format!(
                "[timers] registry handle for unsubscribed app {app}"
            ));
        }
        None
    }

    /// `[after-shutdown]`: every closed machine ignores stale inputs.
    pub fn poke_closed(&mut self) {
        let mut machines = std::mem::take(&mut self.graveyard);
        for m in &mut machines {
            self.poke_resolver(m);
        }
        self.graveyard = machines;
        if self.reg.terminated {
            self.poke_registry();
        }
    }

    /// Feeds a closed resolver every kind of input.
    pub fn poke_resolver(&mut self, m: &mut ResolverMachine) {
        let now = self.at();
        let app = m.app().to_string();
        let mut acted = Vec::new();
        for (rev, token) in self.track.issued_res.clone() {
            acted.extend(m.on_fetch_result(&rev, token, Err(FetchError::Timeout), now));
            if let Some(info) = self.world.metadata.get(&(app.clone(), rev.clone())) {
                let info = Arc::new(info.clone());
                acted.extend(m.on_fetch_result(&rev, token, Ok(info), now));
            }
            acted.extend(m.on_retry_due(&rev, token));
        }
        let snap = self.world.snapshot(&app);
        let g = m.version();
        acted.extend(m.on_snapshot(g.next_step(), snap, now));
        let removals = self
            .world
            .apps
            .get(app.as_str())
            .map_or_else(Vec::new, |m| {
                m.keys().map(|id| Arc::from(id.as_str())).collect()
            });
        let delta = Feed::Delta {
            base: g,
            version: g.next_step(),
            upserts: Vec::new(),
            removals,
        };
        let delivery = |stale_since| Delivery {
            feed: delta.clone(),
            held: None,
            stale_since,
        };
        acted.extend(m.on_delivery(delivery(None), now));
        acted.extend(m.on_delivery(delivery(Some(now)), now));
        acted.extend(m.subscribe_at(REFS[0].key, now));
        acted.extend(m.unsubscribe(REFS[0].key));
        m.set_registry_stale(Some(now));
        let updates = m.take_updates().len();
        if !acted.is_empty() || updates > 0 {
            self.violate(format!(
                "[after-shutdown] closed resolver {app} acted on stale input: {acted:?}, \
                 {updates} update(s)"
            ));
        }
    }

    fn poke_registry(&mut self) {
        let now = self.at();
        let mut acted = Vec::new();
        for (app, token) in self.track.issued_reg.clone() {
            let listing = self.world.listing(&app);
            let reset = RegistryEvent::reset(listing.clone());
            let delta = RegistryEvent::Delta {
                base: listing.version,
                version: self.world.current().next_step(),
                upserts: listing.instances.clone(),
                removals: Vec::new(),
            };
            let m = &mut self.reg.m;
            acted.extend(m.on_timer(&app, token, now));
            acted.extend(m.on_watch_opened(&app, token, Ok(()), now));
            acted.extend(m.on_stream_item(&app, token, Ok(reset), now));
            acted.extend(m.on_stream_item(&app, token, Ok(delta), now));
            acted.extend(m.on_stream_end(&app, token, now));
            acted.extend(m.on_list_result(&app, token, Ok(listing), now));
            acted.extend(m.subscribe(&app, 999, now));
            acted.extend(m.unsubscribe(&app, 999, now));
        }
        let point = self.reg.m.resume_point();
        acted.extend(self.reg.m.resume(point, [("x".to_string(), 1)], now));
        if !acted.is_empty() {
            self.violate(format!(
                "[after-shutdown] the closed subscription machine acted: {acted:?}"
            ));
        }
    }
}
