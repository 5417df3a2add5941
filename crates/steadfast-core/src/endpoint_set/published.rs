//! The read side of a directory: [`DirectorySnapshot`], an immutable view
//! of everything a directory serves, and [`Published`], the lock-free slot
//! the directory's writer stores snapshots into and callers read from on
//! any thread, without messaging anyone.
//!
//! A directory merges several provider apps. The snapshot keeps one
//! [`EndpointSet`] per app plus a tiny running-total array over apps
//! (rather than one merged set): an update of one app then rebuilds or
//! patches that app's set only, sharing the other apps' sets as they are,
//! and per-app generations stay per-app. A pick scans the (few) app totals,
//! then searches the app's set.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::{scale, EndpointSet};
use crate::directory::{DirectoryStatus, EmptyReason};
use crate::url::Endpoint;

/// Everything a directory serves at one moment: immutable, shared by every
/// reader that loaded it.
#[derive(Clone, Debug)]
pub struct DirectorySnapshot {
    version: u64,
    status: DirectoryStatus,
    closed: bool,
    /// One set per provider app that has sent an update, in app order.
    apps: Vec<EndpointSet>,
    /// `tops[a]`: weight of `apps[..=a]`, saturating.
    tops: Vec<u64>,
    len: usize,
}

impl Default for DirectorySnapshot {
    fn default() -> Self {
        Self::new(0, DirectoryStatus::Empty(EmptyReason::Pending), Vec::new())
    }
}

impl DirectorySnapshot {
    /// A snapshot at `version` serving `apps` (in app order).
    pub fn new(version: u64, status: DirectoryStatus, apps: Vec<EndpointSet>) -> Self {
        let mut total = 0u64;
        let tops = apps
            .iter()
            .map(|s| {
                total = total.saturating_add(s.total_weight());
                total
            })
            .collect();
        let len = apps.iter().map(EndpointSet::len).sum();
        Self {
            version,
            status,
            closed: false,
            apps,
            tops,
            len,
        }
    }

    /// The same content, marked closed (the directory was shut down).
    pub fn closed(&self) -> Self {
        Self {
            closed: true,
            ..self.clone()
        }
    }

    /// Number of updates the directory applied before this snapshot.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// What the directory can serve, and why.
    pub fn status(&self) -> &DirectoryStatus {
        &self.status
    }

    /// Whether the directory was shut down.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no endpoint.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sum of the weights (saturating).
    pub fn total_weight(&self) -> u64 {
        self.tops.last().copied().unwrap_or(0)
    }

    /// The per-app sets, in app order.
    pub fn sets(&self) -> &[EndpointSet] {
        &self.apps
    }

    /// Every endpoint, app by app, each app in slot order.
    pub fn iter(&self) -> impl Iterator<Item = &Endpoint> + '_ {
        self.apps.iter().flat_map(EndpointSet::iter)
    }

    /// Every endpoint (see [`DirectorySnapshot::iter`]), as shared handles.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.iter().cloned().collect()
    }

    /// Picks an endpoint for a uniform random `r`, weighted over every app
    /// (`r` is scaled onto `0..total_weight()`, see [`EndpointSet::pick`]).
    pub fn pick(&self, r: u64) -> Option<&Endpoint> {
        let total = self.total_weight();
        if total == 0 {
            return None;
        }
        let point = scale(r, total);
        let a = self.tops.partition_point(|&t| t <= point);
        let before = a.checked_sub(1).map_or(0, |p| self.tops[p]);
        self.apps.get(a)?.pick_point(point.checked_sub(before)?)
    }
}

/// The lock-free slot one directory publishes its snapshots into. Readers
/// [`Published::load`] or [`Published::select`] without blocking; the
/// writer [`Published::store`]s. Once [`Published::close`]d, it stays
/// closed: later stores are dropped.
#[derive(Debug)]
pub struct Published {
    current: ArcSwap<DirectorySnapshot>,
    closed: AtomicBool,
    /// Serialises writers (the directory and whoever closes it); readers
    /// never take it.
    writers: Mutex<()>,
}

impl Default for Published {
    fn default() -> Self {
        Self::new(Arc::new(DirectorySnapshot::default()))
    }
}

impl Published {
    /// A slot holding `snapshot`.
    pub fn new(snapshot: Arc<DirectorySnapshot>) -> Self {
        Self {
            current: ArcSwap::new(snapshot),
            closed: AtomicBool::new(false),
            writers: Mutex::new(()),
        }
    }

    /// Publishes `snapshot` (dropped when the slot is closed); returns the
    /// snapshot it replaced, so the writer can free it off the read path.
    pub fn store(&self, snapshot: Arc<DirectorySnapshot>) -> Option<Arc<DirectorySnapshot>> {
        let _w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        Some(self.current.swap(snapshot))
    }

    /// Closes the slot for good: publishes the current content marked
    /// closed, and refuses later stores.
    pub fn close(&self) {
        let _w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let closed = self.current.load().closed();
        self.current.store(Arc::new(closed));
    }

    /// Whether [`Published::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A cheap, short-lived guard on the current snapshot (no reference
    /// count is touched on the fast path; do not hold it for long).
    pub fn load(&self) -> arc_swap::Guard<Arc<DirectorySnapshot>> {
        self.current.load()
    }

    /// The current snapshot, as an owned handle.
    pub fn snapshot(&self) -> Arc<DirectorySnapshot> {
        self.current.load_full()
    }

    /// Picks an endpoint of the current snapshot, weighted, with this
    /// thread's fast generator; `None` when empty or closed.
    pub fn select(&self) -> Option<Endpoint> {
        self.select_with(thread_random())
    }

    /// Like [`Published::select`] with the uniform random `r` given (for
    /// tests and seeded callers).
    pub fn select_with(&self, r: u64) -> Option<Endpoint> {
        let snap = self.current.load();
        if snap.closed {
            return None;
        }
        snap.pick(r).cloned()
    }
}

thread_local! {
    /// wyrand state of this thread; 0 = not seeded yet.
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// A fast per-thread pseudo-random `u64` (wyrand), seeded once per thread
/// from the process's random hasher keys. Not cryptographic: it spreads
/// load, nothing more.
pub fn thread_random() -> u64 {
    RNG.with(|s| {
        let mut state = s.get();
        if state == 0 {
            let mut h = RandomState::new().build_hasher();
            h.write_u64(0x5eed);
            state = h.finish() | 1;
        }
        let (next, out) = wyrand(state);
        s.set(next);
        out
    })
}

/// One wyrand step: the next state and the output.
pub(crate) fn wyrand(state: u64) -> (u64, u64) {
    let next = state.wrapping_add(0xa076_1d64_78bd_642f);
    let t = u128::from(next).wrapping_mul(u128::from(next ^ 0xe703_7ed1_a0b4_28db));
    let out = u64::try_from(t >> 64).unwrap_or(0) ^ (t as u64);
    (if next == 0 { 1 } else { next }, out)
}
