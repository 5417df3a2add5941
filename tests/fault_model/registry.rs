//! The registry actor's shell, as in `steadfast-actors/src/registry_actor.rs`:
//! it delivers the [`SubscriptionMachine`]'s inputs (subscriber changes,
//! watch opened or failed, stream items and ends, timers, list results,
//! close; a replacement resumes) and performs its actions against the simulated registry.
//! Every call, stream and timer is a handle keyed by its token; a cancelled
//! one never reaches the machine, like a cancelled actix future.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use steadfast_core::{RegistryError, SubscriptionMachine, Token};
use steadfast_core::{SubscriptionAction, TimerKind, To};

use super::sim::{Event, Item, Msg, Sim};
use super::world::CallOutcome;

/// What a token of the registry actor stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handle {
    /// A timer of this kind.
    Timer(TimerKind),
    /// A `watch` open call.
    Open,
    /// A `list` call.
    List,
    /// A stream being read.
    Stream,
}

/// The registry side of a stream being read.
pub struct Stream {
    /// App watched.
    pub app: String,
    /// When its latest item arrives (items keep their order).
    pub last_at: Duration,
    /// The registry is down: changes are not pushed until it answers again.
    pub silent: bool,
    /// Its end was pushed: nothing follows.
    pub ended: bool,
}

/// The registry actor.
pub struct RegShell {
    /// The machine.
    pub m: SubscriptionMachine,
    /// Timers, calls and streams under way, with their app.
    pub handles: BTreeMap<Token, (String, Handle)>,
    /// Streams being read.
    pub streams: BTreeMap<Token, Stream>,
    /// Resolver ids subscribed per app.
    pub subscribers: BTreeMap<String, BTreeSet<u64>>,
    /// A stream just opened, until the machine says to read it.
    pub opened: Option<Token>,
    /// Shut down: ignores every message.
    pub terminated: bool,
}

impl RegShell {
    /// A shell around `m`.
    pub fn new(m: SubscriptionMachine) -> Self {
        Self {
            m,
            handles: BTreeMap::new(),
            streams: BTreeMap::new(),
            subscribers: BTreeMap::new(),
            opened: None,
            terminated: false,
        }
    }
}

impl Sim {
    /// Performs the subscription machine's actions.
    pub fn reg_perform(&mut self, actions: Vec<SubscriptionAction>) {
        self.track.reg_dirty |= !actions.is_empty();
        if self.track.all_closed && !actions.is_empty() {
            self.violate(format!(
                "[after-shutdown] the subscription machine acted: {actions:?}"
            ));
        }
        let mut gone: Vec<(String, u64)> = Vec::new();
        for action in actions {
            self.note(|| format!("  registry: {action:?}"));
            match action {
                SubscriptionAction::OpenWatch {
                    app,
                    token,
                    deadline,
                } => {
                    self.track.issued_reg(&app, token);
                    self.stats.opens += 1;
                    self.reg.handles.insert(token, (app.clone(), Handle::Open));
                    let (after, result) = self.call(deadline);
                    self.schedule(self.now + after, Event::OpenDone { app, token, result });
                }
                SubscriptionAction::ReadStream { app, token } => {
                    if self.reg.opened.take() != Some(token) {
                        continue;
                    }
                    self.reg
                        .handles
                        .insert(token, (app.clone(), Handle::Stream));
                    let silent = self.world.down.is_some();
                    let stream = super::registry::Stream {
                        app: app.clone(),
                        last_at: self.now,
                        silent,
                        ended: false,
                    };
                    self.reg.streams.insert(token, stream);
                    if !silent {
                        // The first item after a (re)subscribe: the whole state.
                        let reset = Item::Event(self.world.reset(&app));
                        self.push(token, reset, Duration::ZERO);
                    }
                }
                SubscriptionAction::List {
                    app,
                    token,
                    deadline,
                } => {
                    self.track.issued_reg(&app, token);
                    self.reg.handles.insert(token, (app.clone(), Handle::List));
                    let (after, result) = self.call(deadline);
                    self.schedule(self.now + after, Event::ListDone { app, token, result });
                }
                SubscriptionAction::ArmTimer {
                    app,
                    token,
                    delay,
                    kind,
                } => {
                    self.track.issued_reg(&app, token);
                    self.stats.probes += u64::from(kind == TimerKind::Probe);
                    self.reg
                        .handles
                        .insert(token, (app.clone(), Handle::Timer(kind)));
                    self.schedule(self.now + delay, Event::RegTimer { app, token });
                }
                SubscriptionAction::Cancel { token } => {
                    self.reg.handles.remove(&token);
                    self.reg.streams.remove(&token);
                }
                SubscriptionAction::Deliver { app, to, delivery } => {
                    for id in self.targets(&app, to) {
                        if self.resolvers.contains_key(&id) {
                            let delivery = delivery.clone();
                            self.send(Msg::Delivery { to: id, delivery });
                        } else {
                            gone.push((app.clone(), id));
                        }
                    }
                }
                SubscriptionAction::Health {
                    app,
                    to,
                    stale_since,
                } => {
                    for id in self.targets(&app, to) {
                        self.send(Msg::Health {
                            to: id,
                            stale_since,
                        });
                    }
                }
                // Status only (the model's resolvers do not report Pending).
                SubscriptionAction::SubscribeFailing { .. } => {}
                SubscriptionAction::Reconciled { .. } => self.stats.reconciled += 1,
                SubscriptionAction::IgnoredOlder { .. } => self.stats.ignored_older += 1,
                SubscriptionAction::Gap { .. } => self.stats.gaps += 1,
                SubscriptionAction::Holding { .. } => self.stats.holds += 1,
            }
        }
        for (app, id) in gone {
            self.reg_remove_subscriber(&app, id);
        }
    }

    /// A registry call under `deadline`: when it ends and with what.
    fn call(&mut self, deadline: Duration) -> (Duration, Result<(), RegistryError>) {
        match self.world.registry_call(&mut self.rng) {
            CallOutcome::After(d, r) if d < deadline => (d, r),
            CallOutcome::After(..) | CallOutcome::Hang => (deadline, Err(RegistryError::Timeout)),
        }
    }

    fn targets(&self, app: &str, to: To) -> Vec<u64> {
        let Some(subs) = self.reg.subscribers.get(app) else {
            return Vec::new();
        };
        match to {
            To::All => subs.iter().copied().collect(),
            To::One(id) => subs.get(&id).copied().into_iter().collect(),
        }
    }

    /// Whether `token` is a live handle of kind `kind`.
    fn live(&self, token: Token, kind: Handle) -> bool {
        self.reg
            .handles
            .get(&token)
            .is_some_and(|(_, h)| *h == kind)
    }

    /// A resolver's `WatchApp`.
    pub fn watch_app(&mut self, app: String, id: u64) {
        if self.reg.terminated {
            return;
        }
        self.reg
            .subscribers
            .entry(app.clone())
            .or_default()
            .insert(id);
        let now = self.at();
        let actions = self.reg.m.subscribe(&app, id, now);
        self.reg_perform(actions);
    }

    /// A resolver's `UnwatchApp`, or a subscriber found gone.
    pub fn reg_remove_subscriber(&mut self, app: &str, id: u64) {
        if let Some(subs) = self.reg.subscribers.get_mut(app) {
            subs.remove(&id);
            if subs.is_empty() {
                self.reg.subscribers.remove(app);
            }
        }
        let now = self.at();
        let actions = self.reg.m.unsubscribe(app, id, now);
        self.reg_perform(actions);
        if !self.reg.m.apps().any(|a| a == app) {
            self.track.forget_app(app);
        }
    }

    /// The coordinator's `Shutdown` to the registry actor.
    pub fn reg_shutdown(&mut self) {
        self.reg.terminated = true;
        let actions = self.reg.m.close();
        self.reg_perform(actions);
        if !self.reg.handles.is_empty() {
            let left: Vec<_> = self.reg.handles.iter().collect();
            self.violate(format!(
                "[after-shutdown] close left registry handles: {left:?}"
            ));
        }
        self.reg.handles.clear();
        self.reg.streams.clear();
        self.reg.subscribers.clear();
    }

    /// A supervised restart, as the actor does it: every call, stream and
    /// timer is gone, and a fresh machine (same config, a new seed) resumes
    /// from the old one's resume point for the subscribers the shell holds.
    pub fn reg_restart(&mut self) {
        if self.reg.terminated {
            return;
        }
        self.reg.handles.clear();
        self.reg.streams.clear();
        self.reg.opened = None;
        self.track.reg_dirty = true;
        let now = self.at();
        let point = self.reg.m.resume_point();
        let seed = self.seed_for(u64::MAX - self.stats.restarts);
        self.reg.m = SubscriptionMachine::new(*self.reg.m.config(), seed);
        let subscribers: Vec<(String, u64)> = self
            .reg
            .subscribers
            .iter()
            .flat_map(|(app, ids)| ids.iter().map(move |id| (app.clone(), *id)))
            .collect();
        let actions = self.reg.m.resume(point, subscribers, now);
        self.reg_perform(actions);
    }

    /// A registry timer fired.
    pub fn reg_timer(&mut self, app: String, token: Token) {
        let live = matches!(self.reg.handles.get(&token), Some((_, Handle::Timer(_))));
        if !live {
            return;
        }
        self.reg.handles.remove(&token);
        self.track.reg_dirty = true;
        let now = self.at();
        let actions = self.reg.m.on_timer(&app, token, now);
        self.reg_perform(actions);
    }

    /// A `watch` call returned.
    pub fn open_done(&mut self, app: String, token: Token, result: Result<(), RegistryError>) {
        if !self.live(token, Handle::Open) {
            return;
        }
        self.reg.handles.remove(&token);
        self.track.reg_dirty = true;
        if result.is_ok() {
            self.reg.opened = Some(token);
        }
        let now = self.at();
        let actions = self.reg.m.on_watch_opened(&app, token, result, now);
        self.reg_perform(actions);
        self.reg.opened = None;
    }

    /// A `list` call returned; an answer carries the registry's state now.
    pub fn list_done(&mut self, app: String, token: Token, result: Result<(), RegistryError>) {
        if !self.live(token, Handle::List) {
            return;
        }
        self.reg.handles.remove(&token);
        self.track.reg_dirty = true;
        let listed = self.world.listing(&app);
        let result = result.map(|()| listed.clone());
        let now = self.at();
        let before = self.reg_version(&app);
        let actions = self.reg.m.on_list_result(&app, token, result, now);
        self.track_listing(&app, before, &listed, &actions);
        self.reg_perform(actions);
    }

    /// A stream item arrived.
    pub fn stream_item(&mut self, app: String, token: Token, item: Item) {
        if !self.live(token, Handle::Stream) || !self.reg.m.is_current_watch(&app, token) {
            return;
        }
        let now = self.at();
        let actions = match item {
            Item::Event(event) => {
                let before = self.reg_version(&app);
                let actions = self
                    .reg
                    .m
                    .on_stream_item(&app, token, Ok(event.clone()), now);
                self.track_event(&app, before, &event, &actions);
                actions
            }
            Item::Err(e) => self.reg.m.on_stream_item(&app, token, Err(e), now),
            Item::End => {
                self.reg.handles.remove(&token);
                self.reg.streams.remove(&token);
                self.track.reg_dirty = true;
                self.reg.m.on_stream_end(&app, token, now)
            }
        };
        self.reg_perform(actions);
    }
}
