//! [`EndpointSet`]: an immutable, structurally shared, weighted set of
//! [`Endpoint`]s, one per instance id, and [`EndpointSetEditor`], the
//! writer-side handle that edits it by copy-on-write.
//!
//! # Layout
//! Two levels: a top array of `Arc<Chunk>`, each chunk holding up to
//! [`CHUNK`] endpoints with their running weight totals, and on top the
//! running totals over chunks. Cloning a set is one reference-count
//! increment; publishing the result of an edit copies the top arrays
//! (`n / CHUNK` entries) and only the chunks the edit touched (each
//! `CHUNK` entries): editing `k` endpoints of an `n`-endpoint set costs
//! `O(k * CHUNK + n / CHUNK)`, never `O(n)`. A pick is two binary searches.
//!
//! # Order
//! Slot order, deterministic: an insert appends, an upsert of a known id
//! replaces in place, a removal moves the last endpoint into the freed slot
//! (swap-remove). Iteration gives that order. [`EndpointSet::from_vec`]
//! keeps the vector's order (a repeated id replaces its first slot).
//!
//! # Weights
//! Weights are `u32` ([`ServiceUrl::weight`](crate::ServiceUrl::weight))
//! summed in `u64` with saturating additions: the sum is exact for fewer
//! than 2^32 endpoints of weight `u32::MAX` (far above any directory), and
//! never overflows beyond. Weight 0 is never picked; a set whose total
//! weight is 0 picks nothing.

use std::fmt;
use std::sync::Arc;

use crate::instance::Instance;
use crate::slot_index::{hash_id, SlotIndex};

use crate::url::Endpoint;

#[path = "endpoint_set/published.rs"]
mod published;
#[cfg(test)]
#[path = "endpoint_set/tests.rs"]
mod tests;

pub use published::{thread_random, Closed, DirectorySnapshot, Published, THREAD_CACHE};

/// Endpoints per chunk: a chunk copy (on the first edit of a chunk after a
/// publish) clones this many handles; a pick searches this many totals.
pub const CHUNK: usize = 256;

/// Up to [`CHUNK`] endpoints and their running weight totals.
#[derive(Clone, Default)]
struct Chunk {
    items: Vec<Endpoint>,
    /// `cum[i]`: weight of `items[..=i]` (exact: at most `CHUNK * u32::MAX`).
    cum: Vec<u64>,
}

impl Chunk {
    fn with_capacity(n: usize) -> Self {
        Self {
            items: Vec::with_capacity(n),
            cum: Vec::with_capacity(n),
        }
    }

    fn total(&self) -> u64 {
        self.cum.last().copied().unwrap_or(0)
    }

    /// Recomputes the running totals from `from` on.
    fn reweigh(&mut self, from: usize) {
        self.cum.truncate(from);
        let mut total = from
            .checked_sub(1)
            .and_then(|i| self.cum.get(i).copied())
            .unwrap_or(0);
        for ep in self.items.iter().skip(from) {
            total = total.saturating_add(u64::from(ep.weight()));
            self.cum.push(total);
        }
    }
}

#[derive(Default)]
struct Layout {
    chunks: Vec<Arc<Chunk>>,
    /// `tops[c]`: weight of `chunks[..=c]`, saturating.
    tops: Vec<u64>,
    len: usize,
}

/// An immutable weighted set of endpoints (see the module docs for layout,
/// order and weight bounds). Cloning is `O(1)`.
#[derive(Clone, Default)]
pub struct EndpointSet {
    layout: Arc<Layout>,
}

/// Maps a uniform `r` onto `0..total` (multiply-high, no division).
#[inline]
pub(crate) fn scale(r: u64, total: u64) -> u64 {
    let wide = u128::from(r) * u128::from(total);
    u64::try_from(wide >> 64).unwrap_or(u64::MAX)
}

impl EndpointSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set of `endpoints` built in one pass, in their order (a repeated
    /// instance id replaces the endpoint in its first slot).
    pub fn from_vec(endpoints: Vec<Endpoint>) -> Self {
        let mut editor = EndpointSetEditor::new();
        editor.rebuild(endpoints);
        editor.finish()
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.layout.len
    }

    /// Whether the set holds no endpoint.
    pub fn is_empty(&self) -> bool {
        self.layout.len == 0
    }

    /// Sum of the weights (saturating, see the module docs).
    #[inline]
    pub fn total_weight(&self) -> u64 {
        self.layout.tops.last().copied().unwrap_or(0)
    }

    /// The endpoint in slot `index`.
    pub fn get(&self, index: usize) -> Option<&Endpoint> {
        let chunk = self.layout.chunks.get(index / CHUNK)?;
        chunk.items.get(index % CHUNK)
    }

    /// The endpoint in slot `index` and its weight, read from the running
    /// totals (no load of the endpoint's record).
    #[inline]
    pub fn get_weighted(&self, index: usize) -> Option<(&Endpoint, u32)> {
        let chunk = self.layout.chunks.get(index / CHUNK)?;
        let i = index % CHUNK;
        let upto = *chunk.cum.get(i)?;
        let before = i.checked_sub(1).map_or(0, |p| chunk.cum[p]);
        let weight = u32::try_from(upto.saturating_sub(before)).unwrap_or(u32::MAX);
        Some((chunk.items.get(i)?, weight))
    }

    /// Every endpoint, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = &Endpoint> + '_ {
        self.layout.chunks.iter().flat_map(|c| c.items.iter())
    }

    /// Every endpoint, in slot order, as a vector of shared handles.
    pub fn to_vec(&self) -> Vec<Endpoint> {
        self.iter().cloned().collect()
    }

    /// Picks an endpoint for a uniform random `r`, weighted: `r` is scaled
    /// onto `0..total_weight()` (multiply-high) and the endpoint whose
    /// running-total range holds that point is returned.
    #[inline]
    pub fn pick(&self, r: u64) -> Option<&Endpoint> {
        match self.total_weight() {
            0 => None,
            total => self.pick_point(scale(r, total)),
        }
    }

    /// The endpoint whose running-total range `[before, before + weight)`
    /// holds `point`, or `None` when `point >= total_weight()`.
    #[inline]
    pub fn pick_point(&self, point: u64) -> Option<&Endpoint> {
        let tops = &self.layout.tops;
        let c = tops.partition_point(|&t| t <= point);
        let chunk = self.layout.chunks.get(c)?;
        let before = c.checked_sub(1).map_or(0, |p| tops[p]);
        let local = point.checked_sub(before)?;
        let i = chunk.cum.partition_point(|&w| w <= local);
        chunk.items.get(i)
    }

    /// An editor starting from this set. It indexes the set by instance id
    /// (`O(n)` once); keep the editor alive to make later edits cost only
    /// what they touch.
    pub fn edit(&self) -> EndpointSetEditor {
        let chunks = self.layout.chunks.clone();
        let mut index = SlotIndex::default();
        index.reserve(self.len(), at(&chunks));
        for (slot, ep) in self.iter().enumerate() {
            index.insert_unique(ep.instance.id_hash(), slot as u32, at(&chunks));
        }
        EndpointSetEditor {
            chunks,
            tops: self.layout.tops.clone(),
            tops_valid: self.layout.chunks.len(),
            index,
        }
    }

    /// Whether both sets are the same allocation (a cheap "unchanged" test).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.layout, &other.layout)
    }
}

impl fmt::Debug for EndpointSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointSet")
            .field("len", &self.len())
            .field("total_weight", &self.total_weight())
            .finish()
    }
}

/// Writer-side handle on an [`EndpointSet`]: an index by instance id plus
/// the chunks, shared with the sets already published and copied on the
/// first write after each publish ([`EndpointSetEditor::snapshot`]).
#[derive(Clone, Default)]
pub struct EndpointSetEditor {
    chunks: Vec<Arc<Chunk>>,
    tops: Vec<u64>,
    /// `tops[..tops_valid]` are up to date.
    tops_valid: usize,
    /// Instance id -> slot (the id read back from the slot).
    index: SlotIndex,
}

/// The instance of the endpoint in slot `k` of `chunks`.
#[inline]
fn at<'a>(chunks: &'a [Arc<Chunk>]) -> impl Fn(u32) -> Option<&'a Instance> + 'a {
    move |k| {
        let k = k as usize;
        Some(&chunks.get(k / CHUNK)?.items.get(k % CHUNK)?.instance)
    }
}

/// The instance of the endpoint in slot `k` of the chunks `done` followed
/// by `cur` (a rebuild in progress).
#[inline]
fn at_in<'a>(done: &'a [Arc<Chunk>], cur: &'a Chunk) -> impl Fn(u32) -> Option<&'a Instance> {
    move |k| {
        let k = k as usize;
        let (c, i) = (k / CHUNK, k % CHUNK);
        let chunk = match done.get(c) {
            Some(chunk) => chunk.as_ref(),
            None if c == done.len() => cur,
            None => return None,
        };
        Some(&chunk.items.get(i)?.instance)
    }
}

impl EndpointSetEditor {
    /// An editor of the empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the editor holds no endpoint.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The endpoint of instance `id`.
    pub fn get(&self, id: &str) -> Option<&Endpoint> {
        let slot = self.index.find_id(id, at(&self.chunks))?;
        self.at_slot(slot)
    }

    /// The endpoint of the instance with `inst`'s id (no id hashing).
    pub fn get_like(&self, inst: &Instance) -> Option<&Endpoint> {
        let slot = self.index.find_instance(inst, at(&self.chunks))?;
        self.at_slot(slot)
    }

    fn at_slot(&self, slot: u32) -> Option<&Endpoint> {
        let slot = slot as usize;
        self.chunks.get(slot / CHUNK)?.items.get(slot % CHUNK)
    }

    /// Inserts `endpoint` (appended), or replaces the endpoint of the same
    /// instance id in place (inheriting its balancing statistics when of
    /// the same incarnation, see [`EndpointSetEditor::rebuild`]); returns
    /// the replaced one. `O(CHUNK)`.
    pub fn upsert(&mut self, endpoint: Endpoint) -> Option<Endpoint> {
        if let Some(slot) = self
            .index
            .find_instance(&endpoint.instance, at(&self.chunks))
        {
            return Some(self.put(slot as usize, endpoint));
        }
        let slot = self.index.len();
        let full = match self.chunks.last() {
            Some(c) => c.items.len() >= CHUNK,
            None => true,
        };
        if full {
            self.chunks.push(Arc::new(Chunk {
                items: Vec::with_capacity(CHUNK),
                cum: Vec::with_capacity(CHUNK),
            }));
        }
        let c = self.chunks.len() - 1;
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        let total = chunk.total().saturating_add(u64::from(endpoint.weight()));
        let hash = endpoint.instance.id_hash();
        chunk.items.push(endpoint);
        chunk.cum.push(total);
        self.tops_valid = self.tops_valid.min(c);
        // Slots are u32: a set holds fewer than 2^32 endpoints.
        self.index
            .insert_unique(hash, slot as u32, at(&self.chunks));
        None
    }

    /// Upserts every endpoint of `endpoints`, in order.
    pub fn extend(&mut self, endpoints: impl IntoIterator<Item = Endpoint>) {
        let endpoints = endpoints.into_iter();
        self.index
            .reserve(endpoints.size_hint().0, at(&self.chunks));
        for ep in endpoints {
            self.upsert(ep);
        }
    }

    /// Removes the endpoint of instance `id` (the last endpoint moves into
    /// its slot); returns it. `O(CHUNK)`.
    pub fn remove(&mut self, id: &str) -> Option<Endpoint> {
        self.remove_hashed(hash_id(id), id)
    }

    /// Removes the endpoint of the instance with `inst`'s id (no id
    /// hashing); returns it. `O(CHUNK)`.
    pub fn remove_like(&mut self, inst: &Instance) -> Option<Endpoint> {
        self.remove_hashed(inst.id_hash(), inst.id())
    }

    fn remove_hashed(&mut self, hash: u64, id: &str) -> Option<Endpoint> {
        let slot = self.index.remove(hash, id, at(&self.chunks))? as usize;
        let last_c = self.chunks.len().checked_sub(1)?;
        let last_chunk = Arc::make_mut(&mut self.chunks[last_c]);
        let moved = last_chunk.items.pop()?;
        last_chunk.cum.pop();
        if last_chunk.items.is_empty() {
            self.chunks.pop();
        }
        self.tops_valid = self.tops_valid.min(last_c);
        let last_slot = self.index.len();
        if slot == last_slot {
            return Some(moved);
        }
        self.index
            .moved(moved.instance.id_hash(), last_slot as u32, slot as u32);
        Some(self.put(slot, moved))
    }

    /// Removes every endpoint.
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.tops.clear();
        self.tops_valid = 0;
        self.index.clear();
    }

    /// Replaces the whole content with `endpoints` in one pass (see
    /// [`EndpointSet::from_vec`] for order): each chunk is filled as a
    /// plain chunk and shared once full, the index is pre-sized and takes
    /// one probe per endpoint.
    ///
    /// An endpoint replacing one of the same id and incarnation inherits
    /// its balancing statistics (latency, failures, ejection): a weight or
    /// metadata change keeps them, a restart starts afresh.
    pub fn rebuild(&mut self, endpoints: Vec<Endpoint>) {
        let old = std::mem::take(self);
        let n = endpoints.len();
        self.index.reserve(n, |_| None);
        let mut done: Vec<Arc<Chunk>> = Vec::with_capacity(n.div_ceil(CHUNK));
        let mut cur = Chunk::with_capacity(CHUNK.min(n));
        let mut repeated = Vec::new();
        for (i, ep) in endpoints.into_iter().enumerate() {
            if !old.is_empty() {
                // One probe of the old index (no id hashed): an endpoint of
                // the same id and incarnation keeps its statistics.
                if let Some(prev) = old.get_like(&ep.instance) {
                    ep.inherit_stats(prev);
                }
            }
            let slot = done.len() * CHUNK + cur.items.len();
            let total = cur.total().saturating_add(u64::from(ep.weight()));
            cur.items.push(ep);
            cur.cum.push(total);
            let Some(inst) = cur.items.last().map(|e| &*e.instance) else {
                continue;
            };
            // Slots are u32: a set holds fewer than 2^32 endpoints.
            let first = self
                .index
                .insert_or_find(inst, slot as u32, at_in(&done, &cur));
            if first.is_some() {
                // A repeated id: it replaces its first slot, below.
                cur.cum.pop();
                repeated.extend(cur.items.pop());
            } else if cur.items.len() == CHUNK {
                let rest = n.saturating_sub(i + 1);
                let next = Chunk::with_capacity(CHUNK.min(rest));
                done.push(Arc::new(std::mem::replace(&mut cur, next)));
            }
        }
        drop(old);
        if !cur.items.is_empty() {
            done.push(Arc::new(cur));
        }
        self.chunks = done;
        self.tops_valid = 0;
        for ep in repeated {
            self.upsert(ep);
        }
    }

    /// The current content as an immutable set, sharing every chunk with
    /// the editor: `O(n / CHUNK)`. The next edit of a chunk copies it.
    pub fn snapshot(&mut self) -> EndpointSet {
        self.fix_tops();
        EndpointSet {
            layout: Arc::new(Layout {
                chunks: self.chunks.clone(),
                tops: self.tops.clone(),
                len: self.index.len(),
            }),
        }
    }

    /// The current content as an immutable set, without copying anything.
    pub fn finish(mut self) -> EndpointSet {
        self.fix_tops();
        let len = self.index.len();
        EndpointSet {
            layout: Arc::new(Layout {
                chunks: self.chunks,
                tops: self.tops,
                len,
            }),
        }
    }

    /// Writes `endpoint` into `slot`, returning what was there.
    fn put(&mut self, slot: usize, endpoint: Endpoint) -> Endpoint {
        let (c, i) = (slot / CHUNK, slot % CHUNK);
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        let old = std::mem::replace(&mut chunk.items[i], endpoint);
        chunk.items[i].inherit_stats(&old);
        chunk.reweigh(i);
        self.tops_valid = self.tops_valid.min(c);
        old
    }

    fn fix_tops(&mut self) {
        let n = self.chunks.len();
        let from = self.tops_valid.min(n);
        self.tops.truncate(from);
        let mut total = from
            .checked_sub(1)
            .and_then(|i| self.tops.get(i).copied())
            .unwrap_or(0);
        for chunk in &self.chunks[from..] {
            total = total.saturating_add(chunk.total());
            self.tops.push(total);
        }
        self.tops_valid = n;
    }
}

impl fmt::Debug for EndpointSetEditor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointSetEditor")
            .field("len", &self.len())
            .finish()
    }
}
