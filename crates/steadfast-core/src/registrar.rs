//! [`RegistrarMachine`]: the sans-IO failback registrar of one engine
//! (Dubbo's FailbackRegistry, done right). It keeps what the engine wants
//! registered as the source of truth, the latest intent per key
//! (app, instance id), and drives the registry towards it.
//!
//! Rules:
//! - exactly one operation per key is pending at any time: a call in flight
//!   OR a retry timer, never both, never two;
//! - a failure is retried on the one retry primitive ([`Recover`]; default
//!   1 s doubling to 30 s, +0-25 % jitter, unlimited); a success resets it;
//! - while keys wait on their backoff because the registry did not answer
//!   (a retryable error), the registrar probes it with the engine's probe
//!   ([`RecoverPolicy::probe_interval`](crate::recover::RecoverPolicy),
//!   [`Recover::probe_delay`]): one cheap `list` per registrar every probe
//!   interval (1 s, jittered), at most one in flight, none when no key
//!   needs one (nothing pending, or every next attempt comes sooner). A
//!   probe that fails confirms the outage for the keys waiting; the next
//!   probe that answers, or any call that lands, wakes every confirmed key
//!   ([`Recover::on_probe_ok`]): each issues again after a uniform random
//!   delay within the wake window (the smaller of the session spread and
//!   half the probe interval), so recovery is noticed within about a
//!   second whatever the backoff grew to, and a thousand keys do not come
//!   back as one burst. A key that failed while a probe answered (the
//!   registry reads but refuses this write) is not woken: it keeps its
//!   backoff, so a probe never turns a refusal into a call per second;
//! - a new intent replaces the old one (latest wins: a register cancels a
//!   pending unregister and vice versa). While a call is in flight the
//!   machine waits for it (it may land) and then issues the latest intent at
//!   once; while a retry timer waits, the timer is cancelled and the new
//!   intent issued now;
//! - on a registry session loss every key whose intent is registered is
//!   registered again, each after a uniform random delay within the spread
//!   window, so a thousand keys do not come back as one burst;
//! - a key whose intent is unregistered is forgotten once that landed, so
//!   memory is bounded by what is registered; a stale token is ignored;
//! - interface -> app mapping entries (`map`) are keys like any other, so
//!   they get the same failback and session-loss restore; they are
//!   persistent, so shutdown leaves them.
//!
//! Time and randomness are inputs; the shell performs the
//! [`RegistrarAction`]s (each call as its own future, under `deadline`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::error::{ErrorClass, RegistryError};
use crate::model::ServiceInstance;
use crate::pending::RegistryFailure;
use crate::recover::{Recover, Retry};

mod probe;
#[cfg(test)]
mod probe_tests;
mod session;
pub use session::RegistrarResume;
#[cfg(test)]
mod tests;
mod types;

pub use types::{
    RecordKind, RegistrarAction, RegistrarConfig, RegistrarOp, RegistrarToken, RegistrationKey,
    RegistrationState, DEFAULT_SESSION_SPREAD,
};

/// What the engine wants for a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intent {
    /// The instance record must be registered.
    Registered(ServiceInstance),
    /// The instance record must be gone.
    Unregistered(ServiceInstance),
    /// The mapping entry "`app` serves `interface`" must exist.
    Mapped {
        /// The interface.
        interface: String,
        /// The app serving it.
        app: String,
    },
    /// The mapping entry must be gone.
    Unmapped {
        /// The interface.
        interface: String,
        /// The app.
        app: String,
    },
}

impl Intent {
    fn op(&self) -> RegistrarOp {
        match self {
            Intent::Registered(i) => RegistrarOp::Register(i.clone()),
            Intent::Unregistered(i) => RegistrarOp::Unregister(i.clone()),
            Intent::Mapped { interface, app } => RegistrarOp::Map {
                interface: interface.clone(),
                app: app.clone(),
            },
            Intent::Unmapped { interface, app } => RegistrarOp::Unmap {
                interface: interface.clone(),
                app: app.clone(),
            },
        }
    }

    /// The key the intent is for.
    pub fn key(&self) -> RegistrationKey {
        match self {
            Intent::Registered(i) | Intent::Unregistered(i) => RegistrationKey::of(i),
            Intent::Mapped { interface, app } | Intent::Unmapped { interface, app } => {
                RegistrationKey::mapping(interface, app)
            }
        }
    }

    /// Whether the intent is to have the record (registered or mapped).
    pub fn is_registered(&self) -> bool {
        matches!(self, Intent::Registered(_) | Intent::Mapped { .. })
    }
}

/// What the probes say about a key waiting on its backoff.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Probed {
    /// No probe failed since the key's failure: the probe is wanted.
    #[default]
    Unconfirmed,
    /// A probe failed while the key waited: the registry is down; the next
    /// sign that it answers wakes the key.
    Down,
    /// The registry answered since the key failed (it was woken, or a
    /// probe answered while its write was failing): no probe is wanted
    /// until the key fails again.
    Answered,
}

/// The one probe of the registrar: armed, in flight, or neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Probe {
    #[default]
    Off,
    Armed(RegistrarToken),
    InFlight(RegistrarToken),
}

/// The one pending operation of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    /// Nothing pending (settled, or given up).
    Idle,
    /// A call is under way, performing `RegistrarOp`.
    InFlight(RegistrarToken, RegistrarOp),
    /// A retry (or a session re-registration) waits on this timer.
    Waiting(RegistrarToken),
}

#[derive(Debug)]
struct Entry {
    intent: Intent,
    op: Op,
    recover: Recover,
    last_error: Option<RegistryError>,
    /// The latest intent landed and nothing is pending.
    settled: bool,
    gave_up: bool,
    /// The call in flight must be issued again once back (a session loss
    /// happened meanwhile).
    reissue: bool,
    /// What the probes say while the key waits on its backoff.
    probed: Probed,
}

impl Entry {
    fn new(intent: Intent, op: Op, reissue: bool) -> Self {
        Self {
            intent,
            op,
            recover: Recover::new(),
            last_error: None,
            settled: false,
            gave_up: false,
            reissue,
            probed: Probed::Unconfirmed,
        }
    }

    /// Whether the key waits on its backoff because the registry did not
    /// answer (a retryable error) and no sign of it answering came since.
    fn wants_probe(&self) -> bool {
        matches!(self.op, Op::Waiting(_))
            && !self.gave_up
            && self.probed != Probed::Answered
            && self
                .last_error
                .as_ref()
                .is_some_and(|e| e.class() == ErrorClass::Transient)
    }
}

/// The failback registrar of one engine.
#[derive(Debug)]
pub struct RegistrarMachine {
    config: RegistrarConfig,
    keys: BTreeMap<RegistrationKey, Entry>,
    next_token: RegistrarToken,
    closed: bool,
    probe: Probe,
}

impl RegistrarMachine {
    /// A registrar with `config`.
    pub fn new(config: RegistrarConfig) -> Self {
        Self {
            config,
            keys: BTreeMap::new(),
            next_token: 1,
            closed: false,
            probe: Probe::Off,
        }
    }

    /// The registrar's configuration.
    pub fn config(&self) -> &RegistrarConfig {
        &self.config
    }

    fn token(&mut self) -> RegistrarToken {
        let t = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        t
    }

    /// Issues the entry's intent now.
    fn issue(&mut self, key: &RegistrationKey, out: &mut Vec<RegistrarAction>) {
        let token = self.token();
        let deadline = self.config.call_timeout;
        let Some(e) = self.keys.get_mut(key) else {
            return;
        };
        let op = e.intent.op();
        e.op = Op::InFlight(token, op.clone());
        e.settled = false;
        e.gave_up = false;
        out.push(RegistrarAction::Call {
            key: key.clone(),
            token,
            op,
            deadline,
        });
    }

    /// Wants `instance` registered (latest intent wins).
    pub fn register(&mut self, instance: ServiceInstance) -> Vec<RegistrarAction> {
        self.intend(Intent::Registered(instance))
    }

    /// Wants `instance` unregistered (latest intent wins).
    pub fn unregister(&mut self, instance: ServiceInstance) -> Vec<RegistrarAction> {
        self.intend(Intent::Unregistered(instance))
    }

    /// Wants the mapping entry "`app` serves `interface`" to exist (latest
    /// intent wins; restored after a session loss like any registration).
    pub fn map(&mut self, interface: &str, app: &str) -> Vec<RegistrarAction> {
        self.intend(Intent::Mapped {
            interface: interface.to_string(),
            app: app.to_string(),
        })
    }

    /// Records `intent` as the latest for its key and drives towards it.
    pub fn intend(&mut self, intent: Intent) -> Vec<RegistrarAction> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        let key = intent.key();
        let Some(e) = self.keys.get_mut(&key) else {
            self.keys
                .insert(key.clone(), Entry::new(intent, Op::Idle, false));
            self.issue(&key, &mut out);
            return out;
        };
        if e.intent == intent && e.settled {
            // Already there: nothing to call.
            out.push(RegistrarAction::Settled {
                key,
                registered: intent.is_registered(),
            });
            return out;
        }
        e.intent = intent;
        match e.op.clone() {
            // The call may land: wait for it, then issue the latest intent.
            Op::InFlight(..) => {}
            Op::Waiting(token) => {
                out.push(RegistrarAction::CancelTimer { token });
                self.issue(&key, &mut out);
            }
            Op::Idle => self.issue(&key, &mut out),
        }
        self.drop_probe_if_unwanted(&mut out);
        out
    }

    /// The call with `token` of `key` came back.
    pub fn on_result(
        &mut self,
        key: &RegistrationKey,
        token: RegistrarToken,
        result: Result<(), RegistryError>,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Vec<RegistrarAction> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        let policy = self.config.recover;
        let Some(e) = self.keys.get_mut(key) else {
            return out;
        };
        let done = match &e.op {
            Op::InFlight(t, op) if *t == token => op.clone(),
            _ => return out,
        };
        e.op = Op::Idle;
        let registering = done.is_register();
        let superseded = e.intent.op() != done || std::mem::take(&mut e.reissue);
        match result {
            Ok(()) => {
                e.recover.on_success();
                e.last_error = None;
                e.probed = Probed::Unconfirmed;
                if superseded {
                    self.issue(key, &mut out);
                } else {
                    let registered = e.intent.is_registered();
                    e.settled = true;
                    if !registered {
                        self.keys.remove(key);
                    }
                    out.push(RegistrarAction::Settled {
                        key: key.clone(),
                        registered,
                    });
                }
                // The registry answered: every key waiting for it goes now.
                self.wake(rng, &mut out);
            }
            Err(err) => {
                let retry = e.recover.on_failure(&policy, err.class(), now, rng);
                e.last_error = Some(err.clone());
                if e.probed == Probed::Answered {
                    e.probed = Probed::Unconfirmed;
                }
                let failure = RegistryFailure {
                    since: e.recover.down_since().unwrap_or(now),
                    attempts: e.recover.failures(),
                    last_error: err,
                };
                if superseded {
                    // A newer intent waited for this call: issue it now.
                    out.push(RegistrarAction::Failed {
                        key: key.clone(),
                        registering,
                        failure,
                        retry: Some(Duration::ZERO),
                    });
                    self.issue(key, &mut out);
                    self.sync_probe(now, rng, &mut out);
                    return out;
                }
                match retry {
                    Retry::After(delay) => {
                        let token = self.token();
                        if let Some(e) = self.keys.get_mut(key) {
                            e.op = Op::Waiting(token);
                        }
                        out.push(RegistrarAction::Failed {
                            key: key.clone(),
                            registering,
                            failure,
                            retry: Some(delay),
                        });
                        out.push(RegistrarAction::ArmTimer {
                            key: key.clone(),
                            token,
                            delay,
                        });
                    }
                    Retry::GiveUp => {
                        if let Some(e) = self.keys.get_mut(key) {
                            e.gave_up = true;
                        }
                        out.push(RegistrarAction::Failed {
                            key: key.clone(),
                            registering,
                            failure,
                            retry: None,
                        });
                    }
                }
            }
        }
        self.sync_probe(now, rng, &mut out);
        out
    }

    /// The timer with `token` of `key` fired: issue the latest intent.
    pub fn on_timer(
        &mut self,
        key: &RegistrationKey,
        token: RegistrarToken,
    ) -> Vec<RegistrarAction> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.op == Op::Waiting(token))
        {
            self.issue(key, &mut out);
        }
        self.drop_probe_if_unwanted(&mut out);
        out
    }

    /// Stops for good: every timer is cancelled, later inputs are ignored.
    pub fn close(&mut self) -> Vec<RegistrarAction> {
        self.closed = true;
        let mut out: Vec<RegistrarAction> = self
            .keys
            .values()
            .filter_map(|e| match e.op {
                Op::Waiting(token) => Some(RegistrarAction::CancelTimer { token }),
                _ => None,
            })
            .collect();
        if let Probe::Armed(token) = std::mem::take(&mut self.probe) {
            out.push(RegistrarAction::CancelTimer { token });
        }
        self.keys.clear();
        out
    }

    /// Where `key` stands (`None`: unknown, or unregistered and forgotten).
    pub fn state(&self, key: &RegistrationKey) -> Option<RegistrationState> {
        let e = self.keys.get(key)?;
        let registering = e.intent.is_registered();
        Some(if e.gave_up {
            RegistrationState::GaveUp {
                registering,
                error: e
                    .last_error
                    .clone()
                    .unwrap_or_else(|| RegistryError::Rejected("gave up".into())),
            }
        } else if e.settled && registering {
            RegistrationState::Registered
        } else {
            RegistrationState::Pending {
                registering,
                attempts: e.recover.failures(),
                last_error: e.last_error.clone(),
            }
        })
    }

    /// Every key known, with where it stands.
    pub fn states(&self) -> Vec<(RegistrationKey, RegistrationState)> {
        self.keys
            .keys()
            .filter_map(|k| self.state(k).map(|s| (k.clone(), s)))
            .collect()
    }

    /// Keys remembered (registered, or with an operation pending).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Operations pending (calls in flight plus timers waiting).
    pub fn pending(&self) -> usize {
        self.keys.values().filter(|e| e.op != Op::Idle).count()
    }
}
