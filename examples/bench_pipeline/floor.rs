//! The floor: a plain function producing exactly what the directory holds
//! after a Reset, and the element-by-element check that it does.
//!
//! Output: the serving URLs in the Reset's order, one `Arc<ServiceUrl>`
//! each, sharing one `Arc<ServiceEndpoint>` per revision, laid out like
//! the directory's `EndpointSet`: chunks of `CHUNK` URLs (one `Arc` per
//! chunk, each with its running weights), pages of `PAGE` chunks (one `Arc`
//! per page, with the running totals over its chunks) and the running
//! totals over pages. It builds the readers' structure and nothing else:
//! no index by id (the directory's editor keeps one to apply patches; that
//! is engine bookkeeping, charged to the engine).

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use steadfast::{Endpoint, MetadataInfo, ServiceUrl};
use steadfast_core::{EndpointSet, Instance, ServiceEndpoint, CHUNK, PAGE};

/// Up to `CHUNK` URLs and their running weights (as the engine's chunk).
pub struct Chunk {
    items: Vec<Endpoint>,
    /// `cum[i]`: weight of `items[..=i]`.
    cum: Vec<u64>,
}

/// Up to `PAGE` chunks and their running weights (as the engine's page).
pub struct Page {
    chunks: Vec<Arc<Chunk>>,
    /// `tops[c]`: weight of `chunks[..=c]`.
    tops: Vec<u64>,
}

/// The floor's output: the directory's content, built by hand.
#[derive(Default)]
pub struct FloorSet {
    pages: Vec<Arc<Page>>,
    /// `tops[p]`: weight of `pages[..=p]`.
    tops: Vec<u64>,
}

impl FloorSet {
    /// Number of URLs.
    pub fn len(&self) -> usize {
        self.pages
            .iter()
            .flat_map(|p| p.chunks.iter())
            .map(|c| c.items.len())
            .sum()
    }

    /// Every URL with the running weight up to and including it.
    fn running(&self) -> impl Iterator<Item = (&Endpoint, u64)> + '_ {
        self.pages.iter().enumerate().flat_map(move |(p, page)| {
            let before_p = p.checked_sub(1).map_or(0, |q| self.tops[q]);
            page.chunks.iter().enumerate().flat_map(move |(c, chunk)| {
                let before = before_p + c.checked_sub(1).map_or(0, |q| page.tops[q]);
                let items = chunk.items.iter();
                items.zip(chunk.cum.iter().map(move |w| before + w))
            })
        })
    }
}

/// Caches one shared endpoint per revision. Revisions are interned per
/// app (every instance of one revision holds the same `Arc<str>`), so the
/// cache is keyed by that pointer: a miss looks the metadata up by name.
struct Offers<'a> {
    metas: &'a HashMap<String, Arc<MetadataInfo>>,
    key: &'a str,
    by_rev: FxHashMap<*const u8, Option<Arc<ServiceEndpoint>>>,
}

impl<'a> Offers<'a> {
    fn new(metas: &'a HashMap<String, Arc<MetadataInfo>>, key: &'a str) -> Self {
        Self {
            metas,
            key,
            by_rev: FxHashMap::default(),
        }
    }

    /// The URL of `inst` for the key, when it serves it.
    #[inline]
    fn url(&mut self, inst: &Arc<Instance>) -> Option<Endpoint> {
        if !inst.is_serving() {
            return None;
        }
        let rev = inst.revision_arc()?;
        let (metas, key) = (self.metas, self.key);
        let ep = self.by_rev.entry(rev.as_ptr()).or_insert_with(|| {
            let svc = metas.get(rev.as_ref())?.services.get(key)?;
            Some(ServiceEndpoint::of(svc))
        });
        Some(Arc::new(ServiceUrl::new(inst, ep.as_ref()?)))
    }
}

/// The floor: the directory's content for `instances`.
pub fn floor(
    instances: &[Arc<Instance>],
    metas: &HashMap<String, Arc<MetadataInfo>>,
    key: &str,
) -> FloorSet {
    let mut offers = Offers::new(metas, key);
    let per_page = CHUNK * PAGE;
    let mut out = FloorSet {
        pages: Vec::with_capacity(instances.len().div_ceil(per_page)),
        tops: Vec::with_capacity(instances.len().div_ceil(per_page)),
    };
    let new_page = || Page {
        chunks: Vec::with_capacity(PAGE),
        tops: Vec::with_capacity(PAGE),
    };
    let mut page = new_page();
    let mut cur: Option<Chunk> = None;
    let (mut run, mut page_run, mut total) = (0u64, 0u64, 0u64);
    for inst in instances {
        let Some(url) = offers.url(inst) else {
            continue;
        };
        let chunk = cur.get_or_insert_with(|| Chunk {
            items: Vec::with_capacity(CHUNK),
            cum: Vec::with_capacity(CHUNK),
        });
        run = run.saturating_add(u64::from(url.weight()));
        chunk.items.push(url);
        chunk.cum.push(run);
        if chunk.items.len() == CHUNK {
            page_run = page_run.saturating_add(run);
            page.tops.push(page_run);
            page.chunks.extend(cur.take().map(Arc::new));
            run = 0;
            if page.chunks.len() == PAGE {
                total = total.saturating_add(page_run);
                out.tops.push(total);
                out.pages
                    .push(Arc::new(std::mem::replace(&mut page, new_page())));
                page_run = 0;
            }
        }
    }
    if let Some(chunk) = cur {
        page_run = page_run.saturating_add(run);
        page.tops.push(page_run);
        page.chunks.push(Arc::new(chunk));
    }
    if !page.chunks.is_empty() {
        out.tops.push(total.saturating_add(page_run));
        out.pages.push(Arc::new(page));
    }
    out
}

/// Asserts that `engine` holds exactly `floor`, element by element: the
/// same instance record (equal; each side decoded its own), equal endpoint
/// content shared the same way (one `Arc` per revision on each side, in
/// one-to-one correspondence), the same weights and running weights.
/// Returns the number of URLs.
pub fn check(engine: &EndpointSet, floor: &FloorSet) -> usize {
    assert_eq!(engine.len(), floor.len(), "URL count");
    let mut fwd: HashMap<*const ServiceEndpoint, *const ServiceEndpoint> = HashMap::new();
    let mut back: HashMap<*const ServiceEndpoint, *const ServiceEndpoint> = HashMap::new();
    let mut before = 0u64;
    for (i, (f, cum)) in floor.running().enumerate() {
        let e = engine.get(i).expect("engine slot");
        assert_eq!(e.instance_id(), f.instance_id(), "id at {i}");
        assert_eq!(*e.instance, *f.instance, "instance at {i}");
        assert_eq!(*e.service, *f.service, "endpoint at {i}");
        let (ep, fp) = (Arc::as_ptr(&e.service), Arc::as_ptr(&f.service));
        assert_eq!(*fwd.entry(fp).or_insert(ep), ep, "sharing at {i}");
        assert_eq!(*back.entry(ep).or_insert(fp), fp, "sharing at {i}");
        assert_eq!(e.weight(), f.weight(), "weight at {i}");
        // The engine's running weights give slot i exactly [before, cum).
        assert_eq!(cum, before + u64::from(f.weight()), "floor running weight");
        for point in [before, cum - 1] {
            let hit = engine.pick_point(point).expect("engine running weight");
            assert!(Arc::ptr_eq(hit, e), "engine running weight at {i}");
        }
        before = cum;
    }
    assert_eq!(engine.total_weight(), before, "total weight");
    assert!(
        engine.pick_point(before).is_none(),
        "nothing past the total"
    );
    floor.len()
}
