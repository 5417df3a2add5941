//! Versioned registry events: what a [`crate::Registry`] watch yields, and
//! the [`InstanceMap`] every stage keeps to apply them.
//!
//! A watch yields a [`RegistryEvent::Reset`] (the whole state of the app: on
//! first subscribe, on resubscribe, on resync) and then one
//! [`RegistryEvent::Delta`] per change (only what changed). Each carries a
//! [`Version`] that grows monotonically per source; a stage holding state at
//! version `v` ignores every event at `v` or older, so a replay of an older
//! state (a lagging member, a late resync) is never served. The version's
//! epoch changes only when the source proves its history restarted (a wiped
//! etcd store starts again at revision 1): a later epoch is newer whatever
//! its revision.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::instance::Instance;

/// Position of a state in its source's history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Bumped when the source's history restarted (a wiped store).
    pub epoch: u64,
    /// Monotonic within an epoch (etcd: the store revision).
    pub revision: u64,
}

impl Version {
    /// Version `revision` of epoch 0.
    pub const fn at(revision: u64) -> Self {
        Self { epoch: 0, revision }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.epoch == 0 {
            write!(f, "{}", self.revision)
        } else {
            write!(f, "{}:{}", self.epoch, self.revision)
        }
    }
}

/// The instances of one app at one version, in full.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Version of the state listed.
    pub version: Version,
    /// Every instance of the app.
    pub instances: Vec<Arc<Instance>>,
}

/// One event of a registry watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryEvent {
    /// The whole state of the app replaces what the receiver holds.
    Reset {
        /// Version of the state.
        version: Version,
        /// Every instance of the app.
        instances: Vec<Arc<Instance>>,
    },
    /// What changed since the previous event.
    Delta {
        /// Version after the change.
        version: Version,
        /// Instances added or replaced (by id).
        upserts: Vec<Arc<Instance>>,
        /// Ids of instances removed.
        removals: Vec<Arc<str>>,
    },
}

impl RegistryEvent {
    /// The event's version.
    pub fn version(&self) -> Version {
        match self {
            RegistryEvent::Reset { version, .. } | RegistryEvent::Delta { version, .. } => *version,
        }
    }

    /// A Reset from a listing.
    pub fn reset(listing: Listing) -> Self {
        RegistryEvent::Reset {
            version: listing.version,
            instances: listing.instances,
        }
    }
}

/// The effect of an event on an [`InstanceMap`]: only what really changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Instances that appeared.
    pub added: Vec<Arc<Instance>>,
    /// Instances replaced by a different record: (old, new).
    pub replaced: Vec<(Arc<Instance>, Arc<Instance>)>,
    /// Instances that left.
    pub removed: Vec<Arc<Instance>>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.replaced.is_empty() && self.removed.is_empty()
    }

    /// Number of instances that changed.
    pub fn len(&self) -> usize {
        self.added
            .len()
            .saturating_add(self.replaced.len())
            .saturating_add(self.removed.len())
    }
}

/// An instance in a set keyed by its id (the set stores one pointer per
/// instance, not a key beside it).
#[derive(Clone, Debug)]
pub struct ById(pub Arc<Instance>);

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id() == other.0.id()
    }
}

impl Eq for ById {}

impl std::hash::Hash for ById {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that lookups by `&str` find it.
        self.0.id().hash(state)
    }
}

impl std::borrow::Borrow<str> for ById {
    fn borrow(&self) -> &str {
        self.0.id()
    }
}

/// The instances of one app by id, at a version.
#[derive(Clone, Debug, Default)]
pub struct InstanceMap {
    version: Option<Version>,
    by_id: FxHashSet<ById>,
}

impl InstanceMap {
    /// The version held, `None` before the first event.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the map holds no instance.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The instance with `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<Instance>> {
        self.by_id.get(id).map(|b| &b.0)
    }

    /// Every instance, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Instance>> {
        self.by_id.iter().map(|b| &b.0)
    }

    /// Whether `version` is newer than what the map holds.
    pub fn is_newer(&self, version: Version) -> bool {
        self.version.is_none_or(|v| version > v)
    }

    /// Applies `event` when it is newer than the map, returning what changed
    /// (`None`: the event is not newer and was ignored).
    pub fn apply(&mut self, event: &RegistryEvent) -> Option<Changes> {
        if !self.is_newer(event.version()) {
            return None;
        }
        self.version = Some(event.version());
        Some(match event {
            RegistryEvent::Reset { instances, .. } => self.replace_all(instances),
            RegistryEvent::Delta {
                upserts, removals, ..
            } => self.apply_delta(upserts, removals),
        })
    }

    /// Applies a full state at a version not older than the map (equal
    /// included: a source that lost a notification lists a different
    /// state at the version the map holds, and the listing is the truth).
    /// Returns what changed, `None` when the listing is older.
    pub fn reconcile(&mut self, version: Version, instances: &[Arc<Instance>]) -> Option<Changes> {
        if self.version.is_some_and(|v| version < v) {
            return None;
        }
        self.version = Some(version);
        Some(self.replace_all(instances))
    }

    /// Replaces the whole state by `instances` (later duplicates of an id
    /// win), returning what changed; one pass.
    fn replace_all(&mut self, instances: &[Arc<Instance>]) -> Changes {
        let mut changes = Changes::default();
        let mut next: FxHashSet<ById> = FxHashSet::default();
        next.reserve(instances.len());
        for inst in instances {
            next.replace(ById(inst.clone()));
        }
        for new in &next {
            match self.by_id.get(new.0.id()) {
                None => changes.added.push(new.0.clone()),
                Some(old) if !same(&old.0, &new.0) => {
                    changes.replaced.push((old.0.clone(), new.0.clone()))
                }
                Some(_) => {}
            }
        }
        for old in &self.by_id {
            if !next.contains(old.0.id()) {
                changes.removed.push(old.0.clone());
            }
        }
        self.by_id = next;
        changes
    }

    /// Applies one delta in O(its size): removals first, then upserts (the
    /// last upsert of an id wins; an id removed and upserted in one delta is
    /// a replacement).
    fn apply_delta(&mut self, upserts: &[Arc<Instance>], removals: &[Arc<str>]) -> Changes {
        let mut changes = Changes::default();
        let mut removed: FxHashMap<&str, Arc<Instance>> = FxHashMap::default();
        for id in removals {
            if let Some(old) = self.by_id.take(id.as_ref()) {
                removed.insert(id.as_ref(), old.0);
            }
        }
        let last: Vec<&Arc<Instance>> = if upserts.len() > 1 {
            let mut seen: FxHashSet<&str> = FxHashSet::default();
            let mut kept: Vec<&Arc<Instance>> = upserts
                .iter()
                .rev()
                .filter(|i| seen.insert(i.id()))
                .collect();
            kept.reverse();
            kept
        } else {
            upserts.iter().collect()
        };
        for inst in last {
            match self.by_id.replace(ById(inst.clone())).map(|b| b.0) {
                None => match removed.remove(inst.id()) {
                    Some(old) if !same(&old, inst) => changes.replaced.push((old, inst.clone())),
                    Some(_) => {}
                    None => changes.added.push(inst.clone()),
                },
                Some(old) if !same(&old, inst) => changes.replaced.push((old, inst.clone())),
                Some(_) => {}
            }
        }
        changes.removed = removed.into_values().collect();
        changes
    }
}

/// Whether two records are the same (pointer first, then content).
pub fn same(a: &Arc<Instance>, b: &Arc<Instance>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::instance::RevisionInterner;
    use crate::model::ServiceInstance;

    fn inst(port: u16, weight: u32) -> Arc<Instance> {
        let mut r = ServiceInstance::new("a", "h", port);
        r.weight = weight;
        Arc::new(Instance::decode(&r, &mut RevisionInterner::default()))
    }

    #[test]
    fn random_deltas_and_resets_match_a_plain_model_and_report_exactly_what_changed() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut map = InstanceMap::default();
        let mut model: BTreeMap<String, Arc<Instance>> = BTreeMap::new();
        for v in 1..3000u64 {
            let before = model.clone();
            let event = if rng.gen_ratio(1, 10) {
                let all: Vec<Arc<Instance>> = (0..rng.gen_range(0..20))
                    .map(|_| inst(rng.gen_range(0..30), rng.gen_range(0..3)))
                    .collect();
                model = all
                    .iter()
                    .map(|i| (i.id().to_string(), i.clone()))
                    .collect();
                RegistryEvent::Reset {
                    version: Version::at(v),
                    instances: all,
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
                RegistryEvent::Delta {
                    version: Version::at(v),
                    upserts,
                    removals,
                }
            };
            let changes = map.apply(&event).expect("newer");
            let mut got: Vec<&str> = map.iter().map(|i| i.id()).collect();
            got.sort_unstable();
            let want: Vec<&str> = model.keys().map(String::as_str).collect();
            assert_eq!(got, want, "step {v}");
            for (id, i) in &model {
                assert!(same(map.get(id).unwrap(), i));
            }
            // Exactly what changed, once each.
            let added: Vec<&str> = changes.added.iter().map(|i| i.id()).collect();
            let removed: Vec<&str> = changes.removed.iter().map(|i| i.id()).collect();
            for id in model.keys() {
                let was = before.get(id);
                let now = &model[id];
                let changed = changes
                    .replaced
                    .iter()
                    .filter(|(_, n)| n.id() == id)
                    .count();
                match was {
                    None => assert!(added.contains(&id.as_str()) && changed == 0),
                    Some(w) if same(w, now) => {
                        assert!(changed == 0 && !added.contains(&id.as_str()))
                    }
                    Some(_) => assert_eq!(changed, 1),
                }
            }
            for id in before.keys().filter(|k| !model.contains_key(*k)) {
                assert_eq!(removed.iter().filter(|r| **r == id.as_str()).count(), 1);
            }
            assert_eq!(
                changes.len(),
                added.len() + removed.len() + changes.replaced.len()
            );
            assert!(map.apply(&event).is_none(), "a replay is not newer");
        }
    }
}
