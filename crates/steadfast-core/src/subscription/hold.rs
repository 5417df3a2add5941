//! The mass-expiry hold of one app: instances a registry removed right
//! after it recovered from an outage (a frozen etcd that resumes expires
//! every lease whose TTL elapsed meanwhile, though the providers are alive)
//! are kept for a bounded grace while their providers re-register.
//!
//! The rule is cumulative over a recovery window, because a registry may
//! report one removal per notification (etcd revokes each expired lease in
//! its own revision, so the deletes of a mass expiry arrive one event at
//! a time):
//! - a window opens when the stale mark clears and lasts
//!   [`MASS_REMOVAL_WINDOW`]; its base is the set of instances present at
//!   the recovery (the state held just before the event that clears the
//!   mark, which is itself counted);
//! - every instance of the base that an event removes within the window
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashSet;

use crate::event::{Changes, InstanceMap};
use crate::instance::Instance;
use crate::update::HeldInstances;

/// How long after a registry recovery removals count toward a mass expiry.
pub const MASS_REMOVAL_WINDOW: Duration = Duration::from_secs(10);

/// Fewest instances present at a recovery that must be removed within the
/// window for the removals to count as a mass expiry (more than half of
/// them must be removed too).
pub const MASS_REMOVAL_MIN: usize = 2;

/// An instance of the base removed within the window.
#[derive(Clone, Debug)]
struct Removed {
    record: Arc<Instance>,
    at: Instant,
    /// Held once already (not held again this window).
    held: bool,
}

/// The recovery window of one app.
#[derive(Clone, Debug)]
struct Window {
    /// Removals after this instant no longer count.
    until: Instant,
    /// Ids present at the recovery.
    base: FxHashSet<Arc<str>>,
    /// Instances of the base removed within the window, by id.
    removed: BTreeMap<Arc<str>, Removed>,
    /// The cumulative rule held at some point of the window.
    tripped: bool,
}

/// The instances held for one app, and the recovery window they are judged in.
#[derive(Clone, Debug, Default)]
pub(super) struct Hold {
    /// Held instances by id, with the instant each is dropped. Never an id
    /// the registry holds (a re-registration releases it).
    held: BTreeMap<Arc<str>, (Arc<Instance>, Instant)>,
    window: Option<Window>,
}

/// What one change of the registry state did to the hold.
#[derive(Debug, Default)]
pub(super) struct HoldStep {
    /// Instances newly held (removed now or earlier in the window).
    pub(super) newly_held: Vec<Arc<Instance>>,
}

impl Hold {
    /// The registry recovered at `now`; `present` is the state held just
    /// before the event that cleared the stale mark (none yet: no window,
    /// nothing to lose).
    pub(super) fn open_window(&mut self, present: Option<&InstanceMap>, now: Instant) {
        self.window = match (present, now.checked_add(MASS_REMOVAL_WINDOW)) {
            (Some(present), Some(until)) => Some(Window {
                until,
                base: present.iter().map(|i| i.id_arc().clone()).collect(),
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

    /// Whether the next change's removed records matter (a recovery window
    /// is open at `now` and holding is on): otherwise a large Reset needs
    /// only their count.
    pub(super) fn wants_removals(&self, now: Instant, grace: Duration) -> bool {
        !grace.is_zero() && self.window.as_ref().is_some_and(|w| now <= w.until)
    }

    /// Whether a recovery window is open at `now`.
    #[cfg(test)]
    pub(super) fn in_window(&self, now: Instant) -> bool {
        self.window.as_ref().is_some_and(|w| now <= w.until)
    }

    /// Takes in what one event changed in the registry state (`present` is
    /// the state after it, without held instances). Releases held
    /// instances that re-registered; within the window records the
    /// removals and, once the rule trips, holds every removed instance
    /// until its removal + `grace`.
    pub(super) fn on_changes(
        &mut self,
        changes: &Changes,
        present: &InstanceMap,
        grace: Duration,
        now: Instant,
    ) -> HoldStep {
        let mut step = HoldStep::default();
        // A held instance that re-registered is the registry's again.
        self.held.retain(|id, _| present.get(id).is_none());
        if self.window.as_ref().is_some_and(|w| now > w.until) {
            self.window = None;
        }
        let (Some(w), false) = (self.window.as_mut(), grace.is_zero()) else {
            return step;
        };
        for inst in &changes.removed {
            let id = inst.id_arc();
            if w.base.contains(id) && !w.removed.contains_key(id) {
                w.removed.insert(
                    id.clone(),
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
            return step;
        }
        for (id, r) in w.removed.iter_mut() {
            if r.held || present.get(id).is_some() {
                continue;
            }
            r.held = true;
            match r.at.checked_add(grace) {
                Some(until) if until > now => {
                    self.held.insert(id.clone(), (r.record.clone(), until));
                    step.newly_held.push(r.record.clone());
                }
                _ => {}
            }
        }
        step
    }

    /// Drops held instances whose grace ended by `now`; returns them.
    pub(super) fn expire(&mut self, now: Instant) -> Vec<Arc<Instance>> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let gone: Vec<Arc<str>> = self
            .held
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(id, _)| id.clone())
            .collect();
        gone.iter()
            .filter_map(|id| self.held.remove(id).map(|(i, _)| i))
            .collect()
    }

    /// Number of instances held.
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    /// When the next held instance is dropped.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|(_, until)| *until).min()
    }

    /// What is held, for the updates.
    pub(super) fn info(&self, grace: Duration) -> Option<HeldInstances> {
        let until = self.held.values().map(|(_, until)| *until).max()?;
        Some(HeldInstances {
            count: self.held.len(),
            until,
            grace,
        })
    }

    /// The held instances.
    pub(super) fn held(&self) -> impl Iterator<Item = &Arc<Instance>> {
        self.held.values().map(|(i, _)| i)
    }

    /// Whether nothing is held.
    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{RegistryEvent, Version};
    use crate::instance::RevisionInterner;
    use crate::model::ServiceInstance;

    /// A registry state at successive versions, as the machine holds it.
    struct State {
        map: InstanceMap,
        version: u64,
    }

    impl State {
        fn new(ports: &[u16]) -> Self {
            let mut s = Self {
                map: InstanceMap::default(),
                version: 0,
            };
            s.set(ports);
            s
        }

        fn set(&mut self, ports: &[u16]) -> Changes {
            self.version += 1;
            let mut revs = RevisionInterner::default();
            let instances = ports
                .iter()
                .map(|p| {
                    Arc::new(Instance::decode(
                        &ServiceInstance::new("a", "h", *p),
                        &mut revs,
                    ))
                })
                .collect();
            let event = RegistryEvent::Reset {
                version: Version::at(self.version),
                items: instances,
            };
            match self.map.apply(event, usize::MAX) {
                crate::event::MapApplied::Changed(c) => c,
                other => panic!("newer: {other:?}"),
            }
        }
    }

    fn recovered(base: &State, t0: Instant) -> Hold {
        let mut h = Hold::default();
        h.open_window(Some(&base.map), t0);
        h
    }

    fn held_after(h: &mut Hold, s: &mut State, ports: &[u16], g: Duration, at: Instant) -> usize {
        let changes = s.set(ports);
        h.on_changes(&changes, &s.map, g, at).newly_held.len()
    }

    #[test]
    fn holds_only_mass_removals_inside_the_window() {
        let (t0, g) = (Instant::now(), Duration::from_secs(3));
        let four = [1, 2, 3, 4];
        let mut s = State::new(&four);
        let mut h = recovered(&s, t0);
        assert_eq!(
            held_after(&mut h, &mut s, &[1, 2], g, t0),
            0,
            "half is not most"
        );
        let mut s = State::new(&four);
        let mut h = Hold::default();
        assert_eq!(held_after(&mut h, &mut s, &[1], g, t0), 0, "no window");
        let mut s = State::new(&[1]);
        let mut h = recovered(&s, t0);
        assert_eq!(held_after(&mut h, &mut s, &[], g, t0), 0, "single instance");
        let mut h = Hold::default();
        h.open_window(None, t0);
        assert!(!h.in_window(t0), "no previous state, no window");
        let mut s = State::new(&four);
        let mut h = recovered(&s, t0);
        assert_eq!(held_after(&mut h, &mut s, &[1], Duration::ZERO, t0), 0);
        let mut s = State::new(&four);
        let mut h = recovered(&s, t0);
        let late = t0 + MASS_REMOVAL_WINDOW + Duration::from_millis(1);
        assert_eq!(
            held_after(&mut h, &mut s, &[1], g, late),
            0,
            "window closed"
        );
        assert!(h.is_empty());
        let mut s = State::new(&four);
        let mut h = recovered(&s, t0);
        assert_eq!(held_after(&mut h, &mut s, &[1], g, t0), 3);
        assert_eq!(h.info(g).map(|i| i.count), Some(3));
        assert_eq!(h.next_deadline(), Some(t0 + g));
        // Port 2 re-registers: its new record replaces the held one.
        assert_eq!(held_after(&mut h, &mut s, &[1, 2], g, t0), 0);
        assert_eq!(s.map.len() + h.held().count(), 4);
        assert!(h.expire(t0 + g - Duration::from_millis(1)).is_empty());
        assert_eq!(h.expire(t0 + g).len(), 2, "nothing held past the grace");
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
        let mut s = State::new(&[1, 2, 3, 4, 5, 6]);
        let mut h = recovered(&s, t0);
        // One removal per event, as etcd revokes one lease per revision.
        let mut step = |h: &mut Hold, keep: &[u16], at: Instant| held_after(h, &mut s, keep, g, at);
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
        assert_eq!(
            h.expire(t0 + ms(6500)).len(),
            1,
            "2 leaves at its own deadline"
        );
        assert_eq!(h.info(g).map(|i| i.count), Some(3));
        assert!(!h.expire(t0 + ms(6800)).is_empty());
        assert!(h.is_empty(), "nothing held past its grace");
    }
}
