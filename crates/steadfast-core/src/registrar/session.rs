//! The registrar's answers to the registry losing this client's session,
//! to its shell restarting and to engine shutdown: re-register, re-arm or
//! unregister every key, spread within the session window so a thousand
//! keys never move as one burst.

use rand::Rng;

use super::{Intent, Op, RegistrarMachine};
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

    /// The shell restarted: its timers are gone (calls in flight run on
    /// and report as usual). Every key that waited on a timer gets a new
    /// one within the spread window, so a thousand keys in backoff do not
    /// retry in one burst after a restart.
    pub fn on_restart(&mut self, rng: &mut impl Rng) -> Vec<RegistrarAction> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        let spread = self.config.session_spread;
        let waiting: Vec<RegistrationKey> = self
            .keys
            .iter()
            .filter(|(_, e)| matches!(e.op, Op::Waiting(_)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in waiting {
            let (token, delay) = (self.token(), uniform_delay(spread, rng));
            if let Some(e) = self.keys.get_mut(&key) {
                e.op = Op::Waiting(token);
                out.push(RegistrarAction::ArmTimer { key, token, delay });
            }
        }
        out
    }
}
