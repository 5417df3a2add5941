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

use rustc_hash::FxHashSet;

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

    /// The same changes as a delta at `version` (upserts, removals).
    pub fn to_delta(&self, version: Version) -> RegistryEvent {
        RegistryEvent::Delta {
            version,
            upserts: self
                .added
                .iter()
                .chain(self.replaced.iter().map(|(_, new)| new))
                .cloned()
                .collect(),
            removals: self.removed.iter().map(|i| i.id_arc().clone()).collect(),
        }
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
            } => {
                let mut changes = Changes::default();
                for id in removals {
                    if let Some(old) = self.by_id.take(id.as_ref()) {
                        changes.removed.push(old.0);
                    }
                }
                for inst in upserts {
                    self.upsert(inst, &mut changes);
                }
                changes
            }
        })
    }

    /// Applies a full listing at a version not older than the map (equal
    /// included: a source that lost a notification lists a different
    /// state at the version the map holds, and the listing is the truth).
    /// Returns what changed, `None` when the listing is older.
    pub fn reconcile(&mut self, listing: &Listing) -> Option<Changes> {
        if self.version.is_some_and(|v| listing.version < v) {
            return None;
        }
        self.version = Some(listing.version);
        Some(self.replace_all(&listing.instances))
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

    fn upsert(&mut self, inst: &Arc<Instance>, changes: &mut Changes) {
        match self.by_id.replace(ById(inst.clone())).map(|b| b.0) {
            None => {
                // Re-added after its removal in the same delta: a replacement.
                if let Some(pos) = changes.removed.iter().position(|r| r.id() == inst.id()) {
                    let old = changes.removed.swap_remove(pos);
                    if !same(&old, inst) {
                        changes.replaced.push((old, inst.clone()));
                    }
                } else {
                    changes.added.push(inst.clone());
                }
            }
            Some(old) if !same(&old, inst) => {
                // A second upsert of the same id in one delta: one change.
                if let Some(pos) = changes.added.iter().position(|a| a.id() == inst.id()) {
                    changes.added[pos] = inst.clone();
                } else if let Some(r) = changes.replaced.iter_mut().find(|r| r.1.id() == inst.id())
                {
                    r.1 = inst.clone();
                } else {
                    changes.replaced.push((old, inst.clone()));
                }
            }
            Some(_) => {}
        }
    }

    /// Every instance as a listing at the map's version.
    pub fn to_listing(&self) -> Listing {
        Listing {
            version: self.version.unwrap_or_default(),
            instances: self.iter().cloned().collect(),
        }
    }
}

/// Whether two records are the same (pointer first, then content).
pub fn same(a: &Arc<Instance>, b: &Arc<Instance>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}
