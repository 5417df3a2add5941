//! [`EndpointSet`]: an immutable, structurally shared, weighted set of
//! [`Endpoint`]s, one per instance id, and [`EndpointSetEditor`], the
//! writer-side handle that edits it by copy-on-write.
//!
//! # Layout
//! Three levels: a top array of `Arc<Page>`, each page holding up to
//! [`PAGE`] `Arc<Chunk>`s, each chunk up to [`CHUNK`] endpoints, every level
//! with its running weight totals. Cloning a set is one reference-count
//! increment; publishing the result of an edit copies the top arrays
//! (`n / (PAGE * CHUNK)` entries), the pages the edit touched (`PAGE`
//! entries each) and the chunks it touched (`CHUNK` entries each): editing
//! `k` endpoints of an `n`-endpoint set costs
//! `O(k * (CHUNK + PAGE) + n / (PAGE * CHUNK))`, never `O(n)`, and every
//! block it allocates stays small (1 KiB). A pick is three binary searches.
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

use crate::balance::carry;
use crate::instance::Instance;
use crate::slot_index::{hash_id, SlotIndex};

use crate::url::Endpoint;

mod published;
#[cfg(test)]
mod tests;

pub use published::{wyrand, Closed, DirectorySnapshot, Published, THREAD_CACHE};

/// Endpoints per chunk: a chunk copy (on the first edit of a chunk after a
/// publish) clones this many handles; a pick searches this many totals.
pub const CHUNK: usize = 128;

/// Chunks per page: a page copy (on the first edit of a page after a
/// publish) clones this many chunk handles.
#[cfg(not(test))]
pub const PAGE: usize = 64;
/// Chunks per page (small in unit tests, so that their edits cross pages).
#[cfg(test)]
pub const PAGE: usize = 4;

/// Endpoints per full page.
const PAGE_LEN: usize = CHUNK * PAGE;

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

    fn push(&mut self, ep: Endpoint) {
        let total = self.total().saturating_add(u64::from(ep.weight()));
        self.items.push(ep);
        self.cum.push(total);
    }

    /// The weight of item `i`, from the running totals (no record read).
    fn weight_at(&self, i: usize) -> u64 {
        let before = i.checked_sub(1).and_then(|p| self.cum.get(p)).copied();
        self.cum
            .get(i)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.unwrap_or(0))
    }

    /// Item `i`'s weight changed from `old` to `new`: the running totals
    /// from `i` on move by the difference (exact: a chunk's total stays far
    /// below `u64::MAX`), without reading any record.
    fn shift(&mut self, i: usize, old: u64, new: u64) {
        if old != new {
            for c in self.cum.iter_mut().skip(i) {
                *c = c.wrapping_sub(old).wrapping_add(new);
            }
        }
    }
}

/// Up to [`PAGE`] chunks and their running weight totals.
#[derive(Clone, Default)]
struct Page {
    chunks: Vec<Arc<Chunk>>,
    /// `tops[c]`: weight of `chunks[..=c]`, saturating.
    tops: Vec<u64>,
}

impl Page {
    fn with_capacity(n: usize) -> Self {
        Self {
            chunks: Vec::with_capacity(n),
            tops: Vec::with_capacity(n),
        }
    }

    fn total(&self) -> u64 {
        self.tops.last().copied().unwrap_or(0)
    }

    /// Chunk `c`'s total changed from `old` to `new`: the running totals
    /// from `c` on move by the difference, unless a total saturated (then
    /// they are recomputed from the chunks).
    fn shift(&mut self, c: usize, old: u64, new: u64) {
        if old == new {
            return;
        }
        if self.total() == u64::MAX {
            return self.reweigh(c);
        }
        for t in self.tops.iter_mut().skip(c) {
            match t.checked_sub(old).and_then(|v| v.checked_add(new)) {
                Some(v) => *t = v,
                None => return self.reweigh(c),
            }
        }
    }

    /// Recomputes the running totals from chunk `from` on.
    fn reweigh(&mut self, from: usize) {
        self.tops.truncate(from);
        let mut total = from
            .checked_sub(1)
            .and_then(|i| self.tops.get(i).copied())
            .unwrap_or(0);
        for chunk in self.chunks.iter().skip(from) {
            total = total.saturating_add(chunk.total());
            self.tops.push(total);
        }
    }
}

#[derive(Default)]
struct Layout {
    pages: Vec<Arc<Page>>,
    /// `tops[p]`: weight of `pages[..=p]`, saturating.
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

/// Page, chunk and item of slot `k`.
#[inline]
fn split(k: usize) -> (usize, usize, usize) {
    (k / PAGE_LEN, (k % PAGE_LEN) / CHUNK, k % CHUNK)
}

/// The chunk holding slot `k` of `pages`, and the item's index in it.
#[inline]
fn chunk_of(pages: &[Arc<Page>], k: usize) -> Option<(&Chunk, usize)> {
    let (p, c, i) = split(k);
    Some((pages.get(p)?.chunks.get(c)?, i))
}

/// The index of the first running total above `point`, and the total
/// before it (`tops` ascending).
#[inline]
fn locate(tops: &[u64], point: u64) -> (usize, u64) {
    let at = tops.partition_point(|&t| t <= point);
    let before = at.checked_sub(1).and_then(|p| tops.get(p)).copied();
    (at, before.unwrap_or(0))
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
    #[inline]
    pub fn get(&self, index: usize) -> Option<&Endpoint> {
        let (chunk, i) = chunk_of(&self.layout.pages, index)?;
        chunk.items.get(i)
    }

    /// The endpoint in slot `index` and its weight, read from the running
    /// totals (no load of the endpoint's record).
    #[inline]
    pub fn get_weighted(&self, index: usize) -> Option<(&Endpoint, u32)> {
        let (chunk, i) = chunk_of(&self.layout.pages, index)?;
        let upto = *chunk.cum.get(i)?;
        let before = i.checked_sub(1).map_or(0, |p| chunk.cum[p]);
        let weight = u32::try_from(upto.saturating_sub(before)).unwrap_or(u32::MAX);
        Some((chunk.items.get(i)?, weight))
    }

    /// Every endpoint, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = &Endpoint> + '_ {
        self.layout
            .pages
            .iter()
            .flat_map(|p| p.chunks.iter())
            .flat_map(|c| c.items.iter())
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
        let (p, before) = locate(&self.layout.tops, point);
        let page = self.layout.pages.get(p)?;
        let local = point.checked_sub(before)?;
        let (c, before) = locate(&page.tops, local);
        let chunk = page.chunks.get(c)?;
        let local = local.checked_sub(before)?;
        let i = chunk.cum.partition_point(|&w| w <= local);
        chunk.items.get(i)
    }

    /// An editor starting from this set. It indexes the set by instance id
    /// (`O(n)` once); keep the editor alive to make later edits cost only
    /// what they touch.
    pub fn edit(&self) -> EndpointSetEditor {
        let pages = self.layout.pages.clone();
        let mut index = SlotIndex::default();
        index.reserve(self.len(), at(&pages));
        for (slot, ep) in self.iter().enumerate() {
            index.insert_unique(ep.instance.id_hash(), slot as u32, at(&pages));
        }
        EndpointSetEditor {
            pages,
            tops: self.layout.tops.clone(),
            tops_valid: self.layout.pages.len(),
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
/// the pages, shared with the sets already published and copied on the
/// first write after each publish ([`EndpointSetEditor::snapshot`]).
#[derive(Clone, Default)]
pub struct EndpointSetEditor {
    pages: Vec<Arc<Page>>,
    /// Running totals over pages; `tops[..tops_valid]` are up to date.
    tops: Vec<u64>,
    tops_valid: usize,
    /// Instance id -> slot (the instance read back from the slot).
    index: SlotIndex,
}

/// The instance of the endpoint in slot `k` of `pages`.
#[inline]
fn at<'a>(pages: &'a [Arc<Page>]) -> impl Fn(u32) -> Option<&'a Instance> + 'a {
    move |k| {
        let (chunk, i) = chunk_of(pages, k as usize)?;
        Some(&chunk.items.get(i)?.instance)
    }
}

/// A set under construction, in order: full pages, then the page and the
/// chunk being filled.
struct Builder {
    done: Vec<Arc<Page>>,
    page: Page,
    chunk: Chunk,
    /// Endpoints still to come (for the capacities of the next blocks).
    rest: usize,
}

impl Builder {
    fn new(n: usize) -> Self {
        Self {
            done: Vec::with_capacity(n.div_ceil(PAGE_LEN)),
            page: Page::with_capacity(PAGE.min(n.div_ceil(CHUNK))),
            chunk: Chunk::with_capacity(CHUNK.min(n)),
            rest: n,
        }
    }

    /// The slot the next endpoint takes.
    fn next_slot(&self) -> usize {
        self.done.len() * PAGE_LEN + self.page.chunks.len() * CHUNK + self.chunk.items.len()
    }

    /// The instance of slot `k` built so far.
    fn at(&self, k: u32) -> Option<&Instance> {
        let (p, c, i) = split(k as usize);
        let chunk = match self.done.get(p) {
            Some(page) => page.chunks.get(c)?.as_ref(),
            None if p == self.done.len() => match self.page.chunks.get(c) {
                Some(chunk) => chunk.as_ref(),
                None if c == self.page.chunks.len() => &self.chunk,
                None => return None,
            },
            None => return None,
        };
        Some(&chunk.items.get(i)?.instance)
    }

    /// Seals the chunk being filled once full, and the page once full.
    fn seal_full(&mut self) {
        self.rest = self.rest.saturating_sub(1);
        if self.chunk.items.len() < CHUNK {
            return;
        }
        let next = Chunk::with_capacity(CHUNK.min(self.rest));
        let full = std::mem::replace(&mut self.chunk, next);
        let total = self.page.total().saturating_add(full.total());
        self.page.chunks.push(Arc::new(full));
        self.page.tops.push(total);
        if self.page.chunks.len() == PAGE {
            let next = Page::with_capacity(PAGE.min(self.rest.div_ceil(CHUNK)));
            self.done
                .push(Arc::new(std::mem::replace(&mut self.page, next)));
        }
    }

    fn finish(mut self) -> Vec<Arc<Page>> {
        if !self.chunk.items.is_empty() {
            let total = self.page.total().saturating_add(self.chunk.total());
            self.page.chunks.push(Arc::new(self.chunk));
            self.page.tops.push(total);
        }
        if !self.page.chunks.is_empty() {
            self.done.push(Arc::new(self.page));
        }
        self.done
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
        let slot = self.index.find_id(id, at(&self.pages))?;
        self.at_slot(slot)
    }

    /// The endpoint of the instance with `inst`'s id (no id hashing).
    pub fn get_like(&self, inst: &Instance) -> Option<&Endpoint> {
        let slot = self.index.find_instance(inst, at(&self.pages))?;
        self.at_slot(slot)
    }

    fn at_slot(&self, slot: u32) -> Option<&Endpoint> {
        let (chunk, i) = chunk_of(&self.pages, slot as usize)?;
        chunk.items.get(i)
    }

    /// Inserts `endpoint` (appended), or replaces the endpoint of the same
    /// instance id in place (taking over its balancing statistics when of
    /// the same incarnation, see [`EndpointSetEditor::rebuild`]); returns
    /// the replaced one. `O(CHUNK + PAGE)`.
    pub fn upsert(&mut self, endpoint: Endpoint) -> Option<Endpoint> {
        if let Some(slot) = self
            .index
            .find_instance(&endpoint.instance, at(&self.pages))
        {
            return Some(self.put(slot as usize, endpoint));
        }
        let slot = self.index.len();
        let (p, c, _) = split(slot);
        if p == self.pages.len() {
            self.pages.push(Arc::new(Page::with_capacity(PAGE)));
        }
        let page = Arc::make_mut(&mut self.pages[p]);
        if c == page.chunks.len() {
            page.chunks.push(Arc::new(Chunk::with_capacity(CHUNK)));
        }
        let hash = endpoint.instance.id_hash();
        Arc::make_mut(&mut page.chunks[c]).push(endpoint);
        page.reweigh(c);
        self.tops_valid = self.tops_valid.min(p);
        // Slots are u32: a set holds fewer than 2^32 endpoints.
        self.index.insert_unique(hash, slot as u32, at(&self.pages));
        None
    }

    /// Upserts every endpoint of `endpoints`, in order.
    pub fn extend(&mut self, endpoints: impl IntoIterator<Item = Endpoint>) {
        let endpoints = endpoints.into_iter();
        self.index.reserve(endpoints.size_hint().0, at(&self.pages));
        for ep in endpoints {
            self.upsert(ep);
        }
    }

    /// Removes the endpoint of instance `id` (the last endpoint moves into
    /// its slot); returns it. `O(CHUNK + PAGE)`.
    pub fn remove(&mut self, id: &str) -> Option<Endpoint> {
        self.remove_hashed(hash_id(id), id)
    }

    /// Removes the endpoint of the instance with `inst`'s id (no id
    /// hashing); returns it. `O(CHUNK + PAGE)`.
    pub fn remove_like(&mut self, inst: &Instance) -> Option<Endpoint> {
        self.remove_hashed(inst.id_hash(), inst.id())
    }

    fn remove_hashed(&mut self, hash: u64, id: &str) -> Option<Endpoint> {
        let slot = self.index.remove(hash, id, at(&self.pages))? as usize;
        let last_p = self.pages.len().checked_sub(1)?;
        let page = Arc::make_mut(&mut self.pages[last_p]);
        let last_c = page.chunks.len().checked_sub(1)?;
        let chunk = Arc::make_mut(&mut page.chunks[last_c]);
        let moved = chunk.items.pop()?;
        chunk.cum.pop();
        if chunk.items.is_empty() {
            page.chunks.pop();
        }
        page.reweigh(last_c);
        if page.chunks.is_empty() {
            self.pages.pop();
        }
        self.tops_valid = self.tops_valid.min(last_p);
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
        self.pages.clear();
        self.tops.clear();
        self.tops_valid = 0;
        self.index.clear();
    }

    /// Replaces the whole content with `endpoints` in one pass (see
    /// [`EndpointSet::from_vec`] for order): each chunk and page is filled
    /// as a plain block and shared once full, the index is pre-sized and
    /// takes one probe per endpoint.
    ///
    /// An endpoint replacing one of the same id and incarnation takes over
    /// its balancing statistics (latency, failures, ejection, calls in
    /// flight; see [`crate::balance`]'s carry-over): a weight or metadata
    /// change keeps them, a restart starts afresh. The replaced endpoints
    /// are read once, in order, after the build, and only those whose
    /// statistics are in use are looked up in the new index (no old index
    /// is probed for a list whose endpoints nobody leased).
    pub fn rebuild(&mut self, endpoints: Vec<Endpoint>) {
        let old = std::mem::take(self);
        let n = endpoints.len();
        self.index.reserve(n, |_| None);
        let mut b = Builder::new(n);
        let mut repeated = Vec::new();
        for ep in endpoints {
            let slot = b.next_slot();
            b.chunk.push(ep);
            let Some(inst) = b.chunk.items.last().map(|e| &*e.instance) else {
                continue;
            };
            // Slots are u32: a set holds fewer than 2^32 endpoints.
            let first = self.index.insert_or_find(inst, slot as u32, |k| b.at(k));
            if first.is_some() {
                // A repeated id: it replaces its first slot, below.
                b.chunk.cum.pop();
                repeated.extend(b.chunk.items.pop());
            } else {
                b.seal_full();
            }
        }
        self.pages = b.finish();
        self.tops_valid = 0;
        for ep in repeated {
            self.upsert(ep);
        }
        let replaced = old.pages.iter().flat_map(|p| p.chunks.iter());
        for prev in replaced.flat_map(|c| c.items.iter()) {
            if prev.stats().carries() {
                if let Some(next) = self.get_like(&prev.instance) {
                    carry(prev, next);
                }
            }
        }
    }

    /// The current content as an immutable set, sharing every page with the
    /// editor: `O(n / (PAGE * CHUNK))`. The next edit of a page or chunk
    /// copies it.
    pub fn snapshot(&mut self) -> EndpointSet {
        self.fix_tops();
        EndpointSet {
            layout: Arc::new(Layout {
                pages: self.pages.clone(),
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
                pages: self.pages,
                tops: self.tops,
                len,
            }),
        }
    }

    /// Writes `endpoint` into `slot`, returning what was there. The running
    /// totals move by the weight's difference (read from the totals, not
    /// from the records: an edit touches no other endpoint).
    fn put(&mut self, slot: usize, endpoint: Endpoint) -> Endpoint {
        let (p, c, i) = split(slot);
        let new = u64::from(endpoint.weight());
        let page = Arc::make_mut(&mut self.pages[p]);
        let chunk = Arc::make_mut(&mut page.chunks[c]);
        let (old_weight, old_total) = (chunk.weight_at(i), chunk.total());
        let old = std::mem::replace(&mut chunk.items[i], endpoint);
        carry(&old, &chunk.items[i]);
        chunk.shift(i, old_weight, new);
        let new_total = chunk.total();
        page.shift(c, old_total, new_total);
        if old_weight != new {
            self.tops_valid = self.tops_valid.min(p);
        }
        old
    }

    fn fix_tops(&mut self) {
        let n = self.pages.len();
        let from = self.tops_valid.min(n);
        self.tops.truncate(from);
        let mut total = from
            .checked_sub(1)
            .and_then(|i| self.tops.get(i).copied())
            .unwrap_or(0);
        for page in &self.pages[from..] {
            total = total.saturating_add(page.total());
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
