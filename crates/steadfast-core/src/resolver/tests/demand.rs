//! `retry_now`: demand from waiting callers fires the pending retries of
//! unresolved revisions at once, never stacking a fetch, and grows the
//! backoff by the one attempt it makes.

use crate::change::Version;
use std::time::Instant;

use super::harness::{armed, assert_band, fail, fetched, inst, meta, secs, unresolved, Harness};
use super::{ResolverAction, APP, KEY};
use crate::update::UpdateState;

/// Grows the backoff of `rev` (alone in the snapshot) to the 30 s cap;
/// returns the armed timer.
fn grown_to_cap(h: &mut Harness, rev: &str, t0: Instant) -> u64 {
    let mut f = fetched(&h.snapshot(1, vec![inst("a", rev)], t0), rev);
    let mut timer = 0;
    for n in 0..6 {
        let (t, d) = armed(&h.complete(f, fail(), h.now), rev);
        assert_band(d, n);
        timer = t;
        if n < 5 {
            f = fetched(&h.fire(t), rev);
        }
    }
    timer
}

#[test]
fn demand_fetches_a_waiting_revision_at_once_and_it_resolves() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut h = Harness::active(t0);
    let timer = grown_to_cap(&mut h, r1, t0);
    let before = h.m.update_for(KEY);
    let attempts = unresolved(&before.state).attempts;
    let now = h.now + secs(1);
    let a = h.retry_now(now);
    assert_eq!(
        a.first(),
        Some(&ResolverAction::CancelTimer { token: timer })
    );
    let f = fetched(&a, r1);
    assert!(h.timers.is_empty(), "the 30 s timer is gone");
    assert!(h.complete(f, Ok(m1.clone()), now).is_empty());
    assert_eq!(h.update().state, UpdateState::Resolved);
    assert!(h.timers.is_empty() && h.fetches.is_empty());
    assert_eq!(attempts, 6);
}

#[test]
fn a_failed_demand_fetch_grows_the_backoff_by_one_attempt_only() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut h = Harness::active(t0);
    grown_to_cap(&mut h, r1, t0);
    let now = h.now + secs(2);
    let f = fetched(&h.retry_now(now), r1);
    let (_, d) = armed(&h.complete(f, fail(), now), r1);
    assert_band(d, 6);
    let u = h.m.update_for(KEY);
    assert_eq!(unresolved(&u.state).attempts, 7, "exactly one more attempt");
}

#[test]
fn demand_never_stacks_a_fetch_on_one_under_way() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut h = Harness::active(t0);
    let f = fetched(&h.snapshot(1, vec![inst("a", r1)], t0), r1);
    for i in 0..100 {
        assert!(h.retry_now(t0 + secs(i)).is_empty(), "fetch {f} in flight");
    }
    assert_eq!(h.m.pending_fetches(), 1);
    // Answered and waiting again: one demand, one fetch; the next demand
    // finds it in flight.
    armed(&h.complete(f, fail(), t0 + secs(100)), r1);
    let f2 = fetched(&h.retry_now(t0 + secs(100)), r1);
    assert!(h.retry_now(t0 + secs(100)).is_empty());
    assert_ne!(f, f2);
}

#[test]
fn resolved_inactive_and_given_up_revisions_are_untouched() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (m1.revision.as_str(), m2.revision.as_str());
    let mut h = Harness::active(t0);
    let a = h.snapshot(1, vec![inst("a", r1), inst("b", r2)], t0);
    let (f1, f2) = (fetched(&a, r1), fetched(&a, r2));
    assert!(h.complete(f1, Ok(m1.clone()), t0).is_empty());
    armed(&h.complete(f2, fail(), t0), r2);
    let a = h.retry_now(t0 + secs(1) / 2);
    fetched(&a, r2);
    assert!(
        !a.iter()
            .any(|x| matches!(x, ResolverAction::Fetch { revision, .. } if revision == r1)),
        "a resolved revision is not fetched again: {a:?}"
    );
    // Without subscribers nothing runs.
    h.unsubscribe(KEY);
    assert!(h.retry_now(t0 + secs(2)).is_empty());

    // A revision that used up its attempts stays given up.
    let mut m = super::super::ResolverMachine::new(APP, crate::BackoffPolicy::default(), 7)
        .with_max_attempts(Some(1));
    m.subscribe_at(KEY, t0);
    let a = m.on_snapshot(Version::at(1), std::sync::Arc::new(vec![inst("a", r1)]), t0);
    let [ResolverAction::Fetch { token, .. }] = a.as_slice() else {
        panic!("one fetch: {a:?}")
    };
    assert!(m.on_fetch_result(r1, *token, fail(), t0).is_empty());
    assert!(m.retry_now(t0 + secs(5)).is_empty(), "gave up: untouched");
}
