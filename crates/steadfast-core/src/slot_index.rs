//! An index from instance id to slot number that stores only the slot (a
//! `u32` per entry, no key beside it): the instance is read back from the
//! slot through an accessor the caller passes in. Ids are hashed once, at
//! decode ([`Instance`] keeps the hash), so neither a lookup by instance nor
//! a rehash reads an id string; only a lookup by a bare id string hashes it.
//! Used by every stage that keeps an app's instances (the subscription, the
//! resolver's table, the directory's endpoint sets, the embedded registry).

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::instance::Instance;

/// Slot numbers found by the instance stored in each slot.
#[derive(Clone, Debug, Default)]
pub struct SlotIndex {
    table: HashTable<u32>,
}

/// The hash of `id` in every index (what [`Instance::id_hash`] holds).
pub fn hash_id(id: &str) -> u64 {
    FxBuildHasher.hash_one(id)
}

/// Whether slot `k` (read through `at`) holds the instance with `id`
/// (`hash` being its hash): the hashes first, the strings only then.
#[inline]
fn holds<'a>(at: &impl Fn(u32) -> Option<&'a Instance>, k: u32, hash: u64, id: &str) -> bool {
    at(k).is_some_and(|i| i.id_hash() == hash && i.id() == id)
}

/// The hash of the instance in slot `k` (0 for an empty slot: never asked
/// by a consistent caller).
#[inline]
fn hash_at<'a>(at: &impl Fn(u32) -> Option<&'a Instance>, k: u32) -> u64 {
    at(k).map_or(0, Instance::id_hash)
}

impl SlotIndex {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.table.clear();
    }

    /// The slot holding the instance `id` whose hash is `hash`; `at` reads
    /// the instance a slot holds.
    #[inline]
    pub fn find<'a>(
        &self,
        hash: u64,
        id: &str,
        at: impl Fn(u32) -> Option<&'a Instance>,
    ) -> Option<u32> {
        self.table.find(hash, |&k| holds(&at, k, hash, id)).copied()
    }

    /// The slot holding an instance with `inst`'s id.
    #[inline]
    pub fn find_instance<'a>(
        &self,
        inst: &Instance,
        at: impl Fn(u32) -> Option<&'a Instance>,
    ) -> Option<u32> {
        self.find(inst.id_hash(), inst.id(), at)
    }

    /// The slot holding the instance `id` (hashes `id`).
    #[inline]
    pub fn find_id<'a>(&self, id: &str, at: impl Fn(u32) -> Option<&'a Instance>) -> Option<u32> {
        self.find(hash_id(id), id, at)
    }

    /// Adds `slot` (hash `hash`), known not to be present. `at` must read
    /// every slot already indexed (the table may rehash).
    #[inline]
    pub fn insert_unique<'a>(
        &mut self,
        hash: u64,
        slot: u32,
        at: impl Fn(u32) -> Option<&'a Instance>,
    ) {
        self.table.insert_unique(hash, slot, |&k| hash_at(&at, k));
    }

    /// Adds `slot` for `inst` unless its id is present; returns the slot
    /// that holds it then (and adds nothing). One probe. `at` must read
    /// every slot already indexed.
    #[inline]
    pub fn insert_or_find<'a>(
        &mut self,
        inst: &Instance,
        slot: u32,
        at: impl Fn(u32) -> Option<&'a Instance>,
    ) -> Option<u32> {
        let (hash, id) = (inst.id_hash(), inst.id());
        match self
            .table
            .entry(hash, |&k| holds(&at, k, hash, id), |&k| hash_at(&at, k))
        {
            hashbrown::hash_table::Entry::Occupied(e) => Some(*e.get()),
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(slot);
                None
            }
        }
    }

    /// Reserves room for `more` entries (`at` reads every slot indexed).
    pub fn reserve<'a>(&mut self, more: usize, at: impl Fn(u32) -> Option<&'a Instance>) {
        self.table.reserve(more, |&k| hash_at(&at, k));
    }

    /// Removes the entry of instance `id` (hash `hash`); returns its slot.
    pub fn remove<'a>(
        &mut self,
        hash: u64,
        id: &str,
        at: impl Fn(u32) -> Option<&'a Instance>,
    ) -> Option<u32> {
        let entry = self
            .table
            .find_entry(hash, |&k| holds(&at, k, hash, id))
            .ok()?;
        Some(entry.remove().0)
    }

    /// The entry of the instance hashed `hash` that points at `from` now
    /// points at `to` (it moved slots; its old slot may no longer read back).
    pub fn moved(&mut self, hash: u64, from: u32, to: u32) {
        if let Some(k) = self.table.find_mut(hash, |&k| k == from) {
            *k = to;
        }
    }
}
