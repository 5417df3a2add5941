//! Registry events: what a [`crate::Registry`] watch yields (the data
//! path's [`Change`] of an app's instances, removals named by id), and the
//! [`InstanceMap`] the subscription keeps to apply them.
//!
//! A watch yields a Reset (the whole state of the app: on first subscribe,
//! on resubscribe, on resync) and then one Delta per change (only what
//! changed, on top of the version of the app's previous change). The
//! [`Version`] grows monotonically per source; its epoch changes only when
//! the source proves its history restarted (a wiped etcd store starts again
//! at revision 1): a later epoch is newer whatever its revision.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

pub use crate::change::Version;
use crate::change::{Change, Fit};
use crate::instance::Instance;
use crate::instance_set::InstanceSet;
pub use crate::instance_set::{same, ChangeCounts, Changes};

/// One event of a registry watch: the app's instances in full (a Reset, in
/// registry order) or what changed (a Delta: records added or replaced, ids
/// removed).
pub type RegistryEvent = Change<Arc<Instance>>;

/// The instances of one app at one version, in full.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Version of the state listed.
    pub version: Version,
    /// Every instance of the app, in registry order.
    pub instances: Vec<Arc<Instance>>,
}

impl RegistryEvent {
    /// A Reset from a listing.
    pub fn reset(listing: Listing) -> Self {
        Change::Reset {
            version: listing.version,
            items: listing.instances,
        }
    }
}

/// What [`InstanceMap::apply`] did with an event.
#[derive(Debug)]
pub enum MapApplied {
    /// The event applied: what it changed.
    Changed(Changes),
    /// Not newer than the state held: ignored.
    Older,
    /// A delta on top of a state the map never held: not applied (ask the
    /// source for a Reset).
    Gap,
}

/// The instances of one app in registry order, by id, at a version.
#[derive(Clone, Debug, Default)]
pub struct InstanceMap {
    version: Option<Version>,
    set: InstanceSet,
}

impl InstanceMap {
    /// The version held, `None` before the first event.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether the map holds no instance.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The instance with `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<Instance>> {
        self.set.get(id)
    }

    /// Every instance, in registry order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Instance>> {
        self.set.iter()
    }

    /// Applies `event` where it fits the version held (see
    /// [`Change::fit`]). A Reset listing more than `budget` changed
    /// instances reports them by count only (`Changes::upserts` is `None`).
    pub fn apply(&mut self, event: RegistryEvent, budget: usize) -> MapApplied {
        self.apply_keeping(event, budget, true)
    }

    /// [`InstanceMap::apply`], collecting the records a Reset over the
    /// budget removed only when `keep_removed` (their count is kept either
    /// way; see [`InstanceSet::replace_all`]).
    pub fn apply_keeping(
        &mut self,
        event: RegistryEvent,
        budget: usize,
        keep_removed: bool,
    ) -> MapApplied {
        match event.fit(self.version) {
            Fit::Older => return MapApplied::Older,
            Fit::Gap => return MapApplied::Gap,
            Fit::Apply => {}
        }
        self.version = Some(event.version());
        MapApplied::Changed(match event {
            Change::Reset { items, .. } => self.set.replace_all(items, budget, keep_removed),
            Change::Delta {
                upserts, removals, ..
            } => self.apply_delta(upserts, &removals),
        })
    }

    /// Applies one delta in O(its size): removals first, then upserts (the
    /// last upsert of an id wins; an id removed and upserted in one delta is
    /// a replacement, or nothing when the record is the same).
    fn apply_delta(&mut self, upserts: Vec<Arc<Instance>>, removals: &[Arc<str>]) -> Changes {
        let mut changes = Changes::default();
        let mut removed: Vec<Option<Arc<Instance>>> = removals
            .iter()
            .filter_map(|id| self.set.remove(id))
            .map(Some)
            .collect();
        // An id removed and upserted again is a replacement: found by id
        // (through a map when the delta is large).
        let by_id: Option<FxHashMap<Arc<str>, usize>> = (removed.len() > 8).then(|| {
            removed
                .iter()
                .enumerate()
                .filter_map(|(k, r)| Some((r.as_ref()?.id_arc().clone(), k)))
                .collect()
        });
        let upserts = last_of_each_id(upserts);
        let mut up: Vec<Arc<Instance>> = Vec::with_capacity(upserts.len());
        for inst in upserts {
            let old = match self.set.upsert(inst.clone()) {
                Some(old) => Some(old),
                None if removed.is_empty() => None,
                None => {
                    let k = match &by_id {
                        Some(map) => map.get(inst.id()).copied(),
                        None => removed
                            .iter()
                            .position(|r| r.as_ref().is_some_and(|r| r.id() == inst.id())),
                    };
                    k.and_then(|k| removed.get_mut(k)?.take())
                }
            };
            match old {
                Some(old) if same(&old, &inst) => {}
                Some(_) => {
                    changes.replaced += 1;
                    up.push(inst);
                }
                None => {
                    changes.added += 1;
                    up.push(inst);
                }
            }
        }
        changes.upserts = Some(up);
        changes.with_removed(removed.into_iter().flatten().collect())
    }
}

/// `upserts` with only the last record of each id, in order.
fn last_of_each_id(upserts: Vec<Arc<Instance>>) -> Vec<Arc<Instance>> {
    if upserts.len() < 2 {
        return upserts;
    }
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    let keep: Vec<bool> = upserts.iter().rev().map(|i| seen.insert(i.id())).collect();
    upserts
        .iter()
        .zip(keep.iter().rev())
        .filter(|(_, k)| **k)
        .map(|(i, _)| i.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::instance::test_instance as inst;

    fn changed(a: MapApplied) -> Changes {
        match a {
            MapApplied::Changed(c) => c,
            other => panic!("not applied: {other:?}"),
        }
    }

    #[test]
    fn random_deltas_and_resets_match_a_plain_model_and_report_exactly_what_changed() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut map = InstanceMap::default();
        let mut model: BTreeMap<String, Arc<Instance>> = BTreeMap::new();
        let empty = Change::Reset {
            version: Version::default(),
            items: Vec::new(),
        };
        assert!(changed(map.apply(empty, usize::MAX)).is_empty());
        let mut base = Version::default();
        for v in 1..3000u64 {
            let before = model.clone();
            let version = Version::at(v);
            let event = if rng.gen_ratio(1, 10) {
                let all: Vec<Arc<Instance>> = (0..rng.gen_range(0..20))
                    .map(|_| inst(rng.gen_range(0..30), rng.gen_range(0..3)))
                    .collect();
                model = all
                    .iter()
                    .map(|i| (i.id().to_string(), i.clone()))
                    .collect();
                Change::Reset {
                    version,
                    items: all,
                }
            } else {
                let removals: Vec<Arc<str>> = (0..rng.gen_range(0..4))
                    .map(|_| Arc::from(format!("h:{}", rng.gen_range(0..30u16))))
                    .collect();
                let upserts: Vec<Arc<Instance>> = (0..rng.gen_range(0..4))
                    .map(|_| inst(rng.gen_range(0..30), rng.gen_range(0..3)))
                    .collect();
                for id in &removals {
                    model.remove(id.as_ref());
                }
                for i in &upserts {
                    model.insert(i.id().to_string(), i.clone());
                }
                Change::Delta {
                    base,
                    version,
                    upserts,
                    removals,
                }
            };
            let replay = event.clone();
            let changes = changed(map.apply(event, usize::MAX));
            base = version;
            let mut got: Vec<&str> = map.iter().map(|i| i.id()).collect();
            got.sort_unstable();
            let want: Vec<&str> = model.keys().map(String::as_str).collect();
            assert_eq!(got, want, "step {v}");
            for (id, i) in &model {
                assert!(same(map.get(id).unwrap(), i));
            }
            // Exactly what changed, once each.
            let upserts = changes.upserts.clone().expect("within budget");
            let removed: Vec<&str> = changes.removed.iter().map(|i| i.id()).collect();
            for id in model.keys() {
                let now = &model[id];
                let listed = upserts.iter().filter(|u| u.id() == id).count();
                match before.get(id) {
                    Some(w) if same(w, now) => assert_eq!(listed, 0, "unchanged {id}"),
                    _ => assert_eq!(listed, 1, "changed {id} at step {v}"),
                }
            }
            for id in before.keys().filter(|k| !model.contains_key(*k)) {
                assert_eq!(removed.iter().filter(|r| **r == id.as_str()).count(), 1);
            }
            assert_eq!(changes.added + changes.replaced, upserts.len());
            match map.apply(replay, usize::MAX) {
                MapApplied::Older => {}
                MapApplied::Changed(c) => assert!(c.is_empty(), "a Reset replay changes nothing"),
                MapApplied::Gap => panic!("a replay is no gap"),
            }
        }
    }

    #[test]
    fn a_delta_that_does_not_follow_is_a_gap() {
        let mut map = InstanceMap::default();
        let d = |base, version| Change::Delta {
            base: Version::at(base),
            version: Version::at(version),
            upserts: vec![inst(1, 1)],
            removals: Vec::new(),
        };
        assert!(
            matches!(map.apply(d(0, 1), 9), MapApplied::Gap),
            "nothing held"
        );
        let reset = Change::Reset {
            version: Version::at(5),
            items: vec![inst(2, 1)],
        };
        assert!(matches!(map.apply(reset, 9), MapApplied::Changed(_)));
        assert!(
            matches!(map.apply(d(6, 7), 9), MapApplied::Gap),
            "6 was never seen"
        );
        assert!(matches!(map.apply(d(3, 5), 9), MapApplied::Older));
        assert!(matches!(map.apply(d(4, 7), 9), MapApplied::Changed(_)));
        assert_eq!(map.version(), Some(Version::at(7)));
    }
}
