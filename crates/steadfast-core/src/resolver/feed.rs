//! Applying the registry's deliveries to the instance table: a Reset in one
//! pass, a delta in O(changed instances). Revisions that appear start
//! resolving, revisions no instance advertises any more stop (their
//! schedule parked), and an instance whose new revision is unresolved keeps
//! the resolved revision it served before as its last-known-good.

use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashSet;

use super::table::{Slot, SlotRef, Table};
use super::{ResolverAction, ResolverMachine, RevisionState};
use crate::instance::Instance;
use crate::subscription::Feed;

/// An instance upserted by a delivery, with the revision it served before.
struct Upserted {
    slot: u32,
    served: Option<Arc<str>>,
}

impl ResolverMachine {
    /// Applies one delivery's instances at `generation`. A Reset older than
    /// the state held, or a delta on top of another generation than the one
    /// held, is not applied; a delta that is not older but does not follow
    /// asks for a Reset ([`ResolverAction::RequestReset`]).
    pub fn on_feed(&mut self, generation: u64, feed: Feed, now: Instant) -> Vec<ResolverAction> {
        self.tick(now);
        if !self.accepts(generation, &feed) {
            return match feed {
                Feed::Delta { .. }
                    if !self.closed && !self.reset_asked && generation > self.generation =>
                {
                    self.reset_asked = true;
                    vec![ResolverAction::RequestReset]
                }
                _ => Vec::new(),
            };
        }
        let mut touched: FxHashSet<Arc<str>> = FxHashSet::default();
        let mut upserted = Vec::new();
        match feed {
            Feed::Reset(all) => {
                self.reset_asked = false;
                // Rebuilt in one pass, in the order of the Reset; unchanged
                // instances keep their last-known-good.
                let old = std::mem::replace(&mut self.table, Table::with_capacity(all.len()));
                for (_, s) in old.iter() {
                    if let Some(rev) = s.instance.revision_arc() {
                        touched.insert(rev.clone());
                    }
                }
                for inst in all {
                    let prev = old.slot_of(inst.id()).and_then(|k| old.get(k));
                    let (good, changed, served) = match prev {
                        Some(o) if crate::event::same(o.instance, &inst) => {
                            (o.good.cloned(), false, None)
                        }
                        Some(o) => (None, true, self.served(o)),
                        None => (None, true, None),
                    };
                    if let Some(rev) = inst.revision_arc() {
                        touched.insert(rev.clone());
                    }
                    let (slot, _) = self.table.upsert(Slot {
                        instance: inst,
                        good,
                    });
                    if changed {
                        upserted.push(Upserted { slot, served });
                    }
                }
                for key in self.keys.values_mut() {
                    key.full = true;
                }
            }
            Feed::Delta {
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
        self.revisions_changed(touched, now, &mut actions);
        for u in upserted {
            let good = match self.table.get(u.slot).and_then(|s| s.instance.revision()) {
                Some(rev) if self.is_unresolved(rev) => u
                    .served
                    .filter(|served| self.metadata.contains_key(served.as_ref())),
                _ => None,
            };
            self.table.set_good(u.slot, good);
        }
        self.forget_unused_metadata();
        self.generation = generation;
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

    /// Whether a delivery at `generation` applies to the state held.
    pub(super) fn accepts(&self, generation: u64, feed: &Feed) -> bool {
        if self.closed {
            return false;
        }
        match feed {
            Feed::Reset(_) => !self.has_state || generation >= self.generation,
            Feed::Delta { base, .. } => self.has_state && *base == self.generation,
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
            key.on_removed(slot, old.instance.id_arc());
        }
    }

    fn upsert_instance(
        &mut self,
        inst: Arc<Instance>,
        touched: &mut FxHashSet<Arc<str>>,
        upserted: &mut Vec<Upserted>,
    ) {
        let served = match self
            .table
            .slot_of(inst.id())
            .and_then(|k| self.table.get(k))
        {
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

    /// Starts or stops the revisions whose instance count changed.
    fn revisions_changed(
        &mut self,
        touched: FxHashSet<Arc<str>>,
        now: Instant,
        actions: &mut Vec<ResolverAction>,
    ) {
        let mut entering: Vec<Arc<str>> = Vec::new();
        for rev in touched {
            let present = self.table.has_revision(&rev);
            match (present, self.revisions.contains_key(rev.as_ref())) {
                (false, true) => {
                    if let Some(state) = self.revisions.remove(rev.as_ref()) {
                        Self::stop_phase(&rev, &state, actions);
                        self.park(rev.to_string(), state, now);
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
