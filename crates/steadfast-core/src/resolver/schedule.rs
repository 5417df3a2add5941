//! The per-revision retry schedule of the resolver, on the engine's one retry
//! primitive: every unresolved revision holds a [`Recover`] that says when
//! its next fetch is due, and a revision that leaves the snapshot parks it
//! in the machine's [`RecoverMemory`](crate::recover::RecoverMemory) so it
//! resumes, not restarts, when it comes back within twice the backoff cap.

use std::time::Instant;

use super::{Phase, ResolverAction, ResolverMachine, RevisionState, Token};
use crate::error::{ErrorClass, FetchError};
use crate::model::ServiceInstance;
use crate::recover::{Recover, Retry};

/// Most instances a fetch is offered (serving ones first, from a slot that
/// moves with the attempt): a retry tries 2 of them, a first fetch hedges
/// through at most 20 in its 5 s deadline, and the bound keeps a fresh
/// revision of a 100k-instance app from walking and copying 100k records
/// into one fetch.
pub const MAX_CANDIDATES: usize = 16;

/// What the status said about a parked revision, so it says the same when
/// the revision comes back.
#[derive(Clone, Debug)]
pub(super) struct Parked {
    since: Instant,
    last_error: Option<FetchError>,
    at: Instant,
}

impl ResolverMachine {
    /// Parks the schedule of `rev`, which left the snapshot at `now`. A
    /// fetch still under way is abandoned, but it cost its provider calls:
    /// it counts as a failed attempt, so a revision whose fetches are slower
    /// than its flaps does not come back fresh every time. A fresh schedule
    /// is not worth keeping, and one that gave up is not kept: a revision
    /// that used up its attempts starts afresh when it comes back.
    pub(super) fn park(&mut self, rev: String, state: RevisionState, now: Instant) {
        let window = self.policy.memory_window();
        self.parked
            .retain(|_, p| now.saturating_duration_since(p.at) <= window);
        let RevisionState::Unresolved {
            since,
            last_error,
            phase,
            mut recover,
            ..
        } = state
        else {
            return;
        };
        if matches!(phase, Phase::Fetching(_)) {
            let _ = recover.on_failure(&self.policy, ErrorClass::Transient, now, &mut self.rng);
        }
        if phase == Phase::GaveUp || recover.gave_up() || recover == Recover::default() {
            return;
        }
        self.memory.park(rev.clone(), recover, now);
        self.parked.insert(
            rev,
            Parked {
                since,
                last_error,
                at: now,
            },
        );
    }

    /// The state of the unresolved revision `rev` entering the snapshot at
    /// `now`: its parked schedule when it left less than the memory window
    /// ago, else a fresh one (whose first failure waits the initial delay).
    pub(super) fn entering(&mut self, rev: &str, now: Instant) -> RevisionState {
        let parked = self.parked.remove(rev);
        match self.memory.recall(&rev.to_string(), now) {
            Some(recover) => RevisionState::Unresolved {
                since: parked
                    .as_ref()
                    .map(|p| p.since)
                    .or(recover.down_since())
                    .unwrap_or(now),
                attempts: recover.failures(),
                last_error: parked.and_then(|p| p.last_error),
                phase: Phase::Idle,
                recover,
            },
            None => RevisionState::Unresolved {
                since: now,
                attempts: 0,
                last_error: None,
                phase: Phase::Idle,
                recover: Recover::new(),
            },
        }
    }

    /// Records the failed fetch of `rev` (whose phase was checked to be the
    /// fetch) and returns the timer its schedule asks for, if any.
    pub(super) fn on_failure(
        &mut self,
        rev: &str,
        err: FetchError,
        now: Instant,
    ) -> Option<ResolverAction> {
        let token = self.token();
        let Some(RevisionState::Unresolved {
            attempts,
            last_error,
            phase,
            recover,
            ..
        }) = self.revisions.get_mut(rev)
        else {
            return None;
        };
        let retry = recover.on_failure(&self.policy, err.class(), now, &mut self.rng);
        *attempts = recover.failures();
        *last_error = Some(err);
        match retry {
            Retry::GiveUp => {
                *phase = Phase::GaveUp;
                None
            }
            Retry::After(delay) => {
                *phase = Phase::Waiting(token);
                Some(ResolverAction::ArmTimer {
                    revision: rev.to_string(),
                    token,
                    delay,
                })
            }
        }
    }

    /// Demand from waiting callers (a directory found nothing to serve
    /// while this app's metadata is unresolved): every unresolved revision
    /// waiting for its retry timer is fetched at once, as if its timer had
    /// fired. A revision with a fetch under way keeps it (no second fetch is
    /// stacked on it), one that gave up, is resolved or is not in the
    /// snapshot is untouched, and nothing runs while inactive. The early
    /// fetch is an ordinary retry: it goes through the same fetch budget,
    /// and its failure grows the backoff by that one attempt only. The
    /// shell throttles how often it asks (see
    /// [`ProbeThrottle`](crate::probe::ProbeThrottle)). Returns the timers
    /// to cancel and the fetches to start.
    pub fn retry_now(&mut self, now: Instant) -> Vec<ResolverAction> {
        self.tick(now);
        let mut actions = Vec::new();
        if !self.is_active() {
            return actions;
        }
        let waiting: Vec<(String, Token)> = self
            .revisions
            .iter()
            .filter_map(|(rev, state)| match state {
                RevisionState::Unresolved {
                    phase: Phase::Waiting(token),
                    ..
                } => Some((rev.clone(), *token)),
                _ => None,
            })
            .collect();
        for (rev, token) in waiting {
            if let Some(RevisionState::Unresolved { phase, recover, .. }) =
                self.revisions.get_mut(&rev)
            {
                *phase = Phase::Idle;
                // Due now; a failure continues the grown schedule.
                recover.on_probe_ok();
            }
            actions.push(ResolverAction::CancelTimer { token });
            self.fetch(&rev, &mut actions);
        }
        actions
    }

    /// Starts `rev` if it is idle and the machine is active: a fetch when its
    /// schedule is due at `now`, else a timer for the rest of the delay.
    pub(super) fn start_if_idle(
        &mut self,
        rev: &str,
        now: Instant,
        actions: &mut Vec<ResolverAction>,
    ) {
        if !self.is_active() {
            return;
        }
        let wait = match self.revisions.get(rev) {
            Some(RevisionState::Unresolved {
                phase: Phase::Idle,
                recover,
                ..
            }) => recover.wait(now),
            _ => return,
        };
        if wait.is_zero() {
            self.fetch(rev, actions);
            return;
        }
        let token = self.token();
        if let Some(RevisionState::Unresolved { phase, .. }) = self.revisions.get_mut(rev) {
            *phase = Phase::Waiting(token);
        }
        actions.push(ResolverAction::ArmTimer {
            revision: rev.to_string(),
            token,
            delay: wait,
        });
    }

    /// Fetches the idle revision `rev` now (its schedule is due).
    pub(super) fn fetch(&mut self, rev: &str, actions: &mut Vec<ResolverAction>) {
        if !self.is_active() {
            return;
        }
        let attempts = match self.revisions.get(rev) {
            Some(RevisionState::Unresolved {
                phase: Phase::Idle,
                attempts,
                ..
            }) => *attempts,
            _ => return,
        };
        let token = self.token();
        let candidates = self.candidates(rev, attempts as usize);
        if let Some(RevisionState::Unresolved { phase, .. }) = self.revisions.get_mut(rev) {
            *phase = Phase::Fetching(token);
        }
        actions.push(ResolverAction::Fetch {
            revision: rev.to_string(),
            candidates,
            token,
            deadline: self.fetch_deadline,
        });
    }

    /// Instances advertising `rev`, at most [`MAX_CANDIDATES`]: serving ones
    /// first, then non-serving ones as a last resort. The walk over the
    /// app starts at a slot that moves with the attempt number, so
    /// consecutive attempts start at different instances, and stops once it
    /// has enough serving ones: a fetch costs O(candidates x instances /
    /// instances of `rev`), not a pass over the app.
    pub(super) fn candidates(&self, rev: &str, attempt: usize) -> Vec<ServiceInstance> {
        let cap = self.table.capacity();
        let mut serving = Vec::new();
        let mut resting = Vec::new();
        let start = if cap == 0 {
            0
        } else {
            attempt.wrapping_mul(7919) % cap
        };
        for k in (start..cap).chain(0..start) {
            let Some(slot) = self.table.get(k as u32) else {
                continue;
            };
            let inst = slot.instance;
            if inst.revision() != Some(rev) {
                continue;
            }
            if inst.is_serving() {
                serving.push(inst);
                if serving.len() == MAX_CANDIDATES {
                    break;
                }
            } else if resting.len() < MAX_CANDIDATES {
                resting.push(inst);
            }
        }
        serving
            .into_iter()
            .chain(resting)
            .take(MAX_CANDIDATES)
            .map(|i| i.to_record(&self.app))
            .collect()
    }
}
