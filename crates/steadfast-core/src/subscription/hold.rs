//! The mass-expiry hold of one app: instances a registry removed right
//! after it recovered from an outage (a frozen etcd that resumes expires
//! every lease whose TTL elapsed meanwhile, though the providers are alive)
//! are kept for a bounded grace while their providers re-register.
//!
//! The rule is cumulative over a recovery window, because a registry may
//! report one removal per notification (etcd revokes each expired lease in
//! its own revision, so the deletes of a mass expiry arrive one snapshot at
//! a time):
//! - a window opens when the stale mark clears and lasts
//!   [`MASS_REMOVAL_WINDOW`]; its base is the set of instances present at
//!   the recovery (the state held just before the snapshot that clears the
//!   mark, which is itself counted);
//! - every instance of the base that a snapshot removes within the window
//!   is recorded with the instant of its removal;
//! - the removal is "mass" once at least [`MASS_REMOVAL_MIN`] instances of
//!   the base AND more than half of the base were removed within the
//!   window; a removal of a single instance is therefore never delayed;
//! - from the moment the rule trips, each removed instance is held until
//!   its own removal + grace: those removed earlier in the window come back
//!   for the rest of their grace (none if it already ended), those removed
//!   later in the window are held as they go; nothing is held past the
//!   grace, re-registered or not;
//! - an instance that re-registers (same id) during the grace replaces the
//!   held record at once; an instance is held at most once per window, and
//!   instances registered after the recovery are never held;
//! - a new outage closes the window (held instances keep their deadlines).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Snapshot;
use crate::model::ServiceInstance;
use crate::update::HeldInstances;

/// How long after a registry recovery removals count toward a mass expiry.
pub const MASS_REMOVAL_WINDOW: Duration = Duration::from_secs(10);

/// Fewest instances present at a recovery that must be removed within the
/// window for the removals to count as a mass expiry (more than half of
/// them must be removed too).
pub const MASS_REMOVAL_MIN: usize = 2;

/// An instance of the base removed within the window.
#[derive(Debug)]
struct Removed {
    record: ServiceInstance,
    at: Instant,
    /// Held once already (not held again this window).
    held: bool,
}

/// The recovery window of one app.
#[derive(Debug)]
struct Window {
    /// Removals after this instant no longer count.
    until: Instant,
    /// Ids present at the recovery.
    base: HashSet<String>,
    /// Instances of the base removed within the window, by id.
    removed: BTreeMap<String, Removed>,
    /// The cumulative rule held at some point of the window.
    tripped: bool,
}

/// The instances held for one app, and the recovery window they are judged in.
#[derive(Debug, Default)]
pub(super) struct Hold {
    /// Held instances by id, with the instant each is dropped.
    held: BTreeMap<String, (ServiceInstance, Instant)>,
    window: Option<Window>,
}

impl Hold {
    /// The registry recovered at `now`; `present` is the state held just
    /// before the snapshot that cleared the stale mark (none yet: no
    /// window, nothing to lose).
    pub(super) fn open_window(&mut self, present: Option<&[ServiceInstance]>, now: Instant) {
        self.window = match (present, now.checked_add(MASS_REMOVAL_WINDOW)) {
            (Some(present), Some(until)) => Some(Window {
                until,
                base: present.iter().map(|i| i.id.clone()).collect(),
                removed: BTreeMap::new(),
                tripped: false,
            }),
            _ => None,
        };
    }

    /// The registry went down again: removals no longer count.
    pub(super) fn close_window(&mut self) {
        self.window = None;
    }

    /// Whether a recovery window is open at `now`.
    #[cfg(test)]
    pub(super) fn in_window(&self, now: Instant) -> bool {
        self.window.as_ref().is_some_and(|w| now <= w.until)
    }

    /// Takes in the next snapshot `next` replacing `prev` (both without
    /// held instances). Drops held instances that re-registered; within the
    /// window records the removals and, once the rule trips, holds every
    /// removed instance until its removal + `grace`. Returns how many
    /// instances it newly holds.
    pub(super) fn on_snapshot(
        &mut self,
        prev: Option<&[ServiceInstance]>,
        next: &[ServiceInstance],
        grace: Duration,
        now: Instant,
    ) -> usize {
        let next_ids: HashSet<&str> = next.iter().map(|i| i.id.as_str()).collect();
        self.held.retain(|id, _| !next_ids.contains(id.as_str()));
        if self.window.as_ref().is_some_and(|w| now > w.until) {
            self.window = None;
        }
        let (Some(w), Some(prev), false) = (self.window.as_mut(), prev, grace.is_zero()) else {
            return 0;
        };
        for inst in prev {
            let id = inst.id.as_str();
            if !next_ids.contains(id) && w.base.contains(id) && !w.removed.contains_key(id) {
                w.removed.insert(
                    inst.id.clone(),
                    Removed {
                        record: inst.clone(),
                        at: now,
                        held: false,
                    },
                );
            }
        }
        let count = w.removed.len();
        if count >= MASS_REMOVAL_MIN && count.saturating_mul(2) > w.base.len() {
            w.tripped = true;
        }
        if !w.tripped {
            return 0;
        }
        let mut fresh = 0;
        for (id, r) in w.removed.iter_mut() {
            if r.held || next_ids.contains(id.as_str()) {
                continue;
            }
            r.held = true;
            match r.at.checked_add(grace) {
                Some(until) if until > now => {
                    self.held.insert(id.clone(), (r.record.clone(), until));
                    fresh += 1;
                }
                // Its grace already ended (or cannot be told): not brought back.
                _ => {}
            }
        }
        fresh
    }
    /// Drops every instance whose grace ended at `now`; true if any was.
    pub(super) fn expire(&mut self, now: Instant) -> bool {
        let before = self.held.len();
        self.held.retain(|_, (_, until)| *until > now);
        self.held.len() != before
    }

    /// When the next held instance is dropped.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|(_, until)| *until).min()
    }

    /// What the status says about the hold, if anything is held.
    pub(super) fn info(&self, grace: Duration) -> Option<HeldInstances> {
        let until = self.held.values().map(|(_, until)| *until).max()?;
        Some(HeldInstances {
            count: self.held.len(),
            until,
            grace,
        })
    }

    /// The snapshot to deliver: `real` plus the held instances (shared
    /// as-is when nothing is held).
    pub(super) fn merged(&self, real: &Snapshot) -> Snapshot {
        if self.held.is_empty() {
            return real.clone();
        }
        let mut all = Vec::with_capacity(real.len().saturating_add(self.held.len()));
        all.extend(real.iter().cloned());
        all.extend(self.held.values().map(|(i, _)| i.clone()));
        Arc::new(all)
    }

    /// Whether nothing is held.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insts(ports: &[u16]) -> Vec<ServiceInstance> {
        ports
            .iter()
            .map(|p| ServiceInstance::new("a", "h", *p))
            .collect()
    }

    fn recovered(base: &[u16], t0: Instant) -> Hold {
        let mut h = Hold::default();
        h.open_window(Some(&insts(base)), t0);
        h
    }

    #[test]
    fn holds_only_mass_removals_inside_the_window() {
        let (t0, g) = (Instant::now(), Duration::from_secs(3));
        let prev = insts(&[1, 2, 3, 4]);
        let mut h = recovered(&[1, 2, 3, 4], t0);
        assert_eq!(
            h.on_snapshot(Some(&prev), &insts(&[1, 2]), g, t0),
            0,
            "half is not most"
        );
        let mut h = Hold::default();
        assert_eq!(
            h.on_snapshot(Some(&prev), &insts(&[1]), g, t0),
            0,
            "no window"
        );
        let mut h = recovered(&[1], t0);
        assert_eq!(
            h.on_snapshot(Some(&insts(&[1])), &[], g, t0),
            0,
            "single instance"
        );
        let mut h = Hold::default();
        h.open_window(None, t0);
        assert!(!h.in_window(t0), "no previous state, no window");
        let mut h = recovered(&[1, 2, 3, 4], t0);
        assert_eq!(
            h.on_snapshot(Some(&prev), &insts(&[1]), Duration::ZERO, t0),
            0
        );
        let mut h = recovered(&[1, 2, 3, 4], t0);
        let late = t0 + MASS_REMOVAL_WINDOW + Duration::from_millis(1);
        assert_eq!(
            h.on_snapshot(Some(&prev), &insts(&[1]), g, late),
            0,
            "window closed"
        );
        assert!(h.is_empty());
        let mut h = recovered(&[1, 2, 3, 4], t0);
        assert_eq!(h.on_snapshot(Some(&prev), &insts(&[1]), g, t0), 3);
        assert_eq!(h.info(g).map(|i| i.count), Some(3));
        assert_eq!(h.next_deadline(), Some(t0 + g));
        // Port 2 re-registers: its new record replaces the held one.
        assert_eq!(h.on_snapshot(Some(&insts(&[1])), &insts(&[1, 2]), g, t0), 0);
        assert_eq!(h.merged(&Arc::new(insts(&[1, 2]))).len(), 4);
        assert!(!h.expire(t0 + g - Duration::from_millis(1)));
        assert!(h.expire(t0 + g), "nothing held past the grace");
        assert!(h.is_empty());
        assert_eq!(h.info(g), None);
    }

    #[test]
    fn removals_count_cumulatively_and_earlier_ones_come_back_for_the_rest_of_their_grace() {
        let (t0, g, ms) = (
            Instant::now(),
            Duration::from_secs(3),
            Duration::from_millis,
        );
        let mut h = recovered(&[1, 2, 3, 4, 5, 6], t0);
        let mut state = insts(&[1, 2, 3, 4, 5, 6]);
        // One removal per snapshot, as etcd revokes one lease per revision.
        let mut step = |h: &mut Hold, keep: &[u16], at: Instant| {
            let next = insts(keep);
            let n = h.on_snapshot(Some(&state), &next, g, at);
            state = next;
            n
        };
        assert_eq!(step(&mut h, &[2, 3, 4, 5, 6], t0), 0, "1 of 6");
        assert_eq!(step(&mut h, &[3, 4, 5, 6], t0 + ms(3500)), 0, "2 of 6");
        assert_eq!(step(&mut h, &[4, 5, 6], t0 + ms(3600)), 0, "3 of 6");
        // 4 of 6 trips the rule: 1's grace ended, 2, 3 and 4 are held from
        // their own removal.
        assert_eq!(step(&mut h, &[5, 6], t0 + ms(3700)), 3);
        assert_eq!(h.held.get("h:2").map(|(_, u)| *u), Some(t0 + ms(6500)));
        assert_eq!(h.held.get("h:4").map(|(_, u)| *u), Some(t0 + ms(6700)));
        assert!(!h.held.contains_key("h:1"), "its grace had ended");
        assert_eq!(step(&mut h, &[6], t0 + ms(3800)), 1, "later ones too");
        assert!(h.expire(t0 + ms(6500)), "2 leaves at its own deadline");
        assert_eq!(h.info(g).map(|i| i.count), Some(3));
        assert!(h.expire(t0 + ms(6800)));
        assert!(h.is_empty(), "nothing held past its grace");
    }
}
