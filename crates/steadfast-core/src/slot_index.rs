//! An index from instance id to slot number that stores no key beside the
//! slot: an entry is the slot (`u32`, 4 bytes), and the instance is read
//! back from the slot through an accessor the caller passes in. The table's
//! own 7-bit tags (from the top of the hash) filter candidates first, so a
//! probe that misses reads an instance only on a tag collision (about one
//! probe in ten). Ids are hashed once, at decode ([`Instance`] keeps the
//! hash), so neither a lookup by instance nor a rehash reads an id string;
//! only a lookup by a bare id string hashes it.
//! Used by every stage that keeps an app's instances (the subscription, the
//! resolver's table, the directory's endpoint sets, the embedded registry):
//! 4 bytes an entry rather than 8 is ~5 B per instance and stage.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::instance::Instance;

/// Slot numbers found by the instance stored in each slot.
#[derive(Clone, Debug, Default)]
pub struct SlotIndex {
    table: HashTable<Entry>,
}

/// One entry: the slot holding the instance.
#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: u32,
}

/// The hash of `id` in every index (what [`Instance::id_hash`] holds):
/// FxHash, then a full avalanche (murmur3's finalizer). The index's tag is
/// the hash's top 7 bits; FxHash alone leaves them poorly mixed for ids that
/// differ in a few characters (`10.0.1.2:20001`, `10.0.1.3:20001`), so a
/// probe would compare many ids through their instances.
pub fn hash_id(id: &str) -> u64 {
    let mut x = FxBuildHasher.hash_one(id);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Whether entry `e` (its instance read through `at`) holds the instance
/// with `id` (`hash` being its hash): the instance's hash first, its id
/// only then.
#[inline]
fn holds<'a>(at: &impl Fn(u32) -> Option<&'a Instance>, e: &Entry, hash: u64, id: &str) -> bool {
    at(e.slot).is_some_and(|i| i.id_hash() == hash && i.id() == id)
}

/// The hash of the instance of entry `e` (0 for an empty slot: never asked
/// by a consistent caller).
#[inline]
fn hash_at<'a>(at: &impl Fn(u32) -> Option<&'a Instance>, e: &Entry) -> u64 {
    at(e.slot).map_or(0, Instance::id_hash)
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
        self.table
            .find(hash, |e| holds(&at, e, hash, id))
            .map(|e| e.slot)
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
        self.table
            .insert_unique(hash, Entry { slot }, |e| hash_at(&at, e));
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
            .entry(hash, |e| holds(&at, e, hash, id), |e| hash_at(&at, e))
        {
            hashbrown::hash_table::Entry::Occupied(e) => Some(e.get().slot),
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(Entry { slot });
                None
            }
        }
    }

    /// Reserves room for `more` entries (`at` reads every slot indexed).
    pub fn reserve<'a>(&mut self, more: usize, at: impl Fn(u32) -> Option<&'a Instance>) {
        self.table.reserve(more, |e| hash_at(&at, e));
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
            .find_entry(hash, |e| holds(&at, e, hash, id))
            .ok()?;
        Some(entry.remove().0.slot)
    }

    /// The entry of the instance hashed `hash` that points at `from` now
    /// points at `to` (it moved slots; its old slot may no longer read back).
    pub fn moved(&mut self, hash: u64, from: u32, to: u32) {
        if let Some(e) = self.table.find_mut(hash, |e| e.slot == from) {
            e.slot = to;
        }
    }
}
