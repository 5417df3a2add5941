//! An index from instance id to slot number that stores only the slot (a
//! `u32` per entry, no key beside it): the id is read back from the slot
//! through a lookup the caller passes in. Used by the resolver's table and
//! the directory's endpoint sets, where a key per entry would cost more
//! than the entry itself.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Slot numbers found by the id stored in each slot.
#[derive(Clone, Debug, Default)]
pub struct SlotIndex {
    table: HashTable<u32>,
}

/// The hash of `id` in every index.
pub(crate) fn hash_id(id: &str) -> u64 {
    FxBuildHasher.hash_one(id)
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

    /// The slot holding `id`; `id_of` reads the id a slot holds.
    pub fn find<'a>(&self, id: &str, id_of: impl Fn(u32) -> Option<&'a str>) -> Option<u32> {
        self.table
            .find(hash_id(id), |&k| id_of(k) == Some(id))
            .copied()
    }

    /// Adds `slot` for `id` (not present yet). `id_of` must already read
    /// `id` back from `slot`: the table may rehash while inserting.
    pub fn insert<'a>(&mut self, id: &str, slot: u32, id_of: impl Fn(u32) -> Option<&'a str>) {
        self.table.insert_unique(hash_id(id), slot, |&k| {
            hash_id(id_of(k).unwrap_or_default())
        });
    }

    /// Adds `slot` for `id` unless `id` is present; returns the slot that
    /// holds it then (and adds nothing). One probe. `id_of` must already
    /// read `id` back from `slot`: the table may rehash while inserting.
    pub fn insert_or_find<'a>(
        &mut self,
        id: &str,
        slot: u32,
        id_of: impl Fn(u32) -> Option<&'a str>,
    ) -> Option<u32> {
        self.insert_or_find_hashed(hash_id(id), id, slot, id_of)
    }

    /// [`SlotIndex::insert_or_find`] with `hash`, which must be
    /// `hash_id(id)` (e.g. [`Instance::id_hash`](crate::Instance)).
    pub(crate) fn insert_or_find_hashed<'a>(
        &mut self,
        hash: u64,
        id: &str,
        slot: u32,
        id_of: impl Fn(u32) -> Option<&'a str>,
    ) -> Option<u32> {
        match self.table.entry(
            hash,
            |&k| id_of(k) == Some(id),
            |&k| hash_id(id_of(k).unwrap_or_default()),
        ) {
            hashbrown::hash_table::Entry::Occupied(e) => Some(*e.get()),
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(slot);
                None
            }
        }
    }

    /// Reserves room for `more` entries.
    pub fn reserve<'a>(&mut self, more: usize, id_of: impl Fn(u32) -> Option<&'a str>) {
        self.table
            .reserve(more, |&k| hash_id(id_of(k).unwrap_or_default()));
    }

    /// Removes the entry of `id`; returns its slot.
    pub fn remove<'a>(&mut self, id: &str, id_of: impl Fn(u32) -> Option<&'a str>) -> Option<u32> {
        let entry = self
            .table
            .find_entry(hash_id(id), |&k| id_of(k) == Some(id))
            .ok()?;
        Some(entry.remove().0)
    }

    /// The entry of `id` that points at `from` now points at `to` (the
    /// instance moved slots; its old slot may no longer read back).
    pub fn moved(&mut self, id: &str, from: u32, to: u32) {
        if let Some(k) = self.table.find_mut(hash_id(id), |&k| k == from) {
            *k = to;
        }
    }
}
