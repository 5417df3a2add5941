//! The hub's side of the client's shared prober: verdicts routed to the
//! apps on the endpoint concerned, and what the apps need told back (one
//! prober subscription per shared stream, one for "answered again").

use std::time::Instant;

use super::Hub;
use crate::mux::{Slot, SubKey};
use crate::prober::Want;
use crate::watch_machine::{Phase, ProbeNeed};

impl Hub {
    /// Feeds what changed in the prober's verdicts to the apps concerned:
    /// the death of a stream's endpoint, a fresh probe of it, etcd
    /// answering.
    pub(super) fn on_verdicts(&mut self, t: Instant) {
        let v = self.verdicts.borrow_and_update().clone();
        for slot in Slot::ALL {
            let e = self.endpoint[slot.index()];
            let dead = v.dead_count(e) != self.seen.dead_count(e);
            let fresh = v
                .last_ok(e)
                .filter(|ok| self.seen.last_ok(e).map(|p| p.seq) != Some(ok.seq))
                .cloned();
            for k in self.mux.member_keys(slot) {
                let live = self
                    .subs
                    .get(&k)
                    .is_some_and(|s| s.machine.phase() == Phase::Live);
                if !live {
                    continue;
                }
                if dead {
                    self.with(k, t, |m| m.on_endpoint_dead(v.dead_since(e), t));
                } else if let Some(ok) = &fresh {
                    self.with(k, t, |m| m.on_probe_header(&ok.header, ok.sent, t));
                }
            }
        }
        if v.answered != self.seen.answered {
            let keys: Vec<SubKey> = self.subs.keys().copied().collect();
            for k in keys {
                self.with(k, t, |m| m.on_answered(t));
            }
        }
        self.seen = v;
    }

    pub(super) fn update_wants(&mut self) {
        let mut live = [false; 2];
        let mut answer = false;
        for (k, s) in &self.subs {
            match s.need {
                ProbeNeed::Nothing => {}
                ProbeNeed::Answer => answer = true,
                ProbeNeed::Liveness => {
                    if let Some(slot) = self.mux.slot_of(*k) {
                        live[slot.index()] = true;
                    }
                }
            }
        }
        let wants = [
            if live[0] {
                Want::Live(self.endpoint[0])
            } else {
                Want::Nothing
            },
            if live[1] {
                Want::Live(self.endpoint[1])
            } else {
                Want::Nothing
            },
            if answer {
                Want::Answer(self.config.recover_probe_interval)
            } else {
                Want::Nothing
            },
        ];
        for (i, w) in wants.into_iter().enumerate() {
            if self.wants[i] != w {
                self.wants[i] = w;
                self.probes[i].want(w);
            }
        }
    }
}
