//! Sans-IO registry subscription machine: for every app with subscribers it
//! decides when to open the registry watch, when the app's state is stale,
//! when to re-subscribe, when to probe a registry that is down, when to
//! re-read the app in full (periodic resync), and which instances of a
//! registry-caused mass expiry to hold for a grace. The registry actor only
//! delivers inputs (watch opened or failed, stream item or end, timer fired,
//! list result, subscriber added or removed, close; a replacement
//! resumes from its predecessor's [`SubscriptionResume`]) and performs
//! the [`SubscriptionAction`]s. Time and randomness are inputs.
//!
//! Stream contract (see [`crate::backend::EventStream`]): an `Err` item
//! marks the app stale and the stream is kept (its next `Ok` item clears the
//! mark), but not for ever: unless it heals first, an unhealthy stream is
//! dropped and re-opened after the next step of the registry
//! [`RecoverPolicy`](crate::recover::RecoverPolicy), and never sooner than the backoff cap (30 s by
//! default), time enough for a backend that heals by itself (etcd: within
//! 2-5 s). The end of the stream, or a failed open, re-subscribes on the
//! same schedule: capped exponential backoff, and while down a cheap probe
//! (`list`) every probe interval, so that after an outage of any length the
//! watch is re-opened as soon as the registry answers, not after a grown
//! backoff.
//!
//! Events and deliveries (the data path's one protocol, `crate::change`):
//! the machine keeps each app's registry state as an
//! [`InstanceMap`](crate::event::InstanceMap) in registry order at a
//! version, and takes every event through [`Change::fit`](crate::change::Change::fit):
//! an event not newer than the state is ignored
//! ([`SubscriptionAction::IgnoredOlder`]); a delta on top of a version the
//! machine never held is a gap ([`SubscriptionAction::Gap`]): not applied,
//! and the app is re-read at once (one re-read per gap, at most one per
//! second, [`crate::change::ResetAsk`]); a change that applies is delivered
//! as what it changed ([`Feed`]'s Delta), unless it changed more than a
//! quarter of the app ([`crate::change::delta_budget`]), which is delivered as the whole
//! state in registry order (a Reset: each stage rebuilds in one pass).
//! The first delivery and a subscriber catching up get the whole state.
//! Deliveries carry the registry's version; a change the machine makes on
//! its own (a held instance released) takes the next step of it.
//!
//! Staleness travels with every delivery ([`Delivery::stale_since`]): a
//! delivery sent while the registry is down (a hold that ends, a
//! restart, a subscriber catching up) says so, so no delivery reads as
//! fresh during an outage. [`SubscriptionAction::Health`] announces the
//! start of an outage at once.
//!
//! Resync: every `reconcile_interval` (jittered by ±[`RECONCILE_JITTER`])
//! and on every resume after an outage, the app is listed in full and any
//! difference from the pushed state (at a newer version) is delivered and
//! reported ([`SubscriptionAction::Reconciled`]). A list result is dropped
//! when a pushed event arrived while it was in flight, so a resync never
//! rolls back a newer pushed state; a dropped resume resync is retried on
//! the recover schedule. The resume resync is skipped for a backend that
//! re-reads in full on every resume by itself
//! ([`crate::backend::Registry::rereads_on_resume`], see
//! [`SubscriptionMachine::with_backend_rereads_on_resume`]); the periodic
//! one stays.
//!
//! Mass expiry (no flap to empty): within [`MASS_REMOVAL_WINDOW`] after the
//! stale mark cleared, once at least [`MASS_REMOVAL_MIN`] and more than half
//! of the instances present at the recovery were removed (counted over
//! every event of the window, as etcd reports one removal per revision),
//! the removed instances are held for `mass_removal_grace` from their own
//! removal while their providers re-register; each leaves at its own
//! deadline, a re-registration (same id) replaces it at once, and every
//! delivery says what is held ([`Delivery::held`]). A removal of a single
//! instance is never delayed. The rule in full: `hold.rs`.

mod actions;
mod config;
mod hold;
#[cfg(test)]
mod hold_tests;
mod inspect;
mod live;
#[cfg(test)]
mod outage_tests;
mod resume;
mod session;
#[cfg(test)]
mod session_tests;
mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::error::RegistryError;
use crate::event::{Listing, RegistryEvent};
use crate::resolver::Token;

pub use actions::{Delivery, Feed, SubscriptionAction, TimerKind, To};
pub use config::{SubscriptionConfig, DEFAULT_PROBE_INTERVAL, RECONCILE_JITTER};
pub use inspect::WatchInspection;
pub use live::LiveState;
pub use resume::SubscriptionResume;
use state::AppSub;

/// The one probe of a registry that is down: per engine, not per app, so
/// the load on a recovering registry does not grow with the apps watched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Probe {
    #[default]
    Off,
    Armed(Token),
    InFlight(Token),
}

/// The registry subscriptions of one engine.
pub struct SubscriptionMachine {
    config: SubscriptionConfig,
    rng: StdRng,
    apps: BTreeMap<String, AppSub>,
    probe: Probe,
    next_token: Token,
    closed: bool,
    /// Whether a resume after an outage re-reads each app (false when the
    /// backend does it by itself).
    resume_resync: bool,
    /// Window a session loss spreads the re-subscriptions over.
    session_spread: Duration,
    /// When the latest event of a current watch arrived (`inspect.rs`).
    last_event: Option<Instant>,
}

/// What an input does to one app, with the machine's shared parts.
pub(crate) struct Ctx<'a> {
    config: &'a SubscriptionConfig,
    rng: &'a mut StdRng,
    next_token: &'a mut Token,
    resume_resync: bool,
    app: &'a str,
    out: &'a mut Vec<SubscriptionAction>,
}

impl Ctx<'_> {
    fn token(&mut self) -> Token {
        let t = *self.next_token;
        *self.next_token = self.next_token.wrapping_add(1).max(1);
        t
    }

    fn push(&mut self, action: SubscriptionAction) {
        self.out.push(action);
    }

    fn arm(&mut self, delay: Duration, kind: TimerKind) -> Token {
        let token = self.token();
        let app = self.app.to_string();
        self.push(SubscriptionAction::ArmTimer {
            app,
            token,
            delay,
            kind,
        });
        token
    }

    fn cancel(&mut self, token: Option<Token>) {
        if let Some(token) = token {
            self.push(SubscriptionAction::Cancel { token });
        }
    }

    /// The periodic resync delay, jittered; `None` when disabled.
    fn reconcile_delay(&mut self) -> Option<Duration> {
        let interval = self.config.reconcile_interval;
        if interval.is_zero() {
            return None;
        }
        Some(crate::jitter::spread_around(
            interval,
            RECONCILE_JITTER,
            &mut *self.rng,
        ))
    }
}

impl SubscriptionMachine {
    /// A machine with `config`, its RNG seeded by `seed`.
    pub fn new(config: SubscriptionConfig, seed: u64) -> Self {
        Self {
            config,
            rng: StdRng::seed_from_u64(seed),
            apps: BTreeMap::new(),
            probe: Probe::Off,
            next_token: 1,
            closed: false,
            resume_resync: true,
            session_spread: crate::registrar::DEFAULT_SESSION_SPREAD,
            last_event: None,
        }
    }

    /// Tells the machine whether the backend re-reads every app in full on
    /// each resume after an outage by itself (as etcd does; see
    /// [`crate::backend::Registry::rereads_on_resume`]). If it does, the
    /// machine's own resume resync would be a second full read per app per
    /// outage and is skipped; the periodic resync stays.
    pub fn with_backend_rereads_on_resume(mut self, rereads: bool) -> Self {
        self.resume_resync = !rereads;
        self
    }

    /// The machine's configuration.
    pub fn config(&self) -> &SubscriptionConfig {
        &self.config
    }

    /// Apps with at least one subscriber.
    pub fn apps(&self) -> impl Iterator<Item = &str> {
        self.apps.keys().map(String::as_str)
    }

    /// Since when `app`'s state is stale, if it is.
    pub fn stale_since(&self, app: &str) -> Option<Instant> {
        self.apps.get(app).and_then(AppSub::stale_since)
    }

    /// The whole state of `app` as delivered last (a Reset at the latest
    /// delivery's version), for a subscriber whose queue fell too far
    /// behind; `None` before the first delivery.
    pub fn full_delivery(&self, app: &str) -> Option<Delivery> {
        self.apps.get(app)?.full(self.config.mass_removal_grace)
    }

    /// Instances `app`'s subscribers see (registry and held ones): the size
    /// of a Reset of the app (0 when not subscribed).
    pub fn app_len(&self, app: &str) -> usize {
        self.apps.get(app).map_or(0, AppSub::len)
    }

    /// Whether `token` is the current watch of `app` (its stream is read).
    pub fn is_current_watch(&self, app: &str, token: Token) -> bool {
        self.apps
            .get(app)
            .is_some_and(|a| a.watch_token() == Some(token))
    }

    /// Runs `f` on `app` (if subscribed), then keeps the probe in step.
    fn with_app(
        &mut self,
        app: &str,
        now: Instant,
        f: impl FnOnce(&mut AppSub, &mut Ctx<'_>),
    ) -> Vec<SubscriptionAction> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        if let Some(sub) = self.apps.get_mut(app) {
            let mut ctx = Ctx {
                config: &self.config,
                rng: &mut self.rng,
                next_token: &mut self.next_token,
                resume_resync: self.resume_resync,
                app,
                out: &mut out,
            };
            f(sub, &mut ctx);
        }
        self.sync_probe(now, &mut out);
        out
    }

    /// Runs `f` on every app, then keeps the probe in step.
    fn each_app(
        &mut self,
        now: Instant,
        f: impl FnMut(&mut AppSub, &mut Ctx<'_>),
    ) -> Vec<SubscriptionAction> {
        let mut out = self.each_app_only(f);
        if !self.closed {
            self.sync_probe(now, &mut out);
        }
        out
    }

    /// Runs `f` on every app.
    fn each_app_only(
        &mut self,
        mut f: impl FnMut(&mut AppSub, &mut Ctx<'_>),
    ) -> Vec<SubscriptionAction> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        for (app, sub) in self.apps.iter_mut() {
            let mut ctx = Ctx {
                config: &self.config,
                rng: &mut self.rng,
                next_token: &mut self.next_token,
                resume_resync: self.resume_resync,
                app,
                out: &mut out,
            };
            f(sub, &mut ctx);
        }
        out
    }

    /// Arms the probe when an app waits longer than a probe interval to
    /// re-open, and drops it once no app waits.
    fn sync_probe(&mut self, now: Instant, out: &mut Vec<SubscriptionAction>) {
        let waiting = self.apps.values().any(AppSub::is_waiting);
        match self.probe {
            Probe::Armed(token) | Probe::InFlight(token) if !waiting => {
                out.push(SubscriptionAction::Cancel { token });
                self.probe = Probe::Off;
            }
            Probe::Off if waiting => {
                let mut best: Option<(Duration, &str)> = None;
                for (app, sub) in &self.apps {
                    let mut ctx = Ctx {
                        config: &self.config,
                        rng: &mut self.rng,
                        next_token: &mut self.next_token,
                        resume_resync: self.resume_resync,
                        app,
                        out,
                    };
                    if let Some(d) = sub.wants_probe(&mut ctx, now) {
                        let better = match best {
                            Some((b, _)) => d < b,
                            None => true,
                        };
                        if better {
                            best = Some((d, app));
                        }
                    }
                }
                if let Some((delay, app)) = best {
                    let token = self.next_token;
                    self.next_token = self.next_token.wrapping_add(1).max(1);
                    out.push(SubscriptionAction::ArmTimer {
                        app: app.to_string(),
                        token,
                        delay,
                        kind: TimerKind::Probe,
                    });
                    self.probe = Probe::Armed(token);
                }
            }
            _ => {}
        }
    }

    /// Subscriber `id` of `app` added (idempotent). The first one opens the
    /// watch; a later one gets the whole state and health at once.
    pub fn subscribe(&mut self, app: &str, id: u64, now: Instant) -> Vec<SubscriptionAction> {
        if self.closed {
            return Vec::new();
        }
        let fresh = !self.apps.contains_key(app);
        self.apps.entry(app.to_string()).or_default();
        self.with_app(app, now, |sub, ctx| {
            sub.subscribers.insert(id);
            if fresh {
                sub.open_watch(ctx);
            } else {
                sub.catch_up(id, now, ctx);
            }
        })
    }

    /// Subscriber `id` of `app` removed; the last one ends everything of the
    /// app (watch, calls, timers).
    pub fn unsubscribe(&mut self, app: &str, id: u64, now: Instant) -> Vec<SubscriptionAction> {
        let mut out = self.with_app(app, now, |sub, ctx| {
            sub.subscribers.remove(&id);
            if sub.subscribers.is_empty() {
                sub.cancel_all(ctx);
            }
        });
        if self.apps.get(app).is_some_and(|a| a.subscribers.is_empty()) {
            self.apps.remove(app);
            self.sync_probe(now, &mut out);
        }
        out
    }

    /// The `watch` call with `token` came back (its stream is held by the
    /// actor until [`SubscriptionAction::ReadStream`] says to read it).
    pub fn on_watch_opened(
        &mut self,
        app: &str,
        token: Token,
        result: Result<(), RegistryError>,
        now: Instant,
    ) -> Vec<SubscriptionAction> {
        self.with_app(app, now, |sub, ctx| {
            sub.on_watch_opened(token, result, now, ctx)
        })
    }

    /// An item of the stream of watch `token`.
    pub fn on_stream_item(
        &mut self,
        app: &str,
        token: Token,
        item: Result<RegistryEvent, RegistryError>,
        now: Instant,
    ) -> Vec<SubscriptionAction> {
        if item.is_ok() && self.is_current_watch(app, token) {
            self.last_event = Some(now);
        }
        self.with_app(app, now, |sub, ctx| {
            sub.on_stream_item(token, item, now, ctx)
        })
    }

    /// The stream of watch `token` ended.
    pub fn on_stream_end(
        &mut self,
        app: &str,
        token: Token,
        now: Instant,
    ) -> Vec<SubscriptionAction> {
        self.with_app(app, now, |sub, ctx| {
            if sub.watch_token() == Some(token) {
                let err = RegistryError::WatchEnded("stream ended".into());
                sub.on_watch_failed(&err, now, ctx);
            }
        })
    }

    /// The timer with `token` fired.
    pub fn on_timer(&mut self, app: &str, token: Token, now: Instant) -> Vec<SubscriptionAction> {
        if self.closed || self.probe != Probe::Armed(token) {
            return self.with_app(app, now, |sub, ctx| sub.on_timer(token, now, ctx));
        }
        // Probe an app that waits (the one the timer was armed for, if it
        // still does): a cheap `list` under the call deadline.
        let target = match self.apps.get(app) {
            Some(sub) if sub.is_waiting() => Some(app.to_string()),
            _ => self
                .apps
                .iter()
                .find(|(_, sub)| sub.is_waiting())
                .map(|(a, _)| a.clone()),
        };
        self.probe = Probe::Off;
        let mut out = Vec::new();
        if let Some(app) = target {
            let token = self.next_token;
            self.next_token = self.next_token.wrapping_add(1).max(1);
            self.probe = Probe::InFlight(token);
            out.push(SubscriptionAction::List {
                app,
                token,
                deadline: self.config.call_timeout,
            });
        }
        out
    }

    /// The `list` call with `token` came back.
    pub fn on_list_result(
        &mut self,
        app: &str,
        token: Token,
        result: Result<Listing, RegistryError>,
        now: Instant,
    ) -> Vec<SubscriptionAction> {
        if self.closed || self.probe != Probe::InFlight(token) {
            return self.with_app(app, now, |sub, ctx| {
                sub.on_list_result(token, result, now, ctx)
            });
        }
        self.probe = Probe::Off;
        let answers = result.is_ok();
        // The registry answers: every waiting app re-subscribes now. It does
        // not: the probe is armed again.
        self.each_app(now, |sub, ctx| {
            if answers {
                sub.on_registry_answers(ctx);
            }
        })
    }

    /// Shuts down: cancels everything; every later input is ignored.
    pub fn close(&mut self) -> Vec<SubscriptionAction> {
        let mut out = self.each_app_only(|sub, ctx| sub.cancel_all(ctx));
        if let Probe::Armed(token) | Probe::InFlight(token) = self.probe {
            out.push(SubscriptionAction::Cancel { token });
        }
        self.probe = Probe::Off;
        self.apps.clear();
        self.closed = true;
        out
    }
}
