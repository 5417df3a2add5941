//! Property test of the resolver: random inputs through the test [`Harness`],
//! whose checks (one fetch or timer per revision, none while inactive, only
//! for revisions in the latest snapshot, every unresolved revision busy while
//! active) run after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::harness::{inst, meta, Harness, KEY};
use crate::error::FetchError;
use crate::model::EMPTY_REVISION;
use crate::resolver::Token;

const KEYS: [&str; 2] = [KEY, "Other:tri"];

#[derive(Clone, Debug)]
enum Op {
    /// (host index, revision index); revision index 4 is the empty revision.
    Snapshot(Vec<(u8, u8)>),
    Succeed(usize),
    Fail(usize, bool),
    Fire(usize),
    Stale(usize, bool),
    Subscribe(usize),
    Unsubscribe(usize),
    Advance(u64),
    Restart,
    Close,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec((0u8..4, 0u8..5), 0..5).prop_map(Op::Snapshot),
        4 => any::<usize>().prop_map(Op::Succeed),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(i, p)| Op::Fail(i, p)),
        4 => any::<usize>().prop_map(Op::Fire),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, ok)| Op::Stale(i, ok)),
        2 => (0usize..2).prop_map(Op::Subscribe),
        2 => (0usize..2).prop_map(Op::Unsubscribe),
        2 => (0u64..40).prop_map(Op::Advance),
        1 => Just(Op::Restart),
        1 => Just(Op::Close),
    ]
}

fn nth<V>(map: &BTreeMap<Token, V>, i: usize) -> Option<Token> {
    (!map.is_empty()).then(|| *map.keys().nth(i % map.len()).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn invariants_hold_under_random_inputs(
        ops in prop::collection::vec(op(), 1..80),
        seed in any::<u64>(),
    ) {
        let t0 = Instant::now();
        let metas: Vec<_> = (0..4).map(|i| meta(20001 + i)).collect();
        let by_rev: BTreeMap<String, _> =
            metas.iter().map(|m| (m.revision.clone(), m.clone())).collect();
        let mut h = Harness::new(t0, seed);
        let mut subs = [0usize; 2];
        let mut closed = false;
        let mut generation = 0;
        let mut live: BTreeSet<String> = BTreeSet::new();
        // Every (revision, token) ever handed out.
        let mut issued: Vec<(String, Token)> = Vec::new();
        for op in ops {
            match op {
                Op::Snapshot(pairs) => {
                    let hosts: BTreeMap<u8, u8> = pairs.into_iter().collect();
                    let snap: Vec<_> = hosts
                        .iter()
                        .map(|(host, rev)| {
                            let rev = match metas.get(*rev as usize) {
                                Some(m) => m.revision.as_str(),
                                None => EMPTY_REVISION,
                            };
                            inst(&format!("h{host}"), rev)
                        })
                        .collect();
                    if !closed {
                        live = snap.iter().map(|i| i.id.clone()).collect();
                    }
                    generation += 1;
                    let now = h.now;
                    h.snapshot(generation, snap, now);
                }
                Op::Succeed(i) => {
                    if let Some(t) = nth(&h.fetches, i) {
                        let m = by_rev[&h.fetches[&t]].clone();
                        let now = h.now;
                        prop_assert!(h.complete(t, Ok(m), now).is_empty());
                    }
                }
                Op::Fail(i, persistent) => {
                    if let Some(t) = nth(&h.fetches, i) {
                        let err = if persistent {
                            FetchError::Malformed("x".into())
                        } else {
                            FetchError::Unreachable("x".into())
                        };
                        let now = h.now;
                        let a = h.complete(t, Err(err), now);
                        prop_assert_eq!(a.len(), 1);
                    }
                }
                Op::Fire(i) => {
                    if let Some(t) = nth(&h.timers, i) {
                        prop_assert_eq!(h.fire(t).len(), 1);
                    }
                }
                Op::Stale(i, ok) => {
                    let stale: Vec<&(String, Token)> = issued
                        .iter()
                        .filter(|(_, t)| !h.fetches.contains_key(t) && !h.timers.contains_key(t))
                        .collect();
                    if !stale.is_empty() {
                        let (rev, t) = stale[i % stale.len()].clone();
                        let result = match by_rev.get(&rev) {
                            Some(m) if ok => Ok(m.clone()),
                            _ => Err(FetchError::Timeout),
                        };
                        let now = h.now;
                        prop_assert!(h.m.on_fetch_result(&rev, t, result, now).is_empty());
                        prop_assert!(h.m.on_retry_due(&rev, t).is_empty());
                    }
                }
                Op::Subscribe(k) => {
                    if !closed {
                        subs[k] += 1;
                    }
                    h.subscribe(KEYS[k]);
                }
                Op::Unsubscribe(k) => {
                    subs[k] = subs[k].saturating_sub(1);
                    h.unsubscribe(KEYS[k]);
                }
                Op::Advance(s) => h.now += Duration::from_secs(s),
                Op::Restart => {
                    let now = h.now;
                    h.restart(now);
                }
                Op::Close => {
                    closed = true;
                    subs = [0, 0];
                    h.close();
                }
            }
            h.check();
            prop_assert_eq!(h.m.is_closed(), closed);
            prop_assert_eq!(h.m.is_active(), !closed && subs.iter().any(|n| *n > 0));
            if !h.m.is_active() {
                prop_assert!(h.fetches.is_empty() && h.timers.is_empty());
            }
            issued.extend(h.fetches.iter().map(|(t, r)| (r.clone(), *t)));
            issued.extend(h.timers.iter().map(|(t, (r, _))| (r.clone(), *t)));
            for u in h.m.take_updates() {
                for url in u.urls().iter() {
                    prop_assert!(live.contains(url.instance_id()), "{} left", url.instance_id());
                }
            }
        }
    }
}
