//! The endpoint set against a plain model (a `Vec` in slot order plus a
//! map id -> slot, picked by a linear scan of running totals), and the
//! published read side.

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::published::{thread_cache_len, wyrand};
use super::*;
use crate::directory::{DirectoryStatus, EmptyReason};
use crate::model::{ServiceInfo, ServiceInstance};
use crate::url::ServiceUrl;

fn svc() -> ServiceInfo {
    ServiceInfo::test_service()
}

fn ep(id: u32, weight: u32) -> Endpoint {
    let mut inst = ServiceInstance::new("app", format!("h{id}"), 1);
    inst.weight = weight;
    Arc::new(ServiceUrl::build(&inst, &svc()))
}

fn id(n: u32) -> String {
    format!("h{n}:1")
}

#[derive(Clone, Default)]
struct Model {
    items: Vec<Endpoint>,
    slots: HashMap<String, usize>,
}

impl Model {
    fn upsert(&mut self, e: Endpoint) {
        match self.slots.get(e.instance_id()) {
            Some(&s) => self.items[s] = e,
            None => {
                self.slots
                    .insert(e.instance_id().to_string(), self.items.len());
                self.items.push(e);
            }
        }
    }

    fn remove(&mut self, id: &str) {
        let Some(s) = self.slots.remove(id) else {
            return;
        };
        let last = self.items.pop().expect("indexed");
        if s < self.items.len() {
            self.slots.insert(last.instance_id().to_string(), s);
            self.items[s] = last;
        }
    }

    fn total(&self) -> u64 {
        self.items
            .iter()
            .fold(0u64, |t, e| t.saturating_add(u64::from(e.weight())))
    }

    fn pick(&self, r: u64) -> Option<&Endpoint> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let point = scale(r, total);
        let mut cum = 0u64;
        self.items.iter().find(|e| {
            cum += u64::from(e.weight());
            cum > point
        })
    }
}

fn assert_same(set: &EndpointSet, model: &Model, rs: &[u64]) {
    assert_eq!(set.len(), model.items.len());
    assert_eq!(set.total_weight(), model.total());
    let got = set.to_vec();
    assert!(got.len() == model.items.len());
    for (i, (a, b)) in got.iter().zip(&model.items).enumerate() {
        assert!(Arc::ptr_eq(a, b), "slot {i}: {a} vs {b}");
        assert!(Arc::ptr_eq(set.get(i).expect("in range"), b));
        let (c, w) = set.get_weighted(i).expect("in range");
        assert!(Arc::ptr_eq(c, b) && w == b.weight(), "slot {i}: weight {w}");
    }
    assert!(set.get(model.items.len()).is_none());
    assert!(set.get_weighted(model.items.len()).is_none());
    for &r in rs.iter().chain(&[0, 1, u64::MAX / 2, u64::MAX]) {
        let (a, b) = (set.pick(r), model.pick(r));
        assert_eq!(a.map(Arc::as_ptr), b.map(Arc::as_ptr), "pick({r})");
        if let Some(a) = a {
            assert!(a.weight() > 0, "weight 0 is never picked");
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Upsert(u32, u32),
    Remove(u32),
    Bulk(u32, u32, u32),
    RemoveRange(u32, u32),
    /// A rebuild from ids `s..s + n`, then `s..s + n / 3` again (repeated
    /// ids replace their first slot) with weight `w`.
    Rebuild(u32, u32, u32),
    Clear,
    Check,
}

fn weight() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0), Just(1), 1u32..10, Just(1000), Just(u32::MAX)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u32..1200, weight()).prop_map(|(i, w)| Op::Upsert(i, w)),
        6 => (0u32..1200).prop_map(Op::Remove),
        2 => (0u32..1200, 0u32..600, weight()).prop_map(|(s, n, w)| Op::Bulk(s, n, w)),
        2 => (0u32..1200, 0u32..600).prop_map(|(s, n)| Op::RemoveRange(s, n)),
        2 => (0u32..1200, 0u32..700, weight()).prop_map(|(s, n, w)| Op::Rebuild(s, n, w)),
        1 => Just(Op::Clear),
        3 => Just(Op::Check),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_the_plain_model(
        ops in proptest::collection::vec(op(), 1..60),
        rs in proptest::collection::vec(any::<u64>(), 16),
    ) {
        let mut editor = EndpointSetEditor::new();
        let mut model = Model::default();
        // Every snapshot taken, with the model at that moment: later edits
        // must never change a published set.
        let mut published: Vec<(EndpointSet, Model)> = Vec::new();
        for op in ops {
            match op {
                Op::Upsert(i, w) => {
                    let e = ep(i, w);
                    editor.upsert(e.clone());
                    model.upsert(e);
                }
                Op::Remove(i) => {
                    let gone = editor.remove(&id(i));
                    prop_assert_eq!(gone.is_some(), model.slots.contains_key(&id(i)));
                    model.remove(&id(i));
                }
                Op::Bulk(s, n, w) => {
                    let eps: Vec<Endpoint> = (s..s + n).map(|i| ep(i, w)).collect();
                    editor.extend(eps.clone());
                    eps.into_iter().for_each(|e| model.upsert(e));
                }
                Op::RemoveRange(s, n) => {
                    for i in s..s + n {
                        editor.remove(&id(i));
                        model.remove(&id(i));
                    }
                }
                Op::Rebuild(s, n, w) => {
                    let eps: Vec<Endpoint> = (s..s + n)
                        .map(|i| ep(i, 1))
                        .chain((s..s + n / 3).map(|i| ep(i, w)))
                        .collect();
                    editor.rebuild(eps.clone());
                    model = Model::default();
                    eps.into_iter().for_each(|e| model.upsert(e));
                }
                Op::Clear => {
                    editor.clear();
                    model = Model::default();
                }
                Op::Check => {
                    let set = editor.snapshot();
                    assert_same(&set, &model, &rs);
                    published.push((set, model.clone()));
                }
            }
            prop_assert_eq!(editor.len(), model.items.len());
        }
        for (k, e) in &model.slots {
            prop_assert!(Arc::ptr_eq(editor.get(k).expect("held"), &model.items[*e]));
        }
        let last = editor.clone().finish();
        assert_same(&last, &model, &rs);
        // An editor rebuilt from the set indexes the same content.
        let mut again = last.edit();
        assert_same(&again.snapshot(), &model, &rs);
        for (set, m) in &published {
            assert_same(set, m, &rs);
        }
        let rebuilt = EndpointSet::from_vec(model.items.clone());
        assert_same(&rebuilt, &model, &rs);
    }
}

#[test]
fn empty_and_zero_weight_sets_pick_nothing() {
    let empty = EndpointSet::new();
    assert!(empty.is_empty() && empty.pick(0).is_none() && empty.pick(u64::MAX).is_none());
    assert_eq!((empty.total_weight(), empty.iter().count()), (0, 0));
    assert!(empty.pick_point(0).is_none());
    let zeros = EndpointSet::from_vec((0..600).map(|i| ep(i, 0)).collect());
    assert_eq!((zeros.len(), zeros.total_weight()), (600, 0));
    for r in [0, 1, 12345, u64::MAX] {
        assert!(zeros.pick(r).is_none());
    }
    let snap = DirectorySnapshot::new(
        1,
        DirectoryStatus::Empty(EmptyReason::Pending(Default::default())),
        vec![zeros],
    );
    assert!(snap.pick(7).is_none());
}

#[test]
fn huge_weights_sum_exactly_and_pick_both_ends() {
    let n = 20_000u32;
    let set = EndpointSet::from_vec((0..n).map(|i| ep(i, u32::MAX)).collect());
    assert_eq!(set.total_weight(), u64::from(n) * u64::from(u32::MAX));
    assert_eq!(set.pick(0).map(|e| e.host()), Some("h0"));
    assert_eq!(set.pick(u64::MAX).map(|e| e.host()), Some("h19999"));
    let last = set.total_weight() - 1;
    assert_eq!(set.pick_point(last).map(|e| e.host()), Some("h19999"));
    assert!(set.pick_point(set.total_weight()).is_none());
    // 2^32 such endpoints would saturate; the scale stays in range anyway.
    assert_eq!(scale(u64::MAX, u64::MAX), u64::MAX - 1);
}

#[test]
fn from_vec_keeps_order_and_a_repeated_id_replaces_its_first_slot() {
    let (a, b, a2) = (ep(1, 1), ep(2, 1), ep(1, 5));
    let set = EndpointSet::from_vec(vec![a, b.clone(), a2.clone()]);
    let got = set.to_vec();
    assert!(got.len() == 2 && Arc::ptr_eq(&got[0], &a2) && Arc::ptr_eq(&got[1], &b));
    assert_eq!(set.total_weight(), 6);
}

#[test]
fn an_edit_copies_only_the_pages_and_chunks_it_touches() {
    let n = (2 * PAGE * CHUNK + CHUNK / 2) as u32;
    let mut editor = EndpointSetEditor::new();
    editor.extend((0..n).map(|i| ep(i, 1)));
    let before = editor.snapshot();
    // (pages, chunks) of `a` not shared with `b`.
    let differing = |a: &EndpointSet, b: &EndpointSet| {
        let (a, b) = (&a.layout.pages, &b.layout.pages);
        let pages = a.len().max(b.len())
            - a.iter()
                .zip(b.iter())
                .filter(|(x, y)| Arc::ptr_eq(x, y))
                .count();
        let chunks = |p: &[Arc<Page>]| -> Vec<Arc<Chunk>> {
            p.iter().flat_map(|p| p.chunks.iter().cloned()).collect()
        };
        let (ca, cb) = (chunks(a), chunks(b));
        let common = ca.iter().zip(cb.iter()).filter(|(x, y)| Arc::ptr_eq(x, y));
        (pages, ca.len().max(cb.len()) - common.count())
    };
    assert_eq!(before.layout.pages.len(), 3);
    editor.upsert(ep(5, 3));
    let after = editor.snapshot();
    assert_eq!(
        differing(&before, &after),
        (1, 1),
        "one page, one chunk copied"
    );
    assert_eq!(after.total_weight(), u64::from(n) + 2);
    editor.remove(&id(7));
    let removed = editor.snapshot();
    assert_eq!(
        differing(&after, &removed),
        (2, 2),
        "the slot's page and chunk, and the last ones"
    );
    assert_eq!(
        removed.get(7).map(|e| e.host()),
        Some(&*format!("h{}", n - 1))
    );
    assert_eq!(removed.len(), n as usize - 1);
    assert!(before.clone().ptr_eq(&before));
}

#[test]
fn published_selects_lock_free_and_stays_closed() {
    let apps = vec![
        EndpointSet::from_vec(vec![ep(1, 1)]),
        EndpointSet::new(),
        EndpointSet::from_vec(vec![ep(2, 3), ep(3, 0)]),
    ];
    let status = DirectoryStatus::Empty(EmptyReason::Pending(Default::default()));
    let snap = DirectorySnapshot::new(3, status.clone(), apps);
    assert_eq!((snap.len(), snap.total_weight(), snap.version()), (3, 4, 3));
    let hosts: Vec<&str> = snap.iter().map(|e| e.host()).collect();
    assert_eq!(hosts, vec!["h1", "h2", "h3"]);
    let published = Published::default();
    assert_eq!(published.select_with(1), Ok(None), "pending: nothing");
    assert!(published.store(Arc::new(snap)).is_some());
    let (mut state, mut counts) = (42u64, HashMap::new());
    for _ in 0..40_000 {
        let (next, r) = wyrand(state);
        state = next;
        let e = published.select_with(r).expect("open").expect("weight 4");
        *counts.entry(e.host().to_string()).or_insert(0u32) += 1;
    }
    let h2 = counts.get("h2").copied().unwrap_or(0);
    assert!(!counts.contains_key("h3"), "weight 0 never picked");
    assert!((29_000..31_000).contains(&h2), "3/4 of 40000: {h2}");
    published.close();
    assert!(published.is_closed() && published.load().is_closed());
    assert_eq!(
        published.select_with(1),
        Err(Closed),
        "cached snapshots notice"
    );
    assert_eq!(published.snapshot().len(), 3, "content kept, marked closed");
    let reopen = Arc::new(DirectorySnapshot::new(9, status, Vec::new()));
    assert!(published.store(reopen).is_none(), "closed for good");
    assert!(published.load().is_closed());
}

#[test]
fn the_thread_cache_is_bounded_follows_stores_and_leaves_frees_to_the_writer() {
    let status = DirectoryStatus::Empty(EmptyReason::Pending(Default::default()));
    let snap = |port: u32| {
        let set = EndpointSet::from_vec(vec![ep(port, 1)]);
        Arc::new(DirectorySnapshot::new(1, status.clone(), vec![set]))
    };
    let host = |p: &Published| {
        p.select_with(7)
            .expect("open")
            .map(|e| e.host().to_string())
    };
    let slots: Vec<Published> = (0..THREAD_CACHE as u32 + 2)
        .map(|i| Published::new(snap(i)))
        .collect();
    for _ in 0..3 {
        for (i, p) in slots.iter().enumerate() {
            assert_eq!(host(p), Some(format!("h{i}")), "each slot its own");
        }
    }
    assert_eq!(thread_cache_len(), THREAD_CACHE, "bounded");

    let p = &slots[0];
    let first = snap(100);
    let gone = Arc::downgrade(&first);
    drop(p.store(first));
    assert_eq!(host(p), Some("h100".into()), "a store invalidates");
    drop(p.store(snap(101)));
    assert!(gone.upgrade().is_some(), "still cached by this thread");
    assert_eq!(host(p), Some("h101".into()));
    assert!(
        gone.upgrade().is_some(),
        "handed to the writer, not freed here"
    );
    drop(p.store(snap(102)));
    assert!(gone.upgrade().is_none(), "freed by the next store");
}
