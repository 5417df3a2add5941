//! The incremental path: a delta of k instances becomes a patch of at most
//! k URLs, a delta on top of a state not held asks for a Reset, and what
//! the patches build equals what a full rebuild gives.

use std::sync::Arc;
use std::time::Instant;

use super::harness::{inst, meta, secs, KEY};
use super::views::{reset_feed, urls, Views};
use crate::backoff::BackoffPolicy;
use crate::instance::{Instance, RevisionInterner};
use crate::model::ServiceInstance;
use crate::resolver::{ResolverAction, ResolverMachine};
use crate::subscription::Feed;
use crate::update::{UpdateState, UrlChange};

fn decoded(i: &ServiceInstance) -> Arc<Instance> {
    Arc::new(Instance::decode(i, &mut RevisionInterner::default()))
}

fn delta(base: u64, upserts: &[ServiceInstance], removals: &[&str]) -> Feed {
    Feed::Delta {
        base,
        upserts: upserts.iter().map(decoded).collect(),
        removals: removals.iter().map(|r| Arc::from(*r)).collect(),
    }
}

/// A resolved machine holding `n` instances of one revision.
fn resolved(n: u16, t0: Instant) -> (ResolverMachine, Views, Arc<crate::model::MetadataInfo>) {
    let m1 = meta(20001);
    let mut m = ResolverMachine::new("provider", BackoffPolicy::default(), 7);
    let _ = m.subscribe_at(KEY, t0);
    let all: Vec<ServiceInstance> = (0..n)
        .map(|k| inst(&format!("h{k}"), &m1.revision))
        .collect();
    let acts = m.on_delivery(1, reset_feed(&all), None, None, t0);
    let token = acts
        .iter()
        .find_map(|a| match a {
            ResolverAction::Fetch { token, .. } => Some(*token),
            _ => None,
        })
        .expect("a fetch");
    assert!(m
        .on_fetch_result(&m1.revision, token, Ok(m1.clone()), t0)
        .is_empty());
    let mut views = Views::default();
    for u in m.take_updates() {
        assert!(matches!(u.change, UrlChange::Full(ref a) if a.len() == usize::from(n)));
        views.absorb(u);
    }
    (m, views, m1)
}

#[test]
fn one_changed_instance_is_one_url_in_a_patch() {
    let t0 = Instant::now();
    let (mut m, mut views, m1) = resolved(1000, t0);
    // A restart: the same id with a new record.
    let mut again = inst("h7", &m1.revision);
    again.weight = 5;
    assert!(m
        .on_delivery(2, delta(1, &[again], &[]), None, None, t0)
        .is_empty());
    let u = m.take_updates().pop().unwrap();
    match &u.change {
        UrlChange::Patch {
            base: 1,
            upserts,
            removals,
        } => assert_eq!(
            (upserts.len(), removals.len(), upserts[0].weight()),
            (1, 0, 5)
        ),
        other => panic!("{other:?}"),
    }
    let u = views.absorb(u);
    assert_eq!((urls(&u).len(), u.state), (1000, UpdateState::Resolved));
    // A removal and an addition.
    let new = inst("new", &m1.revision);
    let _ = m.on_delivery(3, delta(2, &[new], &["h3:8080"]), None, None, t0);
    let u = m.take_updates().pop().unwrap();
    assert_eq!(u.change.len(), 2, "{:?}", u.change);
    let u = views.absorb(u);
    let ids: Vec<&str> = urls(&u).iter().map(|e| e.instance_id()).collect();
    assert!(ids.contains(&"new:8080") && !ids.contains(&"h3:8080"));
    assert_eq!(urls(&u).len(), 1000);
}

#[test]
fn patches_build_what_a_full_rebuild_gives() {
    let t0 = Instant::now();
    let (mut m, mut views, m1) = resolved(50, t0);
    let mut gen = 1;
    for k in 0..200u16 {
        let host = format!("h{}", k % 60);
        let mut i = inst(&host, &m1.revision);
        i.weight = u32::from(k % 3);
        i.healthy = k % 7 != 0;
        let feed = if k % 5 == 0 {
            delta(gen, &[], &[&format!("{host}:8080")])
        } else {
            delta(gen, &[i], &[])
        };
        gen += 1;
        let _ = m.on_delivery(gen, feed, None, None, t0 + secs(1));
        for u in m.take_updates() {
            let u = views.absorb(u);
            let full = m.update_for(KEY);
            let mut a: Vec<_> = urls(&u).to_vec();
            let mut b: Vec<_> = urls(&full).to_vec();
            a.sort();
            b.sort();
            assert_eq!(a, b, "step {k}");
            assert_eq!(u.state, full.state);
        }
    }
}

#[test]
fn a_delta_on_top_of_a_state_not_held_asks_for_a_reset() {
    let t0 = Instant::now();
    let (mut m, _, m1) = resolved(3, t0);
    let i = inst("x", &m1.revision);
    assert_eq!(
        m.on_delivery(5, delta(4, std::slice::from_ref(&i), &[]), None, None, t0),
        vec![ResolverAction::RequestReset]
    );
    assert!(m.take_updates().is_empty(), "nothing applied");
    assert!(
        m.on_delivery(6, delta(5, std::slice::from_ref(&i), &[]), None, None, t0)
            .is_empty(),
        "one Reset answers every delta that does not follow: asked once"
    );
    assert!(m
        .on_delivery(6, reset_feed(std::slice::from_ref(&i)), None, None, t0)
        .is_empty());
    assert_eq!(
        m.on_delivery(8, delta(7, std::slice::from_ref(&i), &[]), None, None, t0),
        vec![ResolverAction::RequestReset],
        "after the Reset, a new gap asks again"
    );
    assert!(
        m.on_delivery(1, delta(0, &[i], &[]), None, None, t0)
            .is_empty(),
        "an old delta is dropped"
    );
}

#[test]
fn a_reset_is_served_in_its_own_order_in_one_full_update() {
    let t0 = Instant::now();
    let (mut m, _, m1) = resolved(5, t0);
    let order: Vec<ServiceInstance> = [9u16, 3, 7, 0, 4, 8]
        .iter()
        .map(|k| inst(&format!("h{k}"), &m1.revision))
        .collect();
    let _ = m.on_delivery(2, reset_feed(&order), None, None, t0);
    let u = m.take_updates().pop().unwrap();
    let got: Vec<String> = urls(&u)
        .iter()
        .map(|e| e.instance_id().to_string())
        .collect();
    let want: Vec<String> = order.iter().map(|i| i.id.clone()).collect();
    assert_eq!(got, want);
}
