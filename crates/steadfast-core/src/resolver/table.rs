//! The resolver's instance table: every instance of the app in a slab (a
//! stable small slot number each, reused after removal) with an id index,
//! per-revision instance counts, the last-known-good revision of instances
//! whose current revision is unresolved, and running counts of instances
//! that do not serve. Every edit is O(1); nothing here walks the app. A
//! slot costs one pointer plus its index entry (a `u32`); last-known-good
//! revisions, rare, live in a side map.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::instance::Instance;
use crate::slot_index::{hash_id, SlotIndex};
use crate::update::NotServing;

/// One instance of the app, as given to and taken from the table.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) instance: Arc<Instance>,
    /// A resolved revision the instance served before its current,
    /// unresolved one (its URLs are kept while that metadata is known).
    pub(super) good: Option<Arc<str>>,
}

/// One instance of the app, as read in the table.
#[derive(Clone, Copy, Debug)]
pub(super) struct SlotRef<'a> {
    pub(super) instance: &'a Arc<Instance>,
    pub(super) good: Option<&'a Arc<str>>,
}

/// The instances of the app by slot and id.
#[derive(Debug, Default)]
pub(super) struct Table {
    slots: Vec<Option<Arc<Instance>>>,
    /// Last-known-good revisions by slot (only slots that have one).
    goods: FxHashMap<u32, Arc<str>>,
    free: Vec<u32>,
    index: SlotIndex,
    /// Instances advertising each revision.
    rev_count: FxHashMap<Arc<str>, usize>,
    /// Slots whose last-known-good is each revision.
    good_refs: FxHashMap<Arc<str>, usize>,
    serving: usize,
    not_serving: NotServing,
}

fn bump(map: &mut FxHashMap<Arc<str>, usize>, key: &Arc<str>, up: bool) {
    if up {
        match map.get_mut(key) {
            Some(n) => *n = n.saturating_add(1),
            None => {
                map.insert(key.clone(), 1);
            }
        }
    } else if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// The instance in slot `k` of `slots`.
#[inline]
fn at<'a>(slots: &'a [Option<Arc<Instance>>]) -> impl Fn(u32) -> Option<&'a Instance> + 'a {
    move |k| slots.get(k as usize)?.as_deref()
}

impl Table {
    /// An empty table with room for `n` instances.
    pub(super) fn with_capacity(n: usize) -> Self {
        let mut t = Self::default();
        t.slots.reserve_exact(n);
        t.index.reserve(n, |_| None);
        t
    }

    /// A table of `all` in their order (a repeated id replaces the
    /// instance in its first slot, as [`Table::upsert`] would), with no
    /// last-known-good; also returns the instances a repeated id replaced.
    /// One index probe per instance; revisions are counted by allocation
    /// (they are interned per app) and merged by content once at the end.
    pub(super) fn from_reset(all: Vec<Arc<Instance>>) -> (Self, Vec<Arc<Instance>>) {
        let mut t = Self::with_capacity(all.len());
        let mut replaced = Vec::new();
        let mut counts: FxHashMap<*const u8, (Arc<str>, usize)> = FxHashMap::default();
        for inst in all {
            if let Some(rev) = inst.revision_arc() {
                let e = counts
                    .entry(rev.as_ptr())
                    .or_insert_with(|| (rev.clone(), 0));
                e.1 = e.1.saturating_add(1);
            }
            t.track_serving(&inst, true);
            // Slots are u32: an app holds fewer than 2^32 instances.
            let k = t.slots.len() as u32;
            let (slots, index) = (&t.slots, &mut t.index);
            let Some(j) = index.insert_or_find(&inst, k, at(slots)) else {
                t.slots.push(Some(inst));
                continue;
            };
            // A repeated id: the later record replaces the first one.
            let Some(old) = t.slots.get_mut(j as usize).and_then(|s| s.replace(inst)) else {
                continue;
            };
            if let Some(e) = old.revision_arc().and_then(|r| counts.get_mut(&r.as_ptr())) {
                e.1 = e.1.saturating_sub(1);
            }
            t.track_serving(&old, false);
            replaced.push(old);
        }
        t.rev_count.reserve(counts.len());
        for (_, (rev, n)) in counts {
            if n > 0 {
                let c = t.rev_count.entry(rev).or_default();
                *c = c.saturating_add(n);
            }
        }
        (t, replaced)
    }

    /// Every revision some instance advertises.
    pub(super) fn revisions(&self) -> impl Iterator<Item = &Arc<str>> {
        self.rev_count.keys()
    }

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
    pub(super) fn get(&self, slot: u32) -> Option<SlotRef<'_>> {
        let instance = self.slots.get(slot as usize)?.as_ref()?;
        Some(SlotRef {
            instance,
            good: self.goods.get(&slot),
        })
    }

    /// The slot of the instance with `inst`'s id.
    pub(super) fn slot_of(&self, inst: &Instance) -> Option<u32> {
        self.index.find_instance(inst, at(&self.slots))
    }

    /// Every live slot with its instance, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, SlotRef<'_>)> {
        self.slots.iter().enumerate().filter_map(|(k, s)| {
            let k = k as u32;
            Some((
                k,
                SlotRef {
                    instance: s.as_ref()?,
                    good: self.goods.get(&k),
                },
            ))
        })
    }

    /// Every live slot with its instance, in slot order (without the
    /// last-known-good lookup of [`Table::iter`]).
    pub(super) fn instances(&self) -> impl Iterator<Item = (u32, &Arc<Instance>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(k, s)| Some((k as u32, s.as_ref()?)))
    }

    /// The last-known-good revision of `slot`.
    pub(super) fn good_of(&self, slot: u32) -> Option<&Arc<str>> {
        self.goods.get(&slot)
    }

    /// Whether some instance advertises `rev`.
    pub(super) fn has_revision(&self, rev: &str) -> bool {
        self.rev_count.contains_key(rev)
    }

    /// Whether some slot keeps `rev` as its last-known-good.
    pub(super) fn is_good_for_some(&self, rev: &str) -> bool {
        self.good_refs.contains_key(rev)
    }

    /// Whether some slot keeps a last-known-good.
    pub(super) fn any_good(&self) -> bool {
        !self.goods.is_empty()
    }

    /// Whether some instance may take traffic.
    pub(super) fn any_serving(&self) -> bool {
        self.serving > 0
    }

    /// Why the instances that do not serve do not.
    pub(super) fn not_serving(&self) -> NotServing {
        self.not_serving
    }

    fn track(&mut self, inst: &Instance, up: bool) {
        if let Some(rev) = inst.revision_arc() {
            bump(&mut self.rev_count, rev, up);
        }
        self.track_serving(inst, up);
    }

    fn track_serving(&mut self, inst: &Instance, up: bool) {
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
        let k = self.index.remove(hash_id(id), id, at(slots))?;
        let instance = self.slots.get_mut(k as usize)?.take()?;
        self.track(&instance, false);
        let good = self.goods.remove(&k);
        if let Some(g) = &good {
            bump(&mut self.good_refs, g, false);
        }
        self.free.push(k);
        Some((k, Slot { instance, good }))
    }

    /// Adds or replaces the instance with `slot.instance`'s id; returns its
    /// slot and the record it replaced.
    pub(super) fn upsert(&mut self, slot: Slot) -> (u32, Option<Slot>) {
        let Slot { instance, good } = slot;
        self.track(&instance, true);
        if let Some(k) = self.slot_of(&instance) {
            let old = self
                .slots
                .get_mut(k as usize)
                .and_then(|s| s.replace(instance));
            let old_good = self.take_good(k);
            self.set_good(k, good);
            if let Some(old) = &old {
                self.track(old, false);
            }
            return (
                k,
                old.map(|instance| Slot {
                    instance,
                    good: old_good,
                }),
            );
        }
        let k = match self.free.pop() {
            Some(k) => {
                if let Some(s) = self.slots.get_mut(k as usize) {
                    *s = Some(instance.clone());
                }
                k
            }
            None => {
                self.slots.push(Some(instance.clone()));
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.index.insert_unique(instance.id_hash(), k, at(slots));
        self.set_good(k, good);
        (k, None)
    }

    fn take_good(&mut self, slot: u32) -> Option<Arc<str>> {
        let old = self.goods.remove(&slot);
        if let Some(g) = &old {
            bump(&mut self.good_refs, g, false);
        }
        old
    }

    /// Sets the last-known-good revision of `slot`.
    pub(super) fn set_good(&mut self, slot: u32, good: Option<Arc<str>>) {
        if self.goods.get(&slot) == good.as_ref() {
            return;
        }
        self.take_good(slot);
        if let Some(g) = good {
            bump(&mut self.good_refs, &g, true);
            self.goods.insert(slot, g);
        }
    }
}
