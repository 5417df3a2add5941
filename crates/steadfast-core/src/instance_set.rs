//! [`InstanceSet`]: an app's instances in registry order, by id. The
//! embedded registry stores its apps in it and the subscription keeps each
//! app's registry state in it, so a Reset of either lists the instances in
//! the order they were registered (a re-registration keeps its place).
//!
//! A set is a slab of slots in order plus a [`SlotIndex`] (one `u32` per
//! instance, hashed with the hash each [`Instance`] computed at decode). A
//! removal leaves a hole; once holes outnumber the instances the slab is
//! compacted in one pass (amortised O(1) per removal), so iteration stays
//! proportional to the size.

use std::sync::Arc;

use crate::instance::Instance;
use crate::slot_index::{hash_id, SlotIndex};

/// An app's instances in registry order, by id.
#[derive(Clone, Debug, Default)]
pub struct InstanceSet {
    slots: Vec<Option<Arc<Instance>>>,
    index: SlotIndex,
}

/// What a change did to an [`InstanceSet`] (see [`InstanceSet::replace_all`]
/// and [`crate::event::InstanceMap::apply`]). The default is "nothing
/// changed".
#[derive(Clone, Debug)]
pub struct Changes {
    /// Instances whose id is new.
    pub added: usize,
    /// Instances whose record changed.
    pub replaced: usize,
    /// The new records of the added and replaced instances, in order;
    /// `None` when there were more than the budget (nothing collected).
    pub upserts: Option<Vec<Arc<Instance>>>,
    /// The instances that left (their last records). A Reset over the
    /// budget collects them only when asked (see
    /// [`InstanceSet::replace_all`]); [`Changes::counts`] counts them
    /// either way.
    pub removed: Vec<Arc<Instance>>,
    /// How many instances left (`removed.len()` when they were collected).
    removed_count: usize,
    /// A Reset's records, in order and without a repeated id: the new state
    /// itself, to hand on as it is (no second pass to copy it out).
    pub all: Option<Vec<Arc<Instance>>>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            added: 0,
            replaced: 0,
            upserts: Some(Vec::new()),
            removed: Vec::new(),
            removed_count: 0,
            all: None,
        }
    }
}

/// How many instances a change added, replaced and removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChangeCounts {
    /// Instances whose id is new.
    pub added: usize,
    /// Instances whose record changed.
    pub replaced: usize,
    /// Instances that left.
    pub removed: usize,
}

impl ChangeCounts {
    /// Instances that changed.
    pub fn total(&self) -> usize {
        self.added
            .saturating_add(self.replaced)
            .saturating_add(self.removed)
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }
}

impl Changes {
    /// How many instances changed, by kind.
    pub fn counts(&self) -> ChangeCounts {
        ChangeCounts {
            added: self.added,
            replaced: self.replaced,
            removed: self.removed_count.max(self.removed.len()),
        }
    }

    /// Counts `inst` of a new state against `old`: added, or replaced when
    /// its record differs from the one of its id (whose slot is marked in
    /// `matched`); collects it among the upserts while within `budget`.
    /// Returns whether it matched an old instance not matched before.
    fn compare(
        &mut self,
        inst: &Arc<Instance>,
        old: &InstanceSet,
        matched: &mut [u64],
        budget: usize,
    ) -> bool {
        let mut first_match = false;
        let changed = match old.index.find_instance(inst, at(&old.slots)) {
            Some(k) => {
                if let Some(w) = matched.get_mut(k as usize / 64) {
                    first_match = *w & (1 << (k % 64)) == 0;
                    *w |= 1 << (k % 64);
                }
                let same_record = old
                    .slots
                    .get(k as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|o| same(o, inst));
                if !same_record {
                    self.replaced += 1;
                }
                !same_record
            }
            None => {
                self.added += 1;
                true
            }
        };
        if changed {
            let within = self.added.saturating_add(self.replaced) <= budget;
            match (&mut self.upserts, within) {
                (Some(u), true) => u.push(inst.clone()),
                (Some(_), false) => self.upserts = None,
                (None, _) => {}
            }
        }
        first_match
    }

    /// Changes with `removed` collected (a delta's).
    pub(crate) fn with_removed(mut self, removed: Vec<Arc<Instance>>) -> Self {
        self.removed_count = removed.len();
        self.removed = removed;
        self
    }

    /// Instances that changed (added, replaced or removed).
    pub fn len(&self) -> usize {
        self.counts().total()
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The instance in slot `k` of `slots`.
#[inline]
fn at<'a>(slots: &'a [Option<Arc<Instance>>]) -> impl Fn(u32) -> Option<&'a Instance> + 'a {
    move |k| slots.get(k as usize)?.as_deref()
}

/// Whether two records are the same (pointer first, then content).
#[inline]
pub fn same(a: &Arc<Instance>, b: &Arc<Instance>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

impl InstanceSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The set of `items` in their order; a repeated id replaces the
    /// earlier instance in its place. Also returns the instances a repeated
    /// id replaced.
    pub fn from_vec(items: Vec<Arc<Instance>>) -> (Self, Vec<Arc<Instance>>) {
        let mut set = Self::default();
        set.index.reserve(items.len(), |_| None);
        set.slots.reserve_exact(items.len());
        let mut replaced = Vec::new();
        for inst in items {
            // Slots are u32: an app holds fewer than 2^32 instances.
            let k = set.slots.len() as u32;
            let slots = &set.slots;
            match set.index.insert_or_find(&inst, k, at(slots)) {
                None => set.slots.push(Some(inst)),
                Some(j) => {
                    if let Some(old) = set.slots.get_mut(j as usize).and_then(|s| s.replace(inst)) {
                        replaced.push(old);
                    }
                }
            }
        }
        (set, replaced)
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the set holds no instance.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The instance with `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<Instance>> {
        let k = self.index.find(hash_id(id), id, at(&self.slots))?;
        self.slots.get(k as usize)?.as_ref()
    }

    /// The instance with `inst`'s id (no id hashing).
    pub fn get_like(&self, inst: &Instance) -> Option<&Arc<Instance>> {
        let k = self.index.find_instance(inst, at(&self.slots))?;
        self.slots.get(k as usize)?.as_ref()
    }

    /// Every instance, in registry order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Instance>> + '_ {
        self.slots.iter().flatten()
    }

    /// Every instance, in registry order, as shared handles.
    pub fn to_vec(&self) -> Vec<Arc<Instance>> {
        let mut all = Vec::with_capacity(self.len());
        all.extend(self.iter().cloned());
        all
    }

    /// Adds `inst` at the end, or replaces the instance with its id in
    /// place; returns the replaced one.
    pub fn upsert(&mut self, inst: Arc<Instance>) -> Option<Arc<Instance>> {
        let k = self.slots.len() as u32;
        let slots = &self.slots;
        match self.index.insert_or_find(&inst, k, at(slots)) {
            None => {
                self.slots.push(Some(inst));
                None
            }
            Some(j) => self.slots.get_mut(j as usize)?.replace(inst),
        }
    }

    /// Removes the instance with `id`; returns it.
    pub fn remove(&mut self, id: &str) -> Option<Arc<Instance>> {
        self.remove_hashed(hash_id(id), id)
    }

    /// Removes the instance with `inst`'s id (no id hashing); returns it.
    pub fn remove_like(&mut self, inst: &Instance) -> Option<Arc<Instance>> {
        self.remove_hashed(inst.id_hash(), inst.id())
    }

    fn remove_hashed(&mut self, hash: u64, id: &str) -> Option<Arc<Instance>> {
        let slots = &self.slots;
        let k = self.index.remove(hash, id, at(slots))?;
        let gone = self.slots.get_mut(k as usize)?.take();
        self.compact_if_sparse();
        gone
    }

    /// Compacts the slab once holes outnumber the instances (and there are
    /// enough of them to be worth a pass).
    fn compact_if_sparse(&mut self) {
        let live = self.len();
        let holes = self.slots.len().saturating_sub(live);
        if holes <= live.max(32) {
            return;
        }
        self.slots.retain(Option::is_some);
        self.index.clear();
        self.index.reserve(self.slots.len(), |_| None);
        for (k, inst) in self.slots.iter().enumerate() {
            if let Some(inst) = inst {
                let slots = &self.slots;
                self.index
                    .insert_unique(inst.id_hash(), k as u32, at(slots));
            }
        }
    }

    /// Replaces the whole content by `items` (in their order, a repeated id
    /// replacing the earlier one in its place) and returns what changed:
    /// counts, the new records of the added and replaced ones unless there
    /// are more than `budget` of them, and the removed instances when
    /// `keep_removed` or when the whole change is within `budget` (a delta);
    /// otherwise only their count. Without a repeated id, the change also
    /// hands `items` back as the new state ([`Changes::all`]).
    ///
    /// One pass: each record is indexed in the new set and probed in the old
    /// one while it is at hand (no id is hashed); the old set's instances
    /// are read again only to collect the removed ones.
    pub fn replace_all(
        &mut self,
        items: Vec<Arc<Instance>>,
        budget: usize,
        keep_removed: bool,
    ) -> Changes {
        let n = items.len();
        let mut next = Self::default();
        next.index.reserve(n, |_| None);
        next.slots.reserve_exact(n);
        let old = std::mem::take(self);
        let mut diff = Changes::default();
        let mut matched = vec![0u64; old.slots.len().div_ceil(64)];
        let mut seen = 0usize;
        let mut repeated = false;
        for inst in &items {
            // Slots are u32: an app holds fewer than 2^32 instances.
            let k = next.slots.len() as u32;
            if let Some(j) = next.index.insert_or_find(inst, k, at(&next.slots)) {
                // A repeated id: the later record replaces the earlier one.
                if let Some(slot) = next.slots.get_mut(j as usize) {
                    *slot = Some(inst.clone());
                }
                repeated = true;
                continue;
            }
            next.slots.push(Some(inst.clone()));
            if diff.compare(inst, &old, &mut matched, budget) {
                seen += 1;
            }
        }
        *self = next;
        if repeated {
            // Rare: the first record of a repeated id was compared, not the
            // last. Counted again on the final state.
            return self.diff_against(old, budget);
        }
        diff.removed_count = old.len().saturating_sub(seen);
        let total = diff
            .added
            .saturating_add(diff.replaced)
            .saturating_add(diff.removed_count);
        if keep_removed || total <= budget {
            diff.removed.reserve_exact(diff.removed_count);
            for (k, slot) in old.slots.into_iter().enumerate() {
                let kept = matched
                    .get(k / 64)
                    .is_some_and(|w| w & (1 << (k % 64)) != 0);
                if let (Some(inst), false) = (slot, kept) {
                    diff.removed.push(inst);
                }
            }
        }
        diff.all = Some(items);
        diff
    }

    /// What changed from `old` to this set (every removed instance
    /// collected).
    fn diff_against(&self, old: InstanceSet, budget: usize) -> Changes {
        let mut diff = Changes::default();
        let mut matched = vec![0u64; old.slots.len().div_ceil(64)];
        for inst in self.iter() {
            diff.compare(inst, &old, &mut matched, budget);
        }
        let mut removed = Vec::new();
        for (k, slot) in old.slots.into_iter().enumerate() {
            let seen = matched
                .get(k / 64)
                .is_some_and(|w| w & (1 << (k % 64)) != 0);
            if let (Some(inst), false) = (slot, seen) {
                removed.push(inst);
            }
        }
        diff.with_removed(removed)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::instance::test_instance as inst;

    fn ids(s: &InstanceSet) -> Vec<String> {
        s.iter().map(|i| i.id().to_string()).collect()
    }

    #[test]
    fn keeps_registry_order_and_replaces_in_place() {
        let (mut s, dups) = InstanceSet::from_vec(vec![inst(3, 1), inst(1, 1), inst(3, 2)]);
        assert_eq!(ids(&s), ["h:3", "h:1"]);
        assert_eq!(dups.len(), 1);
        assert_eq!(s.get("h:3").map(|i| i.weight()), Some(2), "the later wins");
        s.upsert(inst(2, 1));
        s.upsert(inst(1, 5));
        assert_eq!(
            ids(&s),
            ["h:3", "h:1", "h:2"],
            "a re-registration keeps its place"
        );
        assert!(s.remove("h:1").is_some());
        assert!(s.remove("h:1").is_none());
        assert_eq!(ids(&s), ["h:3", "h:2"]);
        assert_eq!(s.len(), 2);
    }

    /// The model's upsert: a known id keeps its rank, a new one takes the next.
    fn place(model: &mut BTreeMap<String, (u64, Arc<Instance>)>, rank: &mut u64, i: Arc<Instance>) {
        let id = i.id().to_string();
        let r = model.get(&id).map_or_else(
            || {
                *rank += 1;
                *rank
            },
            |(r, _)| *r,
        );
        model.insert(id, (r, i));
    }

    #[test]
    fn random_edits_and_resets_match_a_plain_model_and_diff_exactly() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut set = InstanceSet::new();
        // id -> (rank, record): the order the model expects.
        let mut model: BTreeMap<String, (u64, Arc<Instance>)> = BTreeMap::new();
        let mut rank = 0u64;
        for step in 0..4000 {
            match rng.gen_range(0..20) {
                0 => {
                    let all: Vec<Arc<Instance>> = (0..rng.gen_range(0..40))
                        .map(|_| inst(rng.gen_range(0..60), rng.gen_range(0..3)))
                        .collect();
                    let before = model.clone();
                    model.clear();
                    // A Reset's order is its own (a repeated id keeps its
                    // first place, the later record wins).
                    for i in &all {
                        place(&mut model, &mut rank, i.clone());
                    }
                    let budget = rng.gen_range(0..50);
                    let diff = set.replace_all(all, budget, true);
                    let added = model.keys().filter(|k| !before.contains_key(*k)).count();
                    let replaced = model
                        .iter()
                        .filter(|(k, (_, i))| before.get(*k).is_some_and(|(_, o)| !same(o, i)))
                        .count();
                    let removed = before.keys().filter(|k| !model.contains_key(*k)).count();
                    assert_eq!(
                        (diff.added, diff.replaced),
                        (added, replaced),
                        "step {step}"
                    );
                    assert_eq!(diff.removed.len(), removed);
                    match &diff.upserts {
                        Some(u) => assert_eq!(u.len(), added + replaced),
                        None => assert!(added + replaced > budget),
                    }
                }
                1..=9 => {
                    let i = inst(rng.gen_range(0..60), rng.gen_range(0..3));
                    place(&mut model, &mut rank, i.clone());
                    set.upsert(i);
                }
                _ => {
                    let id = format!("h:{}", rng.gen_range(0..60u16));
                    assert_eq!(set.remove(&id).is_some(), model.remove(&id).is_some());
                }
            }
            let mut want: Vec<(u64, String)> =
                model.iter().map(|(k, (r, _))| (*r, k.clone())).collect();
            want.sort_unstable();
            let want: Vec<String> = want.into_iter().map(|(_, k)| k).collect();
            assert_eq!(ids(&set), want, "order at step {step}");
            for (id, (_, i)) in &model {
                assert!(same(set.get(id).expect("present"), i));
                assert!(same(set.get_like(i).expect("present"), i));
            }
            assert!(set.slots.len() <= 2 * set.len().max(32) + 1, "compacted");
        }
    }
}
