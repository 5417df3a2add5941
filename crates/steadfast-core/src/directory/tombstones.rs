//! Closing tombstones of one app's endpoints in a directory.
//!
//! An endpoint that announced closing (its registry record's closing flag,
//! or a call that failed with a closing-type error) is removed at once and
//! leaves a tombstone keyed by its incarnation, with an expiry. While it
//! lasts:
//! - a re-add with the SAME incarnation (both without one included) is a
//!   stale replay of the closed boot: vetoed, and kept as the latest state
//!   the registry lists for the id;
//! - a re-add with a DIFFERENT incarnation is a genuine restart: the
//!   tombstone is cleared and the endpoint added at once;
//! - a removal of the id by the registry drops the vetoed state (nothing
//!   is re-added when the tombstone expires); a tombstone without
//!   incarnation is cleared by it (the removal is the only sign its boot is
//!   over), one with an incarnation keeps vetoing that boot until it
//!   expires (a restart passes anyway; a replay of the closed boot after
//!   its unregister must not);
//! - when it expires, the vetoed state, if any, is re-applied, so a vetoed
//!   add is never lost.
//!
//! No tombstone is written for an endpoint the directory does not hold, nor
//! for a closing of another incarnation than the one held.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::endpoint_set::EndpointSetEditor;
use crate::incarnation::Incarnation;
use crate::instance::Instance;
use crate::slot_index::hash_id;
use crate::url::Endpoint;

/// Longest expiry a tombstone gets when `now + ttl` does not fit an
/// `Instant`.
const FALLBACK_TTL: Duration = Duration::from_secs(3600);

/// What the tombstones of a directory did, counted since the counts were
/// last taken ([`crate::DirectoryMachine::take_tombstone_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TombstoneCounts {
    /// Tombstones written (an endpoint held announced closing).
    pub written: u64,
    /// Re-adds vetoed (same incarnation as a tombstone).
    pub vetoed: u64,
    /// Tombstones cleared by a re-add of another incarnation (a restart).
    pub cleared_by_restart: u64,
    /// Tombstones cleared by the registry removing the instance.
    pub cleared_by_removal: u64,
    /// Closing notices that wrote nothing: unknown endpoint, another
    /// incarnation than the one held, or another directory's key.
    pub ignored: u64,
    /// Tombstones expired.
    pub expired: u64,
    /// Vetoed endpoints re-added when their tombstone expired.
    pub replayed: u64,
}

impl TombstoneCounts {
    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &TombstoneCounts) {
        self.written = self.written.saturating_add(other.written);
        self.vetoed = self.vetoed.saturating_add(other.vetoed);
        self.cleared_by_restart = self
            .cleared_by_restart
            .saturating_add(other.cleared_by_restart);
        self.cleared_by_removal = self
            .cleared_by_removal
            .saturating_add(other.cleared_by_removal);
        self.ignored = self.ignored.saturating_add(other.ignored);
        self.expired = self.expired.saturating_add(other.expired);
        self.replayed = self.replayed.saturating_add(other.replayed);
    }
}

/// One closed endpoint.
#[derive(Debug)]
struct Tombstone {
    /// The incarnation that closed.
    incarnation: Option<Incarnation>,
    expires: Instant,
    /// The latest URL the registry lists for the id, held back.
    vetoed: Option<Endpoint>,
}

/// The time and TTL a tombstone written now gets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    /// Now.
    pub(crate) now: Instant,
    /// The tombstone TTL read now.
    pub(crate) ttl: Duration,
}

impl Clock {
    fn expiry(self) -> Instant {
        self.now
            .checked_add(self.ttl)
            .or_else(|| self.now.checked_add(FALLBACK_TTL))
            .unwrap_or(self.now)
    }
}

/// The tombstones of one app's endpoints, by instance id, with their
/// expiries in order and the number holding a vetoed URL (so that neither
/// the next deadline nor the status costs a pass over them).
#[derive(Debug, Default)]
pub(crate) struct Tombstones {
    by_id: FxHashMap<Arc<str>, Tombstone>,
    /// The ids' hashes ([`Instance::id_hash`]) with their number: screening
    /// a Reset of many URLs against a few tombstones costs one integer
    /// lookup per URL, not an id hashed.
    hashes: FxHashMap<u64, u32>,
    by_expiry: BTreeSet<(Instant, Arc<str>)>,
    vetoed: usize,
}

/// One tombstone as plain data: what a replacement directory takes over
/// (`directory/resume.rs`). The URL it held back is not: the app's next
/// Reset lists it again, and is screened as any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TombRecord {
    id: Arc<str>,
    incarnation: Option<Incarnation>,
    expires: Instant,
}

impl Tombstones {
    /// Every tombstone as plain data.
    pub(crate) fn records(&self) -> Vec<TombRecord> {
        self.by_id
            .iter()
            .map(|(id, t)| TombRecord {
                id: id.clone(),
                incarnation: t.incarnation.clone(),
                expires: t.expires,
            })
            .collect()
    }

    /// Tombstones rebuilt from `records` (every index derived again); those
    /// expired by `now` are left out.
    pub(crate) fn from_records(records: Vec<TombRecord>, now: Instant) -> Self {
        let mut tombs = Self::default();
        for r in records.into_iter().filter(|r| r.expires > now) {
            let t = Tombstone {
                incarnation: r.incarnation,
                expires: r.expires,
                vetoed: None,
            };
            tombs.insert(r.id, t);
        }
        tombs
    }

    /// Number of tombstones.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every tombstone: its instance id and the URL it holds back, if any
    /// (`directory/inspect.rs`).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, Option<&Endpoint>)> + '_ {
        self.by_id.iter().map(|(id, t)| (&**id, t.vetoed.as_ref()))
    }

    /// Number of tombstones holding back a URL the registry lists.
    pub(crate) fn vetoed(&self) -> usize {
        self.vetoed
    }

    /// The earliest expiry.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.by_expiry.first().map(|(at, _)| *at)
    }

    /// Whether `inst`'s id has a tombstone.
    #[inline]
    fn has(&self, inst: &Instance) -> bool {
        !self.by_id.is_empty()
            && self.hashes.contains_key(&inst.id_hash())
            && self.by_id.contains_key(inst.id())
    }

    fn insert(&mut self, id: Arc<str>, tombstone: Tombstone) {
        self.remove(&id);
        if tombstone.vetoed.is_some() {
            self.vetoed = self.vetoed.saturating_add(1);
        }
        *self.hashes.entry(hash_id(&id)).or_default() += 1;
        self.by_expiry.insert((tombstone.expires, id.clone()));
        self.by_id.insert(id, tombstone);
    }

    fn remove(&mut self, id: &str) -> Option<Tombstone> {
        let (id, t) = self.by_id.remove_entry(id)?;
        let hash = hash_id(&id);
        if let Some(n) = self.hashes.get_mut(&hash) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.hashes.remove(&hash);
            }
        }
        self.by_expiry.remove(&(t.expires, id));
        if t.vetoed.is_some() {
            self.vetoed = self.vetoed.saturating_sub(1);
        }
        Some(t)
    }

    /// Replaces the vetoed URL of `id`'s tombstone, if any.
    fn set_vetoed(&mut self, id: &str, url: Option<Endpoint>) {
        let Some(t) = self.by_id.get_mut(id) else {
            return;
        };
        match (t.vetoed.is_some(), url.is_some()) {
            (false, true) => self.vetoed = self.vetoed.saturating_add(1),
            (true, false) => self.vetoed = self.vetoed.saturating_sub(1),
            _ => {}
        }
        t.vetoed = url;
    }

    /// `id` (held in `editor`) closed in `incarnation`: removes it and
    /// writes its tombstone; `keep` names whether the registry still lists
    /// the held URL (a call said it closes, not the registry), which then
    /// is the state re-applied at expiry. `false` when nothing was held
    /// under that id and incarnation.
    pub(crate) fn close(
        &mut self,
        editor: &mut EndpointSetEditor,
        id: &str,
        incarnation: Option<&Incarnation>,
        keep: bool,
        clock: Clock,
        counts: &mut TombstoneCounts,
    ) -> bool {
        let Some(held) = editor.get(id) else {
            return false;
        };
        if held.incarnation() != incarnation {
            return false;
        }
        let Some(held) = editor.remove(id) else {
            return false;
        };
        self.insert(
            held.instance.id_arc().clone(),
            Tombstone {
                incarnation: incarnation.cloned(),
                expires: clock.expiry(),
                vetoed: keep.then_some(held),
            },
        );
        counts.written = counts.written.saturating_add(1);
        true
    }

    /// The registry flags `instance` closing: closes it if held; if it is
    /// already tombstoned in that incarnation, its latest state is closing
    /// (nothing to re-apply).
    fn registry_closing(
        &mut self,
        editor: &mut EndpointSetEditor,
        instance: &Instance,
        clock: Clock,
        counts: &mut TombstoneCounts,
    ) {
        let inc = instance.incarnation();
        if self.close(editor, instance.id(), inc, false, clock, counts) {
            return;
        }
        let same = self
            .by_id
            .get(instance.id())
            .is_some_and(|t| t.incarnation.as_ref() == inc);
        if same {
            self.set_vetoed(instance.id(), None);
        }
    }

    /// Whether `url` may be added: vetoed (and kept as the latest state)
    /// when tombstoned in its incarnation; a tombstone of another
    /// incarnation is cleared (a restart).
    fn admit(&mut self, url: Endpoint, counts: &mut TombstoneCounts) -> Option<Endpoint> {
        if !self.has(&url.instance) {
            return Some(url);
        }
        let Some(t) = self.by_id.get(url.instance_id()) else {
            return Some(url);
        };
        if t.incarnation.as_ref() == url.incarnation() {
            let id = url.instance.id_arc().clone();
            self.set_vetoed(&id, Some(url));
            counts.vetoed = counts.vetoed.saturating_add(1);
            return None;
        }
        self.remove(url.instance_id());
        counts.cleared_by_restart = counts.cleared_by_restart.saturating_add(1);
        Some(url)
    }

    /// The registry no longer lists `id`: the instance is gone, so its
    /// tombstone (and any add it held back) goes too. A replay of the closed
    /// boot after this is an older registry state, which the engine's
    /// versioned events already refuse; a new registration of the address
    /// is served at once, whatever its incarnation.
    fn removed(&mut self, id: &str, counts: &mut TombstoneCounts) {
        if self.by_id.contains_key(id) {
            self.remove(id);
            counts.cleared_by_removal = counts.cleared_by_removal.saturating_add(1);
        }
    }

    /// Screens a full list about to replace `editor`'s contents: writes the
    /// tombstones of held endpoints now `closing`, vetoes tombstoned
    /// incarnations, and treats tombstoned ids the list lacks (and not
    /// closing) as removed by the registry.
    pub(crate) fn screen_full(
        &mut self,
        editor: &mut EndpointSetEditor,
        urls: Vec<Endpoint>,
        closing: &[Arc<Instance>],
        clock: Clock,
        counts: &mut TombstoneCounts,
    ) -> Vec<Endpoint> {
        if self.by_id.is_empty() && closing.is_empty() {
            return urls;
        }
        for c in closing {
            self.registry_closing(editor, c, clock, counts);
        }
        if self.by_id.is_empty() {
            return urls;
        }
        let mut listed: FxHashSet<Arc<str>> = closing.iter().map(|c| c.id_arc().clone()).collect();
        let mut kept = Vec::with_capacity(urls.len());
        for url in urls {
            if self.has(&url.instance) {
                listed.insert(url.instance.id_arc().clone());
            }
            kept.extend(self.admit(url, counts));
        }
        let gone: Vec<Arc<str>> = self
            .by_id
            .keys()
            .filter(|id| !listed.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.removed(&id, counts);
        }
        kept
    }

    /// Applies a patch to `editor` through the tombstones: closings first
    /// (their removals are not the registry's), then removals, then the
    /// upserts that pass.
    pub(crate) fn apply_patch(
        &mut self,
        editor: &mut EndpointSetEditor,
        upserts: Vec<Endpoint>,
        removals: &[Arc<str>],
        closing: &[Arc<Instance>],
        clock: Clock,
        counts: &mut TombstoneCounts,
    ) {
        if self.by_id.is_empty() && closing.is_empty() {
            for id in removals {
                editor.remove(id);
            }
            editor.extend(upserts);
            return;
        }
        for c in closing {
            self.registry_closing(editor, c, clock, counts);
        }
        let closed: FxHashSet<&str> = closing.iter().map(|c| c.id()).collect();
        for id in removals {
            if !closed.contains(id.as_ref()) {
                self.removed(id, counts);
            }
            editor.remove(id);
        }
        if self.by_id.is_empty() {
            editor.extend(upserts);
            return;
        }
        let passed: Vec<Endpoint> = upserts
            .into_iter()
            .filter_map(|u| self.admit(u, counts))
            .collect();
        editor.extend(passed);
    }

    /// Drops the tombstones expired at `now` and re-adds their vetoed URLs
    /// to `editor`. Whether anything was re-added.
    pub(crate) fn expire(
        &mut self,
        editor: &mut EndpointSetEditor,
        now: Instant,
        counts: &mut TombstoneCounts,
    ) -> bool {
        let mut replayed = false;
        // Each pass pops one entry: bounded by the number of tombstones.
        while self.by_expiry.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, id)) = self.by_expiry.pop_first() else {
                break;
            };
            let Some(t) = self.remove(&id) else {
                continue;
            };
            counts.expired = counts.expired.saturating_add(1);
            if let Some(url) = t.vetoed {
                editor.upsert(url);
                counts.replayed = counts.replayed.saturating_add(1);
                replayed = true;
            }
        }
        replayed
    }
}
