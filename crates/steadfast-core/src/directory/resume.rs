//! Restart clean: a directory whose actor panicked is not repaired, it is
//! replaced. The new machine starts from its inputs (the subscribe key, the
//! apps, a seed) and learns every app's state again from its resolver (each
//! answers an attach with a Reset). A [`DirectoryResume`] carries over what
//! no resolver can tell again:
//! - the version of the last snapshot (readers hold it; the new machine's
//!   snapshots come after it);
//! - the closing tombstones, as plain records (id, incarnation, expiry): a
//!   caller said those endpoints close, and a replayed registry record of
//!   the closed boot must stay vetoed until they expire;
//! - what a mapping-following directory was last told of its mapping;
//! - each app's endpoint set as last published (immutable, shared).
//!
//! Until an app that had answered delivers again, the replacement serves
//! that app's carried set, so readers see neither a partial nor a pending
//! state, while every app that answered is served from its own new state at
//! once (a removal is never held back). The carried sets are bounded by
//! [`RESUME_GATE`]: an app whose resolver does not answer by then is shown
//! as what it is, pending.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::apps::MappingView;
use super::tombstones::{TombRecord, Tombstones};
use super::DirectoryMachine;
use crate::endpoint_set::EndpointSet;

/// Longest a replacement directory waits for its apps' states before it
/// publishes what it has.
pub const RESUME_GATE: Duration = Duration::from_secs(1);

/// What a replacement directory takes over from the one it replaces
/// ([`DirectoryMachine::resume_point`], [`DirectoryMachine::resuming`]).
#[derive(Clone, Debug, Default)]
pub struct DirectoryResume {
    version: u64,
    tombs: BTreeMap<String, Vec<TombRecord>>,
    mapping: Option<MappingView>,
    answered: BTreeMap<String, EndpointSet>,
}

impl DirectoryResume {
    /// Version of the last snapshot.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Raises the version to `published` when readers hold a later one
    /// (the shell's record of what it published).
    pub fn after(mut self, published: u64) -> Self {
        self.version = self.version.max(published);
        self
    }

    /// Number of tombstones carried.
    pub fn tombstones(&self) -> usize {
        self.tombs.values().map(Vec::len).sum()
    }
}

/// The publish gate of a replacement: apps still awaited, and until when.
#[derive(Clone, Debug)]
pub(super) struct Gate {
    until: Instant,
    pub(super) awaited: BTreeMap<String, EndpointSet>,
}

impl DirectoryMachine {
    /// What a replacement of this machine takes over (see the module docs).
    pub fn resume_point(&self) -> DirectoryResume {
        let mut tombs: BTreeMap<String, Vec<TombRecord>> = self
            .carried
            .iter()
            .map(|(app, t)| (app.clone(), t.records()))
            .collect();
        let mut answered = BTreeMap::new();
        for (app, view) in &self.apps {
            if let Some(v) = view {
                answered.insert(app.clone(), v.set.clone());
                tombs
                    .entry(app.clone())
                    .or_default()
                    .extend(v.tombs.records());
            }
        }
        if let Some(gate) = &self.gate {
            for (app, set) in &gate.awaited {
                answered.entry(app.clone()).or_insert_with(|| set.clone());
            }
        }
        tombs.retain(|_, t| !t.is_empty());
        DirectoryResume {
            version: self.version,
            tombs,
            mapping: self.mapping.clone(),
            answered,
        }
    }

    /// This (new) machine, with its apps set, replaces one that stopped at
    /// `point`: its snapshots come after the last one there, the carried
    /// tombstones not expired by `now` screen each app's first Reset, and
    /// each app that had answered there is served from its carried set
    /// until it answers here, at most until [`RESUME_GATE`] after `now`.
    pub fn resuming(mut self, point: DirectoryResume, now: Instant) -> Self {
        let DirectoryResume {
            version,
            tombs,
            mapping,
            answered,
        } = point;
        self.version = self.version.max(version);
        for (app, records) in tombs {
            if self.apps.contains_key(&app) {
                self.carried
                    .insert(app, Tombstones::from_records(records, now));
            }
        }
        if self.mapping.is_some() {
            self.mapping = mapping.or(self.mapping.take());
        }
        let awaited: BTreeMap<String, EndpointSet> = answered
            .into_iter()
            .filter(|(a, _)| self.apps.contains_key(a))
            .collect();
        self.gate = match now.checked_add(RESUME_GATE) {
            Some(until) if !awaited.is_empty() => Some(Gate { until, awaited }),
            _ => None,
        };
        drop(self.republish());
        self
    }

    /// `app` delivered a state: the gate stops waiting for it.
    pub(super) fn answered(&mut self, app: &str) {
        if let Some(gate) = &mut self.gate {
            gate.awaited.remove(app);
            if gate.awaited.is_empty() {
                self.gate = None;
            }
        }
    }

    /// When the gate opens by itself, if one is up.
    pub(super) fn gate_deadline(&self) -> Option<Instant> {
        self.gate.as_ref().map(|g| g.until)
    }

    /// Whether `app` is served from a carried set (it has not answered the
    /// replacement yet).
    pub fn awaits(&self, app: &str) -> bool {
        self.gate
            .as_ref()
            .is_some_and(|g| g.awaited.contains_key(app))
    }

    /// Opens the gate when its time is up at `now`; whether it did.
    pub(super) fn open_gate(&mut self, now: Instant) -> bool {
        if self.gate.as_ref().is_some_and(|g| g.until <= now) {
            self.gate = None;
            return true;
        }
        false
    }
}
