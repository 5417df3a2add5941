//! The registrar's probe of a registry that does not answer: the engine's
//! probe ([`Recover::probe_delay`](crate::recover::Recover::probe_delay)
//! for the cadence, [`Recover::on_probe_ok`](crate::recover::Recover::on_probe_ok)
//! on the keys it wakes), one per registrar, at most one in flight, and
//! only while a key waits on a backoff longer than the probe interval
//! because the registry did not answer.

use std::time::{Duration, Instant};

use rand::Rng;

use super::{Entry, Op, Probe, Probed, RegistrarMachine};
use crate::error::RegistryError;
use crate::jitter::uniform_delay;
use crate::registrar::{RegistrarAction, RegistrarToken, RegistrationKey};

impl RegistrarMachine {
    /// Of the keys that want a probe, the one whose next attempt is due
    /// last: a probe is worth it when it comes before that attempt.
    fn probe_candidate(&self) -> Option<(&RegistrationKey, &Entry)> {
        self.keys
            .iter()
            .filter(|(_, e)| e.wants_probe())
            .max_by_key(|(_, e)| e.recover.due())
    }

    /// Window the keys woken by the registry answering again issue within:
    /// the smaller of the session spread and half the probe interval.
    fn wake_spread(&self) -> Duration {
        let half = self
            .config
            .recover
            .probe_interval
            .map_or(Duration::ZERO, |p| p / 2);
        self.config.session_spread.min(half)
    }

    /// Arms the probe when a key waits on its backoff for the registry to
    /// answer and the probe (jittered) comes before its next attempt; drops
    /// an armed one nobody wants any more. At most one armed or in flight.
    pub(super) fn sync_probe(
        &mut self,
        now: Instant,
        rng: &mut impl Rng,
        out: &mut Vec<RegistrarAction>,
    ) {
        match self.probe {
            _ if self.closed => {}
            Probe::InFlight(_) => {}
            Probe::Armed(_) => self.drop_probe_if_unwanted(out),
            Probe::Off => {
                let policy = self.config.recover;
                let Some(delay) = self
                    .probe_candidate()
                    .and_then(|(_, e)| e.recover.probe_delay(&policy, now, rng))
                else {
                    return;
                };
                let token = self.token();
                self.probe = Probe::Armed(token);
                out.push(RegistrarAction::ArmProbe { token, delay });
            }
        }
    }

    /// Cancels the armed probe if no key wants one any more.
    pub(super) fn drop_probe_if_unwanted(&mut self, out: &mut Vec<RegistrarAction>) {
        if let Probe::Armed(token) = self.probe {
            if !self.keys.values().any(Entry::wants_probe) {
                self.probe = Probe::Off;
                out.push(RegistrarAction::CancelTimer { token });
            }
        }
    }

    /// The probe timer with `token` fired: probe the registry with a cheap
    /// `list` of a waiting key's app, under the call deadline (nothing if
    /// no key waits any more).
    pub fn on_probe_timer(&mut self, token: RegistrarToken) -> Vec<RegistrarAction> {
        let mut out = Vec::new();
        if self.closed || self.probe != Probe::Armed(token) {
            return out;
        }
        self.probe = Probe::Off;
        if let Some(app) = self.probe_candidate().map(|(k, _)| k.app.clone()) {
            let token = self.token();
            self.probe = Probe::InFlight(token);
            out.push(RegistrarAction::Probe {
                app,
                token,
                deadline: self.config.call_timeout,
            });
        }
        out
    }

    /// The probe with `token` came back. It answered: every key a failed
    /// probe saw waiting is woken now (spread), and the others waiting want
    /// no probe until they fail again (the registry answers, it refused
    /// their write). It did not: every waiting key is confirmed down, and
    /// the next probe is armed.
    pub fn on_probe_result(
        &mut self,
        token: RegistrarToken,
        result: Result<(), RegistryError>,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Vec<RegistrarAction> {
        let mut out = Vec::new();
        if self.closed || self.probe != Probe::InFlight(token) {
            return out;
        }
        self.probe = Probe::Off;
        let answered = result.is_ok();
        if answered {
            self.wake(rng, &mut out);
        }
        let mark = if answered {
            Probed::Answered
        } else {
            Probed::Down
        };
        for e in self.keys.values_mut().filter(|e| e.wants_probe()) {
            e.probed = mark;
        }
        self.sync_probe(now, rng, &mut out);
        out
    }

    /// The registry answers again: every key confirmed down issues after a
    /// uniform random delay within the wake window, its grown backoff
    /// skipped ([`Recover::on_probe_ok`](crate::recover::Recover::on_probe_ok):
    /// a failure continues the schedule, a success resets it).
    pub(super) fn wake(&mut self, rng: &mut impl Rng, out: &mut Vec<RegistrarAction>) {
        let keys: Vec<RegistrationKey> = self
            .keys
            .iter()
            .filter(|(_, e)| e.wants_probe() && e.probed == Probed::Down)
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return;
        }
        let within = self.wake_spread();
        let woken = keys.len();
        for key in keys {
            let (delay, token) = (uniform_delay(within, rng), self.token());
            let Some(e) = self.keys.get_mut(&key) else {
                continue;
            };
            let Op::Waiting(old) = e.op else {
                continue;
            };
            e.recover.on_probe_ok();
            e.probed = Probed::Answered;
            e.op = Op::Waiting(token);
            out.push(RegistrarAction::CancelTimer { token: old });
            out.push(RegistrarAction::ArmTimer { key, token, delay });
        }
        out.push(RegistrarAction::RegistryAnswers { woken, within });
    }

    /// Whether a probe is armed or in flight.
    pub fn probing(&self) -> bool {
        self.probe != Probe::Off
    }
}
