//! The incremental path: a delta of k instances becomes a patch of at most
//! k URLs, a delta on top of a state not held asks for a Reset, and what
//! the patches build equals what a full rebuild gives.

use crate::change::{Change, Version};
use std::sync::Arc;
use std::time::Instant;

use super::harness::{inst, meta, secs, KEY};
use super::views::{deliver, delta, reset_feed, urls, Views};
use crate::backoff::BackoffPolicy;
use crate::model::ServiceInstance;
use crate::resolver::{ResolverAction, ResolverMachine};
use crate::update::UpdateState;

/// A resolved machine holding `n` instances of one revision.
fn resolved(n: u16, t0: Instant) -> (ResolverMachine, Views, Arc<crate::model::MetadataInfo>) {
    let m1 = meta(20001);
    let mut m = ResolverMachine::new("provider", BackoffPolicy::default(), 7);
    let _ = m.subscribe_at(KEY, t0);
    let all: Vec<ServiceInstance> = (0..n)
        .map(|k| inst(&format!("h{k}"), &m1.revision))
        .collect();
    let acts = deliver(&mut m, reset_feed(1, &all), None, None, t0);
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
        assert!(
            matches!(u.change, Change::Reset { items: ref a, .. } if a.len() == usize::from(n))
        );
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
    assert!(deliver(&mut m, delta(1, 2, &[again], &[]), None, None, t0).is_empty());
    let u = m.take_updates().pop().unwrap();
    match &u.change {
        Change::Delta {
            base,
            upserts,
            removals,
            ..
        } if *base == Version::at(1) => assert_eq!(
            (upserts.len(), removals.len(), upserts[0].weight()),
            (1, 0, 5)
        ),
        other => panic!("{other:?}"),
    }
    let u = views.absorb(u);
    assert_eq!((urls(&u).len(), u.state), (1000, UpdateState::Resolved));
    // A removal and an addition.
    let new = inst("new", &m1.revision);
    let _ = deliver(&mut m, delta(2, 3, &[new], &["h3:8080"]), None, None, t0);
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
    for k in 0..200u16 {
        let gen = u64::from(k) + 1;
        let host = format!("h{}", k % 60);
        let mut i = inst(&host, &m1.revision);
        i.weight = u32::from(k % 3);
        i.healthy = k % 7 != 0;
        let feed = if k % 5 == 0 {
            delta(gen, gen + 1, &[], &[&format!("{host}:8080")])
        } else {
            delta(gen, gen + 1, &[i], &[])
        };
        let _ = deliver(&mut m, feed, None, None, t0 + secs(1));
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
        deliver(
            &mut m,
            delta(4, 5, std::slice::from_ref(&i), &[]),
            None,
            None,
            t0
        ),
        vec![ResolverAction::RequestReset]
    );
    assert!(m.take_updates().is_empty(), "nothing applied");
    assert!(
        deliver(
            &mut m,
            delta(5, 6, std::slice::from_ref(&i), &[]),
            None,
            None,
            t0
        )
        .is_empty(),
        "one Reset answers every delta that does not follow: asked once"
    );
    assert!(deliver(
        &mut m,
        reset_feed(6, std::slice::from_ref(&i)),
        None,
        None,
        t0
    )
    .is_empty());
    assert!(
        deliver(
            &mut m,
            delta(7, 8, std::slice::from_ref(&i), &[]),
            None,
            None,
            t0
        )
        .is_empty(),
        "rate limited: at most one ask per second"
    );
    assert_eq!(
        deliver(
            &mut m,
            delta(7, 8, std::slice::from_ref(&i), &[]),
            None,
            None,
            t0 + secs(1)
        ),
        vec![ResolverAction::RequestReset],
        "after the Reset, a new gap asks again"
    );
    assert!(
        deliver(&mut m, delta(0, 1, &[i], &[]), None, None, t0).is_empty(),
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
    let _ = deliver(&mut m, reset_feed(2, &order), None, None, t0);
    let u = m.take_updates().pop().unwrap();
    let got: Vec<String> = urls(&u)
        .iter()
        .map(|e| e.instance_id().to_string())
        .collect();
    let want: Vec<String> = order.iter().map(|i| i.id.clone()).collect();
    assert_eq!(got, want);
}

#[test]
fn a_directory_attaching_before_a_flush_gets_a_state_the_next_patch_follows() {
    // A change applied and not flushed yet when a directory attaches; an
    // instance it added then stops serving before the flush. The attaching
    // directory must end with what the others hold: a Reset labelled with
    // the last version sent but holding the pending change would keep the
    // instance for good (the next patch never names an URL it never sent).
    let t0 = Instant::now();
    let (mut m, mut first, m1) = resolved(3, t0);
    let extra = inst("h9", &m1.revision);
    assert!(deliver(
        &mut m,
        delta(1, 2, std::slice::from_ref(&extra), &[]),
        None,
        None,
        t0
    )
    .is_empty());
    let attach = m.attach_update(KEY);
    for u in attach.pending {
        first.absorb(u);
    }
    let mut second = Views::default();
    second.absorb(attach.reset.expect("a state for the attaching directory"));
    let mut down = extra;
    down.healthy = false;
    assert!(deliver(&mut m, delta(2, 3, &[down], &[]), None, None, t0).is_empty());
    let u = m.take_updates().pop().expect("the change to the instance");
    let (a, b) = (first.absorb(u.clone()), second.absorb(u));
    let ids = |u: &crate::update::DirectoryUpdate| {
        let mut v: Vec<String> = urls(u)
            .iter()
            .map(|e| e.instance_id().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(&a), ids(&b), "both directories hold the same URLs");
    assert!(!ids(&b).contains(&"h9:8080".to_string()), "{:?}", ids(&b));
    assert_eq!(ids(&b).len(), 3);
}
