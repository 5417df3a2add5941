//! Applying the registry's deliveries to the instance table: a Reset in one
//! pass, a delta in O(changed instances). Revisions that appear start
//! resolving, revisions no instance advertises any more stop (their
//! schedule parked), and an instance whose new revision is unresolved keeps
//! the resolved revision it served before as its last-known-good.

use std::sync::Arc;
use std::time::Instant;

use rustc_hash::{FxHashMap, FxHashSet};

use super::table::{Slot, SlotRef, Table};
use super::{ResolverAction, ResolverMachine, RevisionState};
use crate::change::{Change, Fit};
use crate::instance::Instance;
use crate::subscription::Feed;

/// An instance upserted by a delivery, with the revision it served before.
struct Upserted {
    slot: u32,
    served: Option<Arc<str>>,
}

impl ResolverMachine {
    /// Applies one delivery's instances where it fits the version held
    /// ([`Change::fit`]): a Reset older than the state held is ignored; a
    /// delta on top of a state the machine does not hold (or on a disk
    /// snapshot's state) is a gap and asks for a Reset
    /// ([`ResolverAction::RequestReset`], once per gap, at most once per
    /// [`crate::change::RESET_ASK_INTERVAL`]).
    pub fn on_feed(&mut self, feed: Feed, now: Instant) -> Vec<ResolverAction> {
        self.tick(now);
        match self.fit(&feed) {
            Fit::Apply => {}
            Fit::Older => return Vec::new(),
            Fit::Gap => {
                return if self.ask.on_gap(now) {
                    vec![ResolverAction::RequestReset]
                } else {
                    Vec::new()
                };
            }
        }
        let version = feed.version();
        // The first live state replaces a snapshot's entirely.
        let from_seed = self.seeded.take().is_some();
        let mut touched: FxHashSet<Arc<str>> = FxHashSet::default();
        let mut upserted = Vec::new();
        let mut reset = None;
        let had_goods = self.table.any_good();
        match feed {
            Change::Reset { items, .. } => {
                self.ask.on_reset();
                // Rebuilt in one pass, in the order of the Reset; the
                // last-known-goods are restored once the revisions' states
                // are known (see `restore_goods`).
                let (table, replaced) = Table::from_reset(items);
                let old = std::mem::replace(&mut self.table, table);
                touched.extend(old.revisions().cloned());
                touched.extend(self.table.revisions().cloned());
                touched.extend(replaced.iter().filter_map(|i| i.revision_arc().cloned()));
                for key in self.keys.values_mut() {
                    key.full = true;
                }
                reset = Some((old, replaced));
            }
            Change::Delta {
                upserts, removals, ..
            } => {
                for id in removals {
                    self.remove_instance(&id, &mut touched);
                }
                for inst in upserts {
                    self.upsert_instance(inst, &mut touched, &mut upserted);
                }
            }
        }
        let mut actions = Vec::new();
        let was_reset = reset.is_some();
        let left = self.revisions_changed(touched, now, &mut actions);
        if let Some((old, replaced)) = reset.filter(|_| !from_seed) {
            self.restore_goods(&old, &replaced);
        }
        for u in upserted {
            let good = match self.table.get(u.slot).and_then(|s| s.instance.revision()) {
                Some(rev) if self.is_unresolved(rev) => u
                    .served
                    .filter(|served| self.metadata.contains_key(served.as_ref())),
                _ => None,
            };
            self.table.set_good(u.slot, good);
        }
        // Metadata goes unused only when a revision leaves or a
        // last-known-good is dropped: otherwise no map is walked.
        if was_reset || left || had_goods || self.table.any_good() {
            self.forget_unused_metadata();
        }
        self.version = version;
        self.has_state = true;
        let unresolved: Vec<String> = self
            .revisions
            .iter()
            .filter(|(_, s)| matches!(s, RevisionState::Unresolved { .. }))
            .map(|(r, _)| r.clone())
            .collect();
        for rev in unresolved {
            self.start_if_idle(&rev, now, &mut actions);
        }
        self.dirty = true;
        actions
    }

    /// How a delivery fits the state held (closed: never applies). A delta
    /// never applies on top of a snapshot's state.
    pub(super) fn fit(&self, feed: &Feed) -> Fit {
        if self.closed {
            return Fit::Older;
        }
        let held = self.has_state.then_some(self.version);
        match feed.fit(held) {
            Fit::Apply if !feed.is_reset() && self.seeded.is_some() => Fit::Gap,
            fit => fit,
        }
    }

    /// After a Reset replaced `old` (and the revisions' states follow the
    /// new table): an instance the Reset left unchanged keeps its
    /// last-known-good; one that changed and whose revision is unresolved
    /// takes the resolved revision it served in `old`. `replaced`: the
    /// instances a repeated id of the Reset replaced (any of them changed
    /// counts as changed). Nothing to do, and no pass over the app, when
    /// `old` kept no last-known-good and no revision is unresolved.
    fn restore_goods(&mut self, old: &Table, replaced: &[Arc<Instance>]) {
        if !old.any_good() && !self.table.revisions().any(|r| self.is_unresolved(r)) {
            return;
        }
        let changed_dups: FxHashSet<&str> = replaced
            .iter()
            .filter(|r| {
                old.slot_of(r)
                    .and_then(|k| old.get(k))
                    .is_some_and(|o| !crate::event::same(o.instance, r))
            })
            .map(|r| r.id())
            .collect();
        // Per revision allocation (interned): whether it is unresolved.
        let mut unresolved: FxHashMap<*const u8, bool> = FxHashMap::default();
        let mut goods = Vec::new();
        for (slot, s) in self.table.iter() {
            let Some(o) = old.slot_of(s.instance).and_then(|k| old.get(k)) else {
                continue;
            };
            let changed = !crate::event::same(o.instance, s.instance)
                || changed_dups.contains(s.instance.id());
            let good = if !changed {
                o.good.cloned()
            } else {
                match s.instance.revision_arc() {
                    Some(rev)
                        if *unresolved
                            .entry(rev.as_ptr())
                            .or_insert_with(|| self.is_unresolved(rev)) =>
                    {
                        self.served(o)
                            .filter(|served| self.metadata.contains_key(served.as_ref()))
                    }
                    _ => None,
                }
            };
            if good.is_some() {
                goods.push((slot, good));
            }
        }
        for (slot, good) in goods {
            self.table.set_good(slot, good);
        }
    }

    fn is_unresolved(&self, rev: &str) -> bool {
        matches!(
            self.revisions.get(rev),
            Some(RevisionState::Unresolved { .. })
        )
    }

    fn remove_instance(&mut self, id: &str, touched: &mut FxHashSet<Arc<str>>) {
        let Some((slot, old)) = self.table.remove(id) else {
            return;
        };
        if let Some(rev) = old.instance.revision_arc() {
            touched.insert(rev.clone());
        }
        for key in self.keys.values_mut() {
            key.on_removed(slot, &old.instance);
        }
    }

    fn upsert_instance(
        &mut self,
        inst: Arc<Instance>,
        touched: &mut FxHashSet<Arc<str>>,
        upserted: &mut Vec<Upserted>,
    ) {
        let served = match self.table.slot_of(&inst).and_then(|k| self.table.get(k)) {
            Some(old) if crate::event::same(old.instance, &inst) => return,
            Some(old) => self.served(old),
            None => None,
        };
        if let Some(rev) = inst.revision_arc() {
            touched.insert(rev.clone());
        }
        let (slot, old) = self.table.upsert(Slot {
            instance: inst,
            good: None,
        });
        if let Some(rev) = old.as_ref().and_then(|o| o.instance.revision_arc()) {
            touched.insert(rev.clone());
        }
        for key in self.keys.values_mut() {
            key.on_changed(slot);
        }
        upserted.push(Upserted { slot, served });
    }

    /// The resolved revision `slot`'s instance served from.
    fn served(&self, slot: SlotRef<'_>) -> Option<Arc<str>> {
        match slot.instance.revision_arc() {
            Some(rev) if self.metadata.contains_key(rev.as_ref()) => Some(rev.clone()),
            _ => slot.good.cloned(),
        }
    }

    /// Starts or stops the revisions whose instance count changed; says
    /// whether one left.
    fn revisions_changed(
        &mut self,
        touched: FxHashSet<Arc<str>>,
        now: Instant,
        actions: &mut Vec<ResolverAction>,
    ) -> bool {
        let mut left = false;
        let mut entering: Vec<Arc<str>> = Vec::new();
        for rev in touched {
            let present = self.table.has_revision(&rev);
            match (present, self.revisions.contains_key(rev.as_ref())) {
                (false, true) => {
                    if let Some(state) = self.revisions.remove(rev.as_ref()) {
                        Self::stop_phase(&rev, &state, actions);
                        self.park(rev.to_string(), state, now);
                        left = true;
                    }
                }
                (true, false) => entering.push(rev),
                _ => {}
            }
        }
        entering.sort_unstable();
        for rev in entering {
            let state = if self.metadata.contains_key(rev.as_ref()) {
                RevisionState::Resolved
            } else {
                self.entering(&rev, now)
            };
            self.revisions.insert(rev.to_string(), state);
        }
        left
    }

    /// A revision resolved: every key is rebuilt in one pass, and instances
    /// of resolved revisions drop their last-known-good.
    pub(super) fn on_resolved(&mut self) {
        if !self.table.any_good() {
            self.forget_unused_metadata();
            for key in self.keys.values_mut() {
                key.full = true;
            }
            return;
        }
        let stale: Vec<u32> = self
            .table
            .iter()
            .filter(|(_, s)| {
                s.good.is_some()
                    && s.instance
                        .revision()
                        .is_some_and(|r| !self.is_unresolved(r))
            })
            .map(|(k, _)| k)
            .collect();
        for k in stale {
            self.table.set_good(k, None);
        }
        self.forget_unused_metadata();
        for key in self.keys.values_mut() {
            key.full = true;
        }
    }

    /// Drops metadata no revision of the app and no last-known-good needs.
    pub(super) fn forget_unused_metadata(&mut self) {
        let (revisions, table) = (&self.revisions, &self.table);
        self.metadata.retain(|rev, _| {
            matches!(revisions.get(rev), Some(RevisionState::Resolved))
                || table.is_good_for_some(rev)
        });
    }
}
