//! Schedule steps applied to the simulated world and engine: registry
//! changes (pushed to the streams listening, or missed), registry and
//! stream faults, provider behaviour, subscriber changes, restarts and
//! shutdown.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use steadfast_core::{RegistryError, RegistryEvent, ServiceInstance, Token};

use super::sim::{Event, Item, Sim};
use super::steps::Step;
use super::world::{instance, latency, Behave, World, APPS, REGISTRY_LATENCY};

impl Sim {
    /// Runs one step of a schedule, then what it made due right now.
    pub fn step(&mut self, step: &Step) {
        self.note(|| format!("step {step:?}"));
        match *step {
            Step::Advance(d) => {
                let until = self.now + d;
                self.run_until(until);
            }
            Step::Register {
                app,
                host,
                rev,
                silent,
            } => {
                let inst = instance(APPS[app % APPS.len()], host, rev);
                self.world
                    .app_mut(app)
                    .insert(inst.id.clone(), inst.clone());
                self.changed(app, silent, vec![inst], Vec::new());
            }
            Step::Deregister { app, pick, silent } => {
                let m = self.world.app_mut(app);
                if let Some(id) = pick_key(m, pick) {
                    m.remove(&id);
                    self.changed(app, silent, Vec::new(), vec![id]);
                }
            }
            Step::MassExpiry(app) => {
                let m = self.world.app_mut(app);
                let keep = m.keys().next().cloned();
                let gone: Vec<String> = m
                    .keys()
                    .filter(|id| Some(*id) != keep.as_ref())
                    .cloned()
                    .collect();
                m.retain(|id, _| Some(id) == keep.as_ref());
                if gone.is_empty() {
                    // Nothing expired: the source re-sends its state at the
                    // version it is at (not newer than what was pushed).
                    self.resend(app);
                } else {
                    self.changed(app, false, Vec::new(), gone);
                }
            }
            Step::Flip { app, pick, what } => {
                let m = self.world.app_mut(app);
                if let Some(id) = pick_key(m, pick) {
                    if let Some(inst) = m.get_mut(&id) {
                        World::flip(inst, what);
                        let inst = inst.clone();
                        self.changed(app, false, vec![inst], Vec::new());
                    }
                }
            }
            Step::RegistryDown(kind) => {
                self.track.reg_faulted = true;
                self.world.down = Some(kind);
                for token in self.streams_of(None) {
                    if self.rng.gen_bool(0.5) {
                        self.push(token, Item::End, Duration::ZERO);
                    } else {
                        let err = RegistryError::Unavailable("frozen".into());
                        self.push(token, Item::Err(err), Duration::ZERO);
                        if let Some(s) = self.reg.streams.get_mut(&token) {
                            s.silent = true;
                        }
                    }
                }
            }
            Step::RegistryUp => self.registry_up(),
            Step::StreamGlitch(app) => {
                self.track.reg_faulted = true;
                for token in self.streams_of(Some(APPS[app % APPS.len()])) {
                    let err = RegistryError::Unavailable("glitch".into());
                    self.push(token, Item::Err(err), Duration::ZERO);
                    let heal = Duration::from_millis(self.rng.gen_range(50..=2_000));
                    // It heals with a re-read of the app at its version now.
                    let reset = Item::Event(self.world.reset(APPS[app % APPS.len()]));
                    self.push(token, reset, heal);
                }
            }
            Step::StreamEnd(app) | Step::StreamPanic(app) => {
                self.track.reg_faulted = true;
                for token in self.streams_of(Some(APPS[app % APPS.len()])) {
                    if matches!(step, Step::StreamPanic(_)) {
                        let err = RegistryError::Panicked("stream panicked".into());
                        self.push(token, Item::Err(err), Duration::ZERO);
                    }
                    self.push(token, Item::End, Duration::ZERO);
                }
            }
            Step::Provider { app, host, behave } => {
                let id = instance(APPS[app % APPS.len()], host, 0).id;
                if behave == Behave::Ok {
                    self.world.behave.remove(&id);
                } else {
                    self.world.behave.insert(id, behave);
                }
            }
            Step::Subscribe(n) => self.subscribe(n),
            Step::Unsubscribe(n) => self.unsubscribe(n),
            Step::Restart(t) => self.restart(t),
            Step::Lose(t) => self.lose_next(t),
            Step::Shutdown => self.shutdown(),
        }
        let now = self.now;
        self.run_until(now);
        if self.in_flight == 0 {
            self.check();
        }
        if matches!(step, Step::Shutdown) {
            self.poke_closed();
        }
    }

    /// The registry answers again: every silent stream catches up.
    pub fn registry_up(&mut self) {
        self.world.down = None;
        for token in self.streams_of(None) {
            let Some(s) = self.reg.streams.get_mut(&token) else {
                continue;
            };
            if s.silent {
                s.silent = false;
                let app = s.app.clone();
                let reset = Item::Event(self.world.reset(&app));
                self.push(token, reset, Duration::ZERO);
            }
        }
    }

    /// The registry state of app index `app` changed (`upserts` put,
    /// `removals` deleted): its version grows, and every stream that is
    /// listening gets the change as a Delta at that version, or now and then
    /// a Reset of the whole state (a source that re-read the app), unless the
    /// change is never notified.
    fn changed(
        &mut self,
        app: usize,
        silent: bool,
        upserts: Vec<ServiceInstance>,
        removals: Vec<String>,
    ) {
        let name = APPS[app % APPS.len()];
        let (base, version) = self.world.bump(name);
        if silent {
            self.track.missed = true;
            return;
        }
        let upserts: Vec<_> = upserts.iter().map(|i| self.world.decode(i)).collect();
        let removals: Vec<Arc<str>> = removals.iter().map(|id| Arc::from(id.as_str())).collect();
        for token in self.streams_of(Some(name)) {
            if self.reg.streams.get(&token).is_some_and(|s| !s.silent) {
                let event = if self.rng.gen_bool(0.2) {
                    self.world.reset(name)
                } else {
                    self.stats.deltas += 1;
                    RegistryEvent::Delta {
                        base,
                        version,
                        upserts: upserts.clone(),
                        removals: removals.clone(),
                    }
                };
                self.push(token, Item::Event(event), Duration::ZERO);
            }
        }
    }

    /// The streams of app index `app` get its state again at the current
    /// version (nothing changed).
    fn resend(&mut self, app: usize) {
        let name = APPS[app % APPS.len()];
        for token in self.streams_of(Some(name)) {
            if self.reg.streams.get(&token).is_some_and(|s| !s.silent) {
                let reset = Item::Event(self.world.reset(name));
                self.push(token, reset, Duration::ZERO);
            }
        }
    }

    /// Open streams (of `app`, or all).
    fn streams_of(&self, app: Option<&str>) -> Vec<Token> {
        self.reg
            .streams
            .iter()
            .filter(|(_, s)| match app {
                Some(a) => s.app == a,
                None => true,
            })
            .map(|(t, _)| *t)
            .collect()
    }

    /// Queues `item` on stream `token`, after `extra`, in stream order.
    pub fn push(&mut self, token: Token, item: Item, extra: Duration) {
        let lat = latency(&mut self.rng, REGISTRY_LATENCY);
        let now = self.now;
        let Some(s) = self.reg.streams.get_mut(&token) else {
            return;
        };
        if s.ended {
            return;
        }
        s.ended = matches!(item, Item::End);
        let at = s.last_at.max(now + extra + lat);
        s.last_at = at;
        let app = s.app.clone();
        self.schedule(at, Event::Item { app, token, item });
    }
}

/// The `pick`-th key of `m` (modulo its length).
fn pick_key<V>(m: &BTreeMap<String, V>, pick: usize) -> Option<String> {
    (!m.is_empty())
        .then(|| m.keys().nth(pick % m.len()).cloned())
        .flatten()
}
