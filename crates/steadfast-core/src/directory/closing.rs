//! Closing notices and tombstone expiry on [`DirectoryMachine`]: a held
//! endpoint that announced closing is removed at once and tombstoned (see
//! `directory/tombstones.rs` for the rules); time is an input.

use std::time::{Duration, Instant};

use super::tombstones::{Clock, TombstoneCounts};
use super::{Applied, DirectoryMachine};
use crate::closing::{Closing, ClosingSource};

impl DirectoryMachine {
    /// `closing` at `now`: removes the endpoint it names, if held in the
    /// incarnation it names, and writes a tombstone expiring `ttl` from
    /// `now`. [`Applied::Ignored`] (no tombstone) for another directory's
    /// key, an endpoint not held, or a closing of another incarnation than
    /// the one held (it is about an older boot). A closing from a call
    /// keeps the removed URL as the latest state the registry lists, which
    /// comes back when the tombstone expires unless the registry removes or
    /// flags the instance meanwhile.
    pub fn close(&mut self, closing: Closing, now: Instant, ttl: Duration) -> Applied {
        let written = closing.service_key == self.subscribe_key && {
            let keep = closing.source == ClosingSource::Call;
            let clock = Clock { now, ttl };
            let counts = &mut self.tomb_counts;
            self.apps.values_mut().flatten().any(|v| {
                let closed = v.tombs.close(
                    &mut v.editor,
                    &closing.address,
                    closing.incarnation.as_ref(),
                    keep,
                    clock,
                    counts,
                );
                if closed {
                    v.set = v.editor.snapshot();
                }
                closed
            })
        };
        if !written {
            self.tomb_counts.ignored = self.tomb_counts.ignored.saturating_add(1);
            return Applied::Ignored;
        }
        drop(self.republish());
        Applied::Yes
    }

    /// Expires the tombstones due at `now`, re-adding the latest vetoed URL
    /// each holds (so a vetoed add is never lost). [`Applied::Yes`] when a
    /// new snapshot is ready.
    pub fn on_timeout(&mut self, now: Instant) -> Applied {
        // A replacement's carried sets whose time is up leave.
        let opened = self.open_gate(now);
        let mut changed = false;
        let counts = &mut self.tomb_counts;
        for v in self.apps.values_mut().flatten() {
            let before = v.tombs.vetoed();
            if v.tombs.expire(&mut v.editor, now, counts) {
                v.set = v.editor.snapshot();
                changed = true;
            }
            // A held-back URL that expired changes the status too.
            changed |= v.tombs.vetoed() != before;
        }
        if changed || opened {
            drop(self.republish());
        }
        if changed || opened {
            Applied::Yes
        } else {
            Applied::Ignored
        }
    }

    /// When [`DirectoryMachine::on_timeout`] is due next: the earliest
    /// tombstone expiry or a replacement's gate deadline, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.views()
            .filter_map(|v| v.tombs.next_deadline())
            .chain(self.gate_deadline())
            .min()
    }

    /// Number of tombstones held.
    pub fn tombstones(&self) -> usize {
        self.views().map(|v| v.tombs.len()).sum()
    }

    /// What the tombstones did since the last call (counts reset).
    pub fn take_tombstone_counts(&mut self) -> TombstoneCounts {
        std::mem::take(&mut self.tomb_counts)
    }
}
