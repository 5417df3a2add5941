//! The registrar's answers to the registry losing this client's session,
//! to its shell being re-created after a panic and to engine shutdown: re-register, re-arm or
//! unregister every key, spread within the session window so a thousand
//! keys never move as one burst.

use rand::Rng;

use std::collections::BTreeMap;

use super::{
    Entry, Intent, Op, Probed, RegistrarConfig, RegistrarMachine, RegistrarOp, RegistrarToken,
};
use crate::jitter::uniform_delay;
use crate::model::ServiceInstance;
use crate::registrar::{RegistrarAction, RegistrationKey};

impl RegistrarMachine {
    /// The registry lost this client's session: every key whose intent is
    /// registered is registered again, each after a uniform random delay
    /// within the spread window. A key with a call in flight re-issues once
    /// that call is back (it may have landed before the loss); a key
    /// waiting on a retry timer has it replaced by one within the window
    /// (still one pending operation), so a backoff grown during an outage
    /// never delays the restore past the window.
    pub fn session_lost(&mut self, rng: &mut impl Rng) -> Vec<RegistrarAction> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        let spread = self.config.session_spread;
        let keys: Vec<RegistrationKey> = self
            .keys
            .iter()
            .filter(|(_, e)| e.intent.is_registered())
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let delay = uniform_delay(spread, rng);
            let token = self.token();
            let Some(e) = self.keys.get_mut(&key) else {
                continue;
            };
            e.settled = false;
            e.gave_up = false;
            match e.op {
                // Re-issue once it is back: it may have landed before the
                // loss.
                Op::InFlight(..) => e.reissue = true,
                Op::Waiting(old) => {
                    // Issued within the window anyway: no probe wanted.
                    e.probed = Probed::Answered;
                    e.op = Op::Waiting(token);
                    out.push(RegistrarAction::CancelTimer { token: old });
                    out.push(RegistrarAction::ArmTimer { key, token, delay });
                }
                Op::Idle => {
                    e.op = Op::Waiting(token);
                    e.recover.on_success();
                    out.push(RegistrarAction::ArmTimer { key, token, delay });
                }
            }
        }
        self.drop_probe_if_unwanted(&mut out);
        out
    }

    /// The engine shuts down: every instance whose intent is registered is
    /// unregistered now (latest intent wins, as for any unregister); mapping
    /// entries stay (they are persistent). The shell waits, bounded, for
    /// them to settle, then closes the machine.
    pub fn unregister_all(&mut self) -> Vec<RegistrarAction> {
        let registered: Vec<ServiceInstance> = self
            .keys
            .values()
            .filter_map(|e| match &e.intent {
                Intent::Registered(i) => Some(i.clone()),
                _ => None,
            })
            .collect();
        registered
            .into_iter()
            .flat_map(|i| self.unregister(i))
            .collect()
    }

    /// What a replacement of this registrar must start from (restart
    /// clean, [`RegistrarMachine::resuming`]): every key's latest intent
    /// (what exports and `Engine::register` asked for), the calls the
    /// registry may still be answering, and the next token. `sent` says
    /// whether the shell really started the call with a token: a panic may
    /// have struck between the machine's decision and the call, and a call
    /// that never left must not be waited for.
    pub fn resume_point(&self, sent: impl Fn(RegistrarToken) -> bool) -> RegistrarResume {
        RegistrarResume {
            intents: self.keys.values().map(|e| e.intent.clone()).collect(),
            in_flight: self
                .keys
                .iter()
                .filter_map(|(k, e)| match &e.op {
                    Op::InFlight(token, op) if sent(*token) => {
                        Some((k.clone(), *token, op.clone()))
                    }
                    _ => None,
                })
                .collect(),
            next_token: self.next_token,
        }
    }

    /// A new registrar with `config` replacing one whose shell panicked,
    /// from `at` ([`RegistrarMachine::resume_point`]): nothing of the old
    /// schedules, settled marks or give-ups is kept. Every key drives
    /// towards its latest intent again: a key whose call the registry may
    /// still answer waits for that answer (under its old token) and then
    /// issues its intent once more; every other key issues after a uniform
    /// random delay within the session window, so a thousand keys never
    /// move as one burst. Returns the machine and the timers to arm.
    pub fn resuming(
        config: RegistrarConfig,
        at: RegistrarResume,
        rng: &mut impl Rng,
    ) -> (Self, Vec<RegistrarAction>) {
        let mut m = Self::new(config);
        m.next_token = at.next_token.max(1);
        let mut in_flight: BTreeMap<RegistrationKey, (RegistrarToken, RegistrarOp)> = at
            .in_flight
            .into_iter()
            .map(|(k, t, op)| (k, (t, op)))
            .collect();
        let spread = m.config.session_spread;
        let mut out = Vec::new();
        for intent in at.intents {
            let key = intent.key();
            let op = match in_flight.remove(&key) {
                Some((token, op)) => Op::InFlight(token, op),
                None => {
                    let (token, delay) = (m.token(), uniform_delay(spread, rng));
                    out.push(RegistrarAction::ArmTimer {
                        key: key.clone(),
                        token,
                        delay,
                    });
                    Op::Waiting(token)
                }
            };
            let reissue = matches!(op, Op::InFlight(..));
            m.keys.insert(key, Entry::new(intent, op, reissue));
        }
        (m, out)
    }
}

/// What a replacement registrar starts from
/// ([`RegistrarMachine::resume_point`]).
#[derive(Clone, Debug, Default)]
pub struct RegistrarResume {
    intents: Vec<Intent>,
    in_flight: Vec<(RegistrationKey, RegistrarToken, RegistrarOp)>,
    next_token: RegistrarToken,
}
