//! The resolver's instance table: every instance of the app in a slab (a
//! stable small slot number each, reused after removal) with an id index,
//! per-revision instance counts, the last-known-good revision of instances
//! whose current revision is unresolved, and running counts of instances
//! that do not serve. Every edit is O(1); nothing here walks the app.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::instance::Instance;
use crate::update::NotServing;

/// One instance of the app.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) instance: Arc<Instance>,
    /// A resolved revision the instance served before its current,
    /// unresolved one (its URLs are kept while that metadata is known).
    pub(super) good: Option<Arc<str>>,
}

/// The instances of the app by slot and id.
#[derive(Debug, Default)]
pub(super) struct Table {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Slot numbers, found by the id of the instance in the slot (one
    /// `u32` per instance, no key beside it).
    index: HashTable<u32>,
    /// Instances advertising each revision.
    rev_count: FxHashMap<Arc<str>, usize>,
    /// Slots whose last-known-good is each revision.
    good_refs: FxHashMap<Arc<str>, usize>,
    serving: usize,
    not_serving: NotServing,
}

fn hash_id(id: &str) -> u64 {
    FxBuildHasher.hash_one(id)
}

fn bump(map: &mut FxHashMap<Arc<str>, usize>, key: &Arc<str>, up: bool) {
    if up {
        *map.entry(key.clone()).or_default() += 1;
    } else if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Table {
    /// Number of instances.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the app has no instance.
    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Number of slots (live or free): slot numbers are below it.
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The instance in `slot`.
    pub(super) fn get(&self, slot: u32) -> Option<&Slot> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// The slot of instance `id`.
    pub(super) fn slot_of(&self, id: &str) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash_id(id), |&k| Self::id_at(slots, k) == Some(id))
            .copied()
    }

    fn id_at(slots: &[Option<Slot>], k: u32) -> Option<&str> {
        slots
            .get(k as usize)
            .and_then(Option::as_ref)
            .map(|s| s.instance.id())
    }

    /// Every live slot with its instance, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(k, s)| Some((k as u32, s.as_ref()?)))
    }

    /// Whether some instance advertises `rev`.
    pub(super) fn has_revision(&self, rev: &str) -> bool {
        self.rev_count.contains_key(rev)
    }

    /// Whether some slot keeps `rev` as its last-known-good.
    pub(super) fn is_good_for_some(&self, rev: &str) -> bool {
        self.good_refs.contains_key(rev)
    }

    /// Whether some instance may take traffic.
    pub(super) fn any_serving(&self) -> bool {
        self.serving > 0
    }

    /// Why the instances that do not serve do not.
    pub(super) fn not_serving(&self) -> NotServing {
        self.not_serving
    }

    fn track(&mut self, slot: &Slot, up: bool) {
        let inst = &slot.instance;
        if let Some(rev) = inst.revision_arc() {
            bump(&mut self.rev_count, rev, up);
        }
        if let Some(good) = &slot.good {
            bump(&mut self.good_refs, good, up);
        }
        if inst.is_serving() {
            self.serving = if up {
                self.serving.saturating_add(1)
            } else {
                self.serving.saturating_sub(1)
            };
        }
        self.not_serving.track(inst, up);
    }

    /// Removes instance `id`; returns its slot and record.
    pub(super) fn remove(&mut self, id: &str) -> Option<(u32, Slot)> {
        let slots = &self.slots;
        let entry = self
            .index
            .find_entry(hash_id(id), |&k| Self::id_at(slots, k) == Some(id))
            .ok()?;
        let (k, _) = entry.remove();
        let old = self.slots.get_mut(k as usize)?.take()?;
        self.track(&old, false);
        self.free.push(k);
        Some((k, old))
    }

    /// Adds or replaces the instance with `slot.instance`'s id; returns its
    /// slot and the record it replaced.
    pub(super) fn upsert(&mut self, slot: Slot) -> (u32, Option<Slot>) {
        let hash = hash_id(slot.instance.id());
        self.track(&slot, true);
        if let Some(k) = self.slot_of(slot.instance.id()) {
            let old = self.slots.get_mut(k as usize).and_then(|s| s.replace(slot));
            if let Some(old) = &old {
                self.track(old, false);
            }
            return (k, old);
        }
        let k = match self.free.pop() {
            Some(k) => {
                if let Some(s) = self.slots.get_mut(k as usize) {
                    *s = Some(slot);
                }
                k
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.index.insert_unique(hash, k, |&j| {
            hash_id(Self::id_at(slots, j).unwrap_or_default())
        });
        (k, None)
    }

    /// Sets the last-known-good revision of `slot`.
    pub(super) fn set_good(&mut self, slot: u32, good: Option<Arc<str>>) {
        let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.good == good {
            return;
        }
        let old = std::mem::replace(&mut s.good, good.clone());
        if let Some(old) = &old {
            bump(&mut self.good_refs, old, false);
        }
        if let Some(good) = &good {
            bump(&mut self.good_refs, good, true);
        }
    }
}
