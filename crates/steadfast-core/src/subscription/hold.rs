//! The mass-expiry hold of one app: instances a registry removed all at
//! once right after it recovered from an outage (a frozen etcd that resumes
//! expires every lease whose TTL elapsed meanwhile, though the providers are
//! alive) are kept for a bounded grace while their providers re-register.
//!
//! The rule, checked on every snapshot:
//! - it applies only within [`MASS_REMOVAL_WINDOW`] after the stale mark
//!   cleared (the snapshot that clears it included);
//! - a removal is "mass" when it takes away at least [`MASS_REMOVAL_MIN`]
//!   instances AND more than half of the previous snapshot's instances; a
//!   removal of a single instance is therefore never delayed;
//! - each held instance is dropped at its own deadline (held since + grace),
//!   re-registered or not: nothing is held past the grace;
//! - an instance that re-registers (same id) during the grace replaces the
//!   held record at once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Snapshot;
use crate::model::ServiceInstance;
use crate::update::HeldInstances;

/// How long after a registry recovery a mass removal is held.
pub const MASS_REMOVAL_WINDOW: Duration = Duration::from_secs(10);

/// Fewest instances one snapshot must remove for the removal to count as a
/// mass expiry (it must also remove more than half of them).
pub const MASS_REMOVAL_MIN: usize = 2;

/// The instances held for one app.
#[derive(Debug, Default)]
pub(super) struct Hold {
    /// Held instances by id, with the instant each is dropped.
    held: BTreeMap<String, (ServiceInstance, Instant)>,
}

impl Hold {
    /// Takes in the next snapshot `next` replacing `prev`. Drops held
    /// instances that re-registered, and when `mass_window` is open holds
    /// the instances of a mass removal until `now + grace`. Returns how many
    /// instances it newly holds.
    pub(super) fn on_snapshot(
        &mut self,
        prev: Option<&[ServiceInstance]>,
        next: &[ServiceInstance],
        mass_window: bool,
        grace: Duration,
        now: Instant,
    ) -> usize {
        let next_ids: HashSet<&str> = next.iter().map(|i| i.id.as_str()).collect();
        self.held.retain(|id, _| !next_ids.contains(id.as_str()));
        let (Some(prev), true, false) = (prev, mass_window, grace.is_zero()) else {
            return 0;
        };
        let Some(until) = now.checked_add(grace) else {
            return 0;
        };
        let removed: Vec<&ServiceInstance> = prev
            .iter()
            .filter(|i| !next_ids.contains(i.id.as_str()))
            .collect();
        if removed.len() < MASS_REMOVAL_MIN || removed.len().saturating_mul(2) <= prev.len() {
            return 0;
        }
        let mut fresh = 0;
        for inst in removed {
            self.held.entry(inst.id.clone()).or_insert_with(|| {
                fresh += 1;
                (inst.clone(), until)
            });
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

    #[test]
    fn holds_only_mass_removals_inside_the_window() {
        let (t0, g) = (Instant::now(), Duration::from_secs(3));
        let prev = insts(&[1, 2, 3, 4]);
        let mut h = Hold::default();
        assert_eq!(
            h.on_snapshot(Some(&prev), &insts(&[1, 2]), true, g, t0),
            0,
            "half is not most"
        );
        assert_eq!(
            h.on_snapshot(Some(&prev), &insts(&[1]), false, g, t0),
            0,
            "window closed"
        );
        assert_eq!(
            h.on_snapshot(Some(&insts(&[1])), &[], true, g, t0),
            0,
            "single instance"
        );
        assert_eq!(
            h.on_snapshot(None, &[], true, g, t0),
            0,
            "no previous state"
        );
        assert_eq!(
            h.on_snapshot(Some(&prev), &insts(&[1]), true, Duration::ZERO, t0),
            0
        );
        assert!(h.is_empty());
        assert_eq!(h.on_snapshot(Some(&prev), &insts(&[1]), true, g, t0), 3);
        assert_eq!(h.info(g).map(|i| i.count), Some(3));
        assert_eq!(h.next_deadline(), Some(t0 + g));
        // Port 2 re-registers: its new record replaces the held one.
        assert_eq!(
            h.on_snapshot(Some(&insts(&[1])), &insts(&[1, 2]), true, g, t0),
            0
        );
        assert_eq!(h.merged(&Arc::new(insts(&[1, 2]))).len(), 4);
        assert!(!h.expire(t0 + g - Duration::from_millis(1)));
        assert!(h.expire(t0 + g), "nothing held past the grace");
        assert!(h.is_empty());
        assert_eq!(h.info(g), None);
    }
}
