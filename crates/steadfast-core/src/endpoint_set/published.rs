//! The read side of a directory: [`DirectorySnapshot`], an immutable view
//! of everything a directory serves, and [`Published`], the lock-free slot
//! the directory's writer stores snapshots into and callers read from on
//! any thread, without messaging anyone.
//!
//! A directory merges several provider apps. The snapshot keeps one
//! [`EndpointSet`] per app plus a tiny running-total array over apps
//! (rather than one merged set): an update of one app then rebuilds or
//! patches that app's set only, sharing the other apps' sets as they are,
//! and per-app versions stay per-app. A pick scans the (few) app totals,
//! then searches the app's set.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
        Self::new(
            0,
            DirectoryStatus::Empty(EmptyReason::Pending(crate::pending::Pending::waiting())),
            Vec::new(),
        )
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
    #[inline]
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
    #[inline]
    pub fn total_weight(&self) -> u64 {
        self.tops.last().copied().unwrap_or(0)
    }

    /// The per-app sets, in app order.
    pub fn sets(&self) -> &[EndpointSet] {
        &self.apps
    }

    /// The endpoint in position `index` of [`DirectorySnapshot::iter`]'s
    /// order (`O(apps)`).
    #[inline]
    pub fn get(&self, mut index: usize) -> Option<&Endpoint> {
        if let [only] = self.apps.as_slice() {
            return only.get(index);
        }
        for set in &self.apps {
            match index.checked_sub(set.len()) {
                Some(rest) => index = rest,
                None => return set.get(index),
            }
        }
        None
    }

    /// [`DirectorySnapshot::get`] with the endpoint's weight, read from the
    /// running totals (no load of the endpoint's record).
    #[inline]
    pub fn get_weighted(&self, mut index: usize) -> Option<(&Endpoint, u32)> {
        if let [only] = self.apps.as_slice() {
            return only.get_weighted(index);
        }
        for set in &self.apps {
            match index.checked_sub(set.len()) {
                Some(rest) => index = rest,
                None => return set.get_weighted(index),
            }
        }
        None
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
    #[inline]
    pub fn pick(&self, r: u64) -> Option<&Endpoint> {
        if let [only] = self.apps.as_slice() {
            return only.pick(r);
        }
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
///
/// [`Published::select`] reads through a small per-thread cache of the
/// snapshots last read (at most [`THREAD_CACHE`] per thread, keyed by slot
/// and store sequence): a hit costs one atomic load, no read-modify-write.
/// A thread thus keeps at most that many snapshots alive until it selects
/// again; when its entry held the last handle on a replaced snapshot, the
/// reader hands it to the slot and the next store frees it on the writer.
#[derive(Debug)]
pub struct Published {
    current: ArcSwap<DirectorySnapshot>,
    /// Bumped after every store: a thread's cached snapshot is current
    /// while the sequence it was read at still is.
    seq: AtomicU64,
    /// Identifies the slot in the per-thread caches.
    id: u64,
    closed: AtomicBool,
    /// Serialises writers (the directory and whoever closes it); readers
    /// never take it.
    writers: Mutex<()>,
    /// Replaced snapshots whose last handle a reader's cache held: freed by
    /// the next store, off the read path.
    retired: Mutex<Vec<Arc<DirectorySnapshot>>>,
}

/// Snapshots a thread's [`Published::select`] cache holds at most.
pub const THREAD_CACHE: usize = 4;

struct Cached {
    id: u64,
    seq: u64,
    snapshot: Arc<DirectorySnapshot>,
}

thread_local! {
    /// The snapshots this thread last selected from, most recent first.
    static CACHE: RefCell<Vec<Cached>> = const { RefCell::new(Vec::new()) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

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
            seq: AtomicU64::new(0),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            closed: AtomicBool::new(false),
            writers: Mutex::new(()),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// Publishes `snapshot` (dropped when the slot is closed); returns the
    /// snapshot it replaced, so the writer can free it off the read path.
    pub fn store(&self, snapshot: Arc<DirectorySnapshot>) -> Option<Arc<DirectorySnapshot>> {
        let _w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let old = self.current.swap(snapshot);
        self.seq.fetch_add(1, Ordering::AcqRel);
        let retired = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        drop(retired);
        Some(old)
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
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether [`Published::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A cheap, short-lived guard on the current snapshot (no reference
    /// count is touched on the fast path; do not hold it for long).
    #[inline]
    pub fn load(&self) -> arc_swap::Guard<Arc<DirectorySnapshot>> {
        self.current.load()
    }

    /// The current snapshot, as an owned handle.
    pub fn snapshot(&self) -> Arc<DirectorySnapshot> {
        self.current.load_full()
    }

    /// Picks an endpoint of the current snapshot, weighted, with the
    /// uniform random `r` (randomness is the caller's input); `None` when
    /// empty, `Err(Closed)` once closed.
    #[inline]
    pub fn select_with(&self, r: u64) -> Result<Option<Endpoint>, Closed> {
        self.read(|snapshot| pick_from(snapshot, r))
    }

    /// Runs `f` on the current snapshot, read through this thread's cache
    /// (see the type's docs): a hit costs one atomic load.
    #[inline]
    pub fn read<R>(&self, f: impl FnOnce(&DirectorySnapshot) -> R) -> R {
        let seq = self.seq.load(Ordering::Acquire);
        let out = CACHE.with(move |cache| {
            let Ok(cache) = cache.try_borrow() else {
                return Err(f);
            };
            match cache.iter().find(|c| c.id == self.id && c.seq == seq) {
                Some(c) => Ok(f(&c.snapshot)),
                None => Err(f),
            }
        });
        match out {
            Ok(out) => out,
            Err(f) => self.read_slow(seq, f),
        }
    }

    /// Refreshes this thread's cache entry for the slot, then runs `f`.
    #[cold]
    fn read_slow<R>(&self, seq: u64, f: impl FnOnce(&DirectorySnapshot) -> R) -> R {
        let snapshot = self.current.load_full();
        let picked = f(&snapshot);
        let evicted = CACHE.with(|cache| {
            let mut cache = cache.try_borrow_mut().ok()?;
            let evicted = match cache.iter().position(|c| c.id == self.id) {
                Some(i) => Some(cache.remove(i)),
                None if cache.len() >= THREAD_CACHE => cache.pop(),
                None => None,
            };
            cache.insert(
                0,
                Cached {
                    id: self.id,
                    seq,
                    snapshot,
                },
            );
            evicted
        });
        if let Some(old) = evicted.filter(|c| c.id == self.id) {
            // Only this thread held it: let the writer free it.
            if Arc::strong_count(&old.snapshot) == 1 {
                if let Ok(mut retired) = self.retired.try_lock() {
                    retired.push(old.snapshot);
                }
            }
        }
        picked
    }
}

/// Entries in this thread's select cache (for tests).
#[cfg(test)]
pub(crate) fn thread_cache_len() -> usize {
    CACHE.with(|c| c.borrow().len())
}

/// Returned by [`Published::select`] once the slot is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

#[inline]
fn pick_from(snapshot: &DirectorySnapshot, r: u64) -> Result<Option<Endpoint>, Closed> {
    if snapshot.closed {
        return Err(Closed);
    }
    Ok(snapshot.pick(r).cloned())
}

/// One wyrand step: the next state and the output (pure: the state is the
/// caller's; a shell keeps one per thread, `steadfast_actors::thread_random`).
/// Not cryptographic: it spreads load, nothing more.
#[inline]
pub fn wyrand(state: u64) -> (u64, u64) {
    let next = state.wrapping_add(0xa076_1d64_78bd_642f);
    let t = u128::from(next).wrapping_mul(u128::from(next ^ 0xe703_7ed1_a0b4_28db));
    let out = u64::try_from(t >> 64).unwrap_or(0) ^ (t as u64);
    (if next == 0 { 1 } else { next }, out)
}
