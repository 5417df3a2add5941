//! Schedule steps applied to the simulated world and engine: registry
//! changes (pushed to the streams listening, or missed), registry and
//! stream faults, provider behaviour, subscriber changes, restarts and
//! shutdown.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use steadfast_core::{RegistryError, Token};

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
                self.world.app_mut(app).insert(inst.id.clone(), inst);
                self.changed(app, silent);
            }
            Step::Deregister { app, pick, silent } => {
                let m = self.world.app_mut(app);
                if let Some(id) = pick_key(m, pick) {
                    m.remove(&id);
                    self.changed(app, silent);
                }
            }
            Step::MassExpiry(app) => {
                let m = self.world.app_mut(app);
                let keep = m.keys().next().cloned();
                m.retain(|id, _| Some(id) == keep.as_ref());
                self.changed(app, false);
            }
            Step::Flip { app, pick, what } => {
                let m = self.world.app_mut(app);
                if let Some(id) = pick_key(m, pick) {
                    if let Some(inst) = m.get_mut(&id) {
                        World::flip(inst, what);
                    }
                    self.changed(app, false);
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
                    let snap = Item::Snap(self.world.snapshot(APPS[app % APPS.len()]));
                    self.push(token, snap, heal);
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
                let snap = Item::Snap(self.world.snapshot(&s.app.clone()));
                self.push(token, snap, Duration::ZERO);
            }
        }
    }

    /// The registry state of app index `app` changed: push it to every
    /// stream that is listening (unless the change is never notified).
    fn changed(&mut self, app: usize, silent: bool) {
        let name = APPS[app % APPS.len()];
        if silent {
            self.track.missed = true;
            return;
        }
        for token in self.streams_of(Some(name)) {
            if self.reg.streams.get(&token).is_some_and(|s| !s.silent) {
                let snap = Item::Snap(self.world.snapshot(name));
                self.push(token, snap, Duration::ZERO);
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
