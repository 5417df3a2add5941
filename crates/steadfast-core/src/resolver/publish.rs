//! Building the [`DirectoryUpdate`]s of the subscribed keys from the
//! instance table, the resolved metadata and the last-known-good
//! revisions. Each key remembers which instance slots it last sent a URL
//! for (one bit per slot), so a change of k instances becomes a patch of at
//! most k URLs; a key that needs everything gets the full list in one pass.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::table::SlotRef;
use super::{ResolverMachine, RevisionState};
use crate::change::{delta_budget, Change, Version};
use crate::instance::Instance;
use crate::update::{DirectoryUpdate, NotServing, Unresolved, UpdateState, UrlChange};
use crate::url::{Endpoint, ServiceEndpoint, ServiceUrl};

/// What each revision with known metadata offers one key (`None`: the
/// revision does not export it), built once per revision.
pub(super) type Offers = FxHashMap<Arc<str>, Option<Arc<ServiceEndpoint>>>;

/// What an instance of one revision serves for the key of a full list.
enum RevOffer {
    /// The revision is not unresolved: this (`None`: nothing).
    Serves(Option<Arc<ServiceEndpoint>>),
    /// The revision is unresolved: what the instance's last-known-good
    /// revision offers.
    FromGood,
}

/// What one subscribed key was last sent, and what changed since.
#[derive(Debug)]
pub(super) struct KeyState {
    /// One bit per table slot: a URL was sent for it.
    sent_bits: Vec<u64>,
    /// URLs sent (bits set).
    pub(super) count: usize,
    /// Slots changed since the last update (may repeat).
    dirty: Vec<u32>,
    /// Ids whose URL must go.
    removals: Vec<Arc<str>>,
    /// Instances among `removals` whose URL goes because they announced
    /// closing (not because the registry removed them).
    closing: Vec<Arc<Instance>>,
    /// The next update must carry everything.
    pub(super) full: bool,
    /// Version of the last update sent.
    pub(super) sent: Option<Version>,
    offers: Offers,
}

impl Default for KeyState {
    fn default() -> Self {
        Self {
            sent_bits: Vec::new(),
            count: 0,
            dirty: Vec::new(),
            removals: Vec::new(),
            closing: Vec::new(),
            full: true,
            sent: None,
            offers: Offers::default(),
        }
    }
}

impl KeyState {
    fn bit(&self, slot: u32) -> bool {
        let (w, b) = ((slot / 64) as usize, slot % 64);
        self.sent_bits.get(w).is_some_and(|x| x & (1 << b) != 0)
    }

    fn set_bit(&mut self, slot: u32, on: bool) {
        let (w, b) = ((slot / 64) as usize, slot % 64);
        if self.sent_bits.len() <= w {
            if !on {
                return;
            }
            self.sent_bits.resize(w + 1, 0);
        }
        let was = self.sent_bits[w] & (1 << b) != 0;
        if on {
            self.sent_bits[w] |= 1 << b;
        } else {
            self.sent_bits[w] &= !(1 << b);
        }
        match (was, on) {
            (false, true) => self.count = self.count.saturating_add(1),
            (true, false) => self.count = self.count.saturating_sub(1),
            _ => {}
        }
    }

    /// `instance` (in `slot`) left the registry: its URL goes, if one was
    /// sent, and a closing instance (whose URL went when it announced
    /// closing) is named removed as well, so the directory learns the
    /// registry removed it, which ends its tombstone. A closing
    /// announcement and its removal in one burst net to the removal.
    pub(super) fn on_removed(&mut self, slot: u32, instance: &Arc<Instance>) {
        if self.full {
            return;
        }
        if self.bit(slot) || instance.is_closing() {
            self.set_bit(slot, false);
            self.removals.push(instance.id_arc().clone());
        }
        self.closing.retain(|c| c.id() != instance.id());
    }

    /// The instance in `slot` changed or appeared.
    pub(super) fn on_changed(&mut self, slot: u32) {
        if !self.full {
            self.dirty.push(slot);
        }
    }
}

impl ResolverMachine {
    /// The URL change for `key` since its last update, with the closing
    /// instances the update names (a Reset: every one; a Delta: those whose
    /// URL it removes because they announced closing), marking it sent at
    /// `version`: a Delta on the key's previous update, or everything (a
    /// Reset) when the key needs it or the change is larger than
    /// [`delta_budget`] of the key's URLs.
    pub(super) fn take_change(
        &self,
        key: &str,
        state: &mut KeyState,
        version: Version,
    ) -> (UrlChange, Vec<Arc<Instance>>) {
        let base = state.sent.replace(version);
        let too_big = state.dirty.len().saturating_add(state.removals.len())
            > delta_budget(state.count.max(self.table.len()));
        let base = match (base, state.full || too_big) {
            (Some(base), false) => base,
            _ => {
                state.full = false;
                state.dirty.clear();
                state.removals.clear();
                state.closing.clear();
                state.offers.clear();
                state.sent_bits.clear();
                state.sent_bits.resize(self.table.capacity() / 64 + 1, 0);
                state.count = 0;
                let mut offers = std::mem::take(&mut state.offers);
                let (items, closing) =
                    self.full_urls(key, &mut offers, |slot| state.set_bit(slot, true));
                state.offers = offers;
                return (Change::Reset { version, items }, closing);
            }
        };
        let mut dirty = std::mem::take(&mut state.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        let mut upserts = Vec::with_capacity(dirty.len());
        let mut removals = std::mem::take(&mut state.removals);
        for slot in dirty {
            let Some(s) = self.table.get(slot) else {
                continue;
            };
            match self.endpoint_for(s, key, &mut state.offers) {
                Some(ep) => {
                    upserts.push(Arc::new(ServiceUrl::new(s.instance, &ep)));
                    state.set_bit(slot, true);
                }
                None if state.bit(slot) => {
                    state.set_bit(slot, false);
                    removals.push(s.instance.id_arc().clone());
                    if s.instance.is_closing() {
                        state.closing.push(s.instance.clone());
                    }
                }
                None => {}
            }
        }
        if !removals.is_empty() && !upserts.is_empty() {
            // An id removed and added back in one burst: the upsert wins.
            let up: rustc_hash::FxHashSet<&str> = upserts.iter().map(|u| u.instance_id()).collect();
            removals.retain(|id| !up.contains(id.as_ref()));
            state.closing.retain(|i| !up.contains(i.id()));
        }
        let change = Change::Delta {
            base,
            version,
            upserts,
            removals,
        };
        (change, std::mem::take(&mut state.closing))
    }

    /// Every URL of `key`, in slot order, and every closing instance.
    pub(super) fn full_list(
        &self,
        key: &str,
        offers: &mut Offers,
    ) -> (Vec<Endpoint>, Vec<Arc<Instance>>) {
        self.full_urls(key, offers, |_| {})
    }

    /// Every URL of `key`, in slot order, calling `sent` with each slot
    /// that has one, and (from the same pass) every closing instance. What
    /// each revision offers is resolved once per revision allocation
    /// (revisions are interned per app), so an instance costs one
    /// pointer-keyed lookup; the same endpoint as
    /// [`ResolverMachine::endpoint_for`] gives.
    fn full_urls(
        &self,
        key: &str,
        offers: &mut Offers,
        mut sent: impl FnMut(u32),
    ) -> (Vec<Endpoint>, Vec<Arc<Instance>>) {
        let mut by_rev: FxHashMap<*const u8, RevOffer> = FxHashMap::default();
        let mut all = Vec::with_capacity(self.table.len());
        // Sized from the table's count: a vector grown past 1 KiB makes
        // glibc consolidate every small chunk freed so far, at once.
        let mut closing = Vec::with_capacity(self.table.not_serving().closing);
        for (slot, inst) in self.table.instances() {
            if !inst.is_serving() {
                if inst.is_closing() {
                    closing.push(inst.clone());
                }
                continue;
            }
            let Some(rev) = inst.revision_arc() else {
                continue;
            };
            let offer = by_rev.entry(rev.as_ptr()).or_insert_with(|| {
                match self.revisions.get(rev.as_ref()) {
                    Some(RevisionState::Unresolved { .. }) => RevOffer::FromGood,
                    _ => RevOffer::Serves(self.offer_of(rev, key, offers)),
                }
            });
            let ep = match offer {
                RevOffer::Serves(ep) => ep.clone(),
                RevOffer::FromGood => self
                    .table
                    .good_of(slot)
                    .and_then(|good| self.offer_of(good, key, offers)),
            };
            if let Some(ep) = ep {
                all.push(Arc::new(ServiceUrl::new(inst, &ep)));
                sent(slot);
            }
        }
        (all, closing)
    }

    /// What resolved revision `from` offers `key` (`None`: no metadata
    /// known, or it does not export `key`).
    fn offer_of(
        &self,
        from: &Arc<str>,
        key: &str,
        offers: &mut Offers,
    ) -> Option<Arc<ServiceEndpoint>> {
        let meta = self.metadata.get(from.as_ref())?;
        offers
            .entry(from.clone())
            .or_insert_with(|| meta.services.get(key).map(ServiceEndpoint::of))
            .clone()
    }

    /// The endpoint `slot`'s instance serves for `key`: from its revision
    /// when resolved, else from its last-known-good one; none when it may
    /// not take traffic.
    fn endpoint_for(
        &self,
        slot: SlotRef<'_>,
        key: &str,
        offers: &mut Offers,
    ) -> Option<Arc<ServiceEndpoint>> {
        let inst = &slot.instance;
        if !inst.is_serving() {
            return None;
        }
        let rev = inst.revision_arc()?;
        let from = match self.revisions.get(rev.as_ref()) {
            Some(RevisionState::Unresolved { .. }) => slot.good?,
            _ => rev,
        };
        self.offer_of(from, key, offers)
    }

    /// The update for `key` since its last one (see
    /// [`ResolverMachine::take_change`]), with the instances whose URL it
    /// removes because they announced closing.
    pub(super) fn key_update(
        &self,
        key: &str,
        state: &mut KeyState,
        version: Version,
    ) -> DirectoryUpdate {
        let (change, closing) = self.take_change(key, state, version);
        self.wrap(key, change, closing, state.count == 0)
    }

    /// An update for `key` carrying `change` and `closing` (a Reset names
    /// every closing instance, a delta those whose URL it removes because
    /// they announced closing: see [`ResolverMachine::key_update`]).
    /// `empty`: whether the key has no URL after the change.
    pub(super) fn wrap(
        &self,
        key: &str,
        change: UrlChange,
        closing: Vec<Arc<Instance>>,
        empty: bool,
    ) -> DirectoryUpdate {
        let state = if !self.has_state {
            match &self.subscribe_failure {
                Some(f) => {
                    UpdateState::Pending(crate::pending::Pending::subscribe_failing(f.clone()))
                }
                None => UpdateState::Pending(crate::pending::Pending::waiting()),
            }
        } else if self.table.is_empty() {
            UpdateState::RegistryEmpty
        } else {
            match (self.unresolved(), empty) {
                (_, true) if !self.table.any_serving() => {
                    UpdateState::NotServing(self.not_serving_counts())
                }
                (None, true) => UpdateState::NoMatchingService,
                (None, false) => UpdateState::Resolved,
                (Some(u), true) => UpdateState::Unresolved(u),
                (Some(u), false) => UpdateState::Degraded(u),
            }
        };
        DirectoryUpdate {
            app: self.app.clone(),
            subscribe_key: key.to_string(),
            change,
            state,
            stale_since: self.stale_since,
            held: self.held,
            closing,
            snapshot: self.snapshot_origin().map(Arc::new),
        }
    }

    fn not_serving_counts(&self) -> NotServing {
        self.table.not_serving()
    }

    /// The unresolved revisions, or `None` when all are resolved.
    pub fn unresolved(&self) -> Option<Unresolved> {
        let mut out: Option<Unresolved> = None;
        for (rev, state) in &self.revisions {
            if let RevisionState::Unresolved {
                since,
                attempts,
                last_error,
                ..
            } = state
            {
                let u = out.get_or_insert_with(|| Unresolved {
                    revisions: Vec::new(),
                    since: *since,
                    attempts: 0,
                    last_error: None,
                });
                u.revisions.push(rev.clone());
                u.since = u.since.min(*since);
                if *attempts >= u.attempts {
                    u.attempts = *attempts;
                    if last_error.is_some() {
                        u.last_error = last_error.clone();
                    }
                }
            }
        }
        out
    }
}
