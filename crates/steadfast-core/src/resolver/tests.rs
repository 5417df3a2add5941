//! Unit tests of the resolver, driven through [`harness::Harness`] with a
//! clock stepped by hand from one `t0`; [`memory`] covers the backoff memory
//! and [`prop`] holds the property test.

mod closing;
mod demand;
mod harness;
mod incremental;
mod inspect;
mod memory;
mod prop;
mod stale;
pub(crate) mod views;

use crate::change::Version;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::ResolverAction;
use crate::error::FetchError;
use crate::model::ServiceInstance;
use crate::update::UpdateState;
use harness::{
    addrs, armed, assert_band, fail, fetched, inst, meta, secs, set, unresolved, Harness, APP, KEY,
};

#[test]
fn first_failure_arms_jittered_timer_and_retry_resolves() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut h = Harness::active(t0);
    let a = h.snapshot(1, vec![inst("a", r1)], t0);
    assert_eq!(a.len(), 1);
    let f1 = fetched(&a, r1);
    let a = h.complete(f1, fail(), t0 + secs(1));
    let (timer, delay) = armed(&a, r1);
    assert!(
        delay >= secs(1) && delay <= Duration::from_millis(1250),
        "{delay:?}"
    );
    let u = h.update();
    assert!(views::urls(&u).is_empty());
    let un = unresolved(&u.state);
    assert_eq!(
        (un.attempts, un.last_error.clone()),
        (1, Some(FetchError::Timeout))
    );
    let f2 = fetched(&h.fire(timer), r1);
    assert_ne!(f2, f1);
    assert!(h.complete(f2, Ok(m1.clone()), t0 + secs(3)).is_empty());
    let u = h.update();
    assert_eq!(u.state, UpdateState::Resolved);
    assert_eq!(addrs(&u), set(&["a:20001"]));
    assert!(h.timers.is_empty() && h.fetches.is_empty());
}

#[test]
fn a_fetch_whose_deadline_passes_counts_as_a_timeout_and_its_late_answer_is_dropped() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut h = Harness::active(t0);
    h.m = std::mem::replace(
        &mut h.m,
        super::ResolverMachine::new(APP, Default::default(), 7),
    )
    .with_fetch_deadline(secs(9));
    let a = h.snapshot(1, vec![inst("a", r1)], t0);
    let f1 = fetched(&a, r1);
    assert!(
        a.iter()
            .any(|x| matches!(x, ResolverAction::Fetch { deadline, .. } if *deadline == secs(9))),
        "the machine sets the fetch's deadline: {a:?}"
    );
    // No answer by the deadline: a timeout, retried on the backoff.
    let a = h.m.on_fetch_deadline(r1, f1, t0 + secs(9));
    armed(&a, r1);
    let u = h.m.update_for(KEY);
    let un = unresolved(&u.state);
    assert_eq!(
        (un.attempts, un.last_error.clone()),
        (1, Some(FetchError::Timeout))
    );
    // The lost fetch answers after all: too late, dropped.
    assert!(h
        .m
        .on_fetch_result(r1, f1, Ok(m1.clone()), t0 + secs(10))
        .is_empty());
    // A deadline of a fetch that answered does nothing.
    assert!(h.m.on_fetch_deadline(r1, f1, t0 + secs(11)).is_empty());
}

#[test]
fn revision_leaving_while_waiting_cancels_its_timer_and_drops_late_inputs() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (m1.revision.as_str(), m2.revision.as_str());
    let mut h = Harness::active(t0);
    let f1 = fetched(&h.snapshot(1, vec![inst("a", r1)], t0), r1);
    let (timer, _) = armed(&h.complete(f1, fail(), t0), r1);
    let a = h.snapshot(2, vec![inst("b", r2)], t0 + secs(1));
    assert!(a.contains(&ResolverAction::CancelTimer { token: timer }));
    assert_eq!(a.len(), 2);
    fetched(&a, r2);
    h.update();
    assert!(h.m.on_retry_due(r1, timer).is_empty());
    assert!(h.m.on_fetch_result(r1, f1, Ok(m1.clone()), t0).is_empty());
    assert!(h.m.on_fetch_result(r1, f1, fail(), t0).is_empty());
    h.check();
    assert!(h.m.take_updates().is_empty(), "late inputs changed nothing");
    let u = h.m.update_for(KEY);
    assert!(views::urls(&u).is_empty());
    assert_eq!(unresolved(&u.state).revisions, vec![r2.to_string()]);
}

#[test]
fn superseded_fetch_is_abandoned_and_its_late_result_never_published() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (m1.revision.as_str(), m2.revision.as_str());
    let mut h = Harness::active(t0);
    let f1 = fetched(&h.snapshot(1, vec![inst("a", r1)], t0), r1);
    let a = h.snapshot(2, vec![inst("a", r2)], t0 + secs(1));
    assert_eq!(a.len(), 2);
    assert_eq!(
        a[0],
        ResolverAction::AbandonFetch {
            revision: r1.to_string(),
            token: f1
        }
    );
    let f2 = fetched(&a, r2);
    assert!(h.m.on_fetch_result(r1, f1, Ok(m1.clone()), t0).is_empty());
    h.check();
    let mut updates = h.m.take_updates();
    let (timer, _) = armed(&h.complete(f2, fail(), t0 + secs(2)), r2);
    updates.extend(h.m.take_updates());
    let f3 = fetched(&h.fire(timer), r2);
    h.complete(f3, Ok(m2.clone()), t0 + secs(4));
    updates.extend(h.m.take_updates());
    let updates: Vec<_> = updates.into_iter().map(|u| h.views.absorb(u)).collect();
    assert_eq!(updates.last().unwrap().state, UpdateState::Resolved);
    assert_eq!(addrs(updates.last().unwrap()), set(&["a:20002"]));
    for u in &updates {
        assert!(
            views::urls(u).iter().all(|url| url.port() != 20001),
            "{u:?}"
        );
    }
}

#[test]
fn identical_snapshots_add_no_fetch_and_no_timer() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let snap = vec![inst("a", r1), inst("b", r1)];
    let mut h = Harness::active(t0);
    let f1 = fetched(&h.snapshot(1, snap.clone(), t0), r1);
    for g in 2..=4 {
        assert!(h.snapshot(g, snap.clone(), t0 + secs(g)).is_empty());
    }
    let (timer, _) = armed(&h.complete(f1, fail(), t0 + secs(5)), r1);
    for g in 5..=7 {
        assert!(h.snapshot(g, snap.clone(), t0 + secs(g)).is_empty());
    }
    assert_eq!(h.timers.keys().copied().collect::<Vec<_>>(), vec![timer]);
    assert!(h.fetches.is_empty());
    assert_eq!(h.m.version().revision, 7);
    fetched(&h.fire(timer), r1);
}

#[test]
fn last_unsubscribe_stops_everything_and_resubscribe_resumes() {
    let t0 = Instant::now();
    let (m1, m2, m3) = (meta(20001), meta(20002), meta(20003));
    let (r1, r2, r3) = (&m1.revision, &m2.revision, &m3.revision);
    let mut h = Harness::active(t0);
    assert!(h.subscribe("Other:tri").is_empty());
    let a = h.snapshot(1, vec![inst("a", r1), inst("b", r2)], t0);
    let (f1, f2) = (fetched(&a, r1), fetched(&a, r2));
    let (timer, delay) = armed(&h.complete(f1, fail(), t0 + secs(1)), r1);
    let due = t0 + secs(1) + delay;
    assert!(h.unsubscribe("Other:tri").is_empty());
    let a = h.unsubscribe(KEY);
    assert_eq!(a.len(), 2);
    assert!(a.contains(&ResolverAction::CancelTimer { token: timer }));
    assert!(a.contains(&ResolverAction::AbandonFetch {
        revision: r2.clone(),
        token: f2
    }));
    assert!(!h.m.is_active() && h.timers.is_empty() && h.fetches.is_empty());
    assert!(h.m.on_retry_due(r1, timer).is_empty());
    assert!(h.m.on_fetch_result(r2, f2, Ok(m2.clone()), t0).is_empty());
    let snap = vec![inst("a", r1), inst("b", r2), inst("c", r3)];
    assert!(h.snapshot(2, snap, t0 + secs(2)).is_empty());
    assert!(h.m.take_updates().is_empty());
    // Re-attaching resumes every revision: the due ones are fetched, R1
    // (failed at 1 s, due after 2 s) waits for the rest of its delay.
    let a = h.subscribe(KEY);
    let revs: BTreeSet<&str> = a
        .iter()
        .filter_map(|a| match a {
            ResolverAction::Fetch { revision, .. } => Some(revision.as_str()),
            ResolverAction::ArmTimer { .. } => None,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(revs, [r2, r3].iter().map(|r| r.as_str()).collect());
    assert_eq!(a.len(), 3);
    let (timer, rest) = armed(&a, r1);
    assert_eq!(
        rest,
        due - (t0 + secs(2)),
        "no fetch of R1 before its due time"
    );
    let u = h.update();
    assert_eq!(u.version().revision, 2);
    assert_eq!(unresolved(&u.state).revisions.len(), 3);
    fetched(&h.fire(timer), r1);
}

#[test]
fn close_stops_everything_for_good() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (&m1.revision, &m2.revision);
    let mut h = Harness::active(t0);
    let a = h.snapshot(1, vec![inst("a", r1), inst("b", r2)], t0);
    let (f1, f2) = (fetched(&a, r1), fetched(&a, r2));
    let (timer, _) = armed(&h.complete(f1, fail(), t0), r1);
    h.update();
    let a = h.close();
    assert_eq!(a.len(), 2);
    assert!(h.m.is_closed() && h.timers.is_empty() && h.fetches.is_empty());
    let t = t0 + secs(10);
    assert!(h
        .snapshot(2, vec![inst("c", &meta(20003).revision)], t)
        .is_empty());
    assert_eq!(
        h.m.version().revision,
        1,
        "a closed machine ignores snapshots"
    );
    assert!(h.subscribe(KEY).is_empty());
    assert!(h.m.on_retry_due(r1, timer).is_empty());
    assert!(h.m.on_fetch_result(r2, f2, Ok(m2.clone()), t).is_empty());
    assert!(h.restart(t).is_empty());
    assert!(h.unsubscribe(KEY).is_empty());
    assert!(h.close().is_empty());
    assert!(!h.m.is_active());
    assert!(h.m.take_updates().is_empty());
}

#[test]
fn last_known_good_serves_live_instances_only() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (&m1.revision, &m2.revision);
    let mut h = Harness::active(t0);
    let f1 = fetched(&h.snapshot(1, vec![inst("a", r1), inst("b", r1)], t0), r1);
    h.complete(f1, Ok(m1.clone()), t0);
    assert_eq!(addrs(&h.update()), set(&["a:20001", "b:20001"]));
    // a upgrades to r2, whose fetch fails; b leaves. r1 stays cached for a.
    let a = h.snapshot(2, vec![inst("a", r2)], t0 + secs(1));
    armed(&h.complete(fetched(&a, r2), fail(), t0 + secs(2)), r2);
    let u = h.update();
    assert_eq!(
        addrs(&u),
        set(&["a:20001"]),
        "a from last-known-good, b gone"
    );
    assert!(matches!(u.state, UpdateState::Degraded(_)), "{:?}", u.state);
    assert_eq!(unresolved(&u.state).revisions, vec![r2.clone()]);
    // r1 is still cached: b returning with it resolves without a fetch.
    let a = h.snapshot(3, vec![inst("a", r2), inst("b", r1)], t0 + secs(3));
    assert!(a.is_empty());
    assert_eq!(addrs(&h.update()), set(&["a:20001", "b:20001"]));
    // a leaving drops its last-known-good URL at once...
    assert_eq!(h.snapshot(4, vec![inst("b", r1)], t0 + secs(4)).len(), 1);
    let u = h.update();
    assert_eq!(addrs(&u), set(&["b:20001"]));
    assert_eq!(u.state, UpdateState::Resolved);
    // ...and for good: back with the unresolved r2, it has no URL although
    // r1 is still cached for b.
    let a = h.snapshot(5, vec![inst("a", r2), inst("b", r1)], t0 + secs(5));
    assert_eq!(a.len(), 1);
    let u = h.update();
    assert_eq!(addrs(&u), set(&["b:20001"]));
    assert!(matches!(u.state, UpdateState::Degraded(_)), "{:?}", u.state);
}

#[test]
fn empty_registry_and_no_snapshot_have_their_own_states() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let mut h = Harness::active(t0);
    let u = h.update();
    assert_eq!(
        (u.state.clone(), views::urls(&u).len(), u.version().revision),
        (UpdateState::Pending(Default::default()), 0, 0)
    );
    let f1 = fetched(
        &h.snapshot(1, vec![inst("a", &m1.revision)], t0),
        &m1.revision,
    );
    h.complete(f1, Ok(m1.clone()), t0);
    assert_eq!(views::urls(&h.update()).len(), 1);
    assert!(h.snapshot(2, vec![], t0 + secs(1)).is_empty());
    let u = h.update();
    assert_eq!(
        (u.state.clone(), views::urls(&u).len(), u.version().revision),
        (UpdateState::RegistryEmpty, 0, 2)
    );
}

#[test]
fn healthy_provider_is_served_while_another_fails() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (&m1.revision, &m2.revision);
    let mut h = Harness::active(t0);
    let a = h.snapshot(1, vec![inst("a", r1), inst("b", r2)], t0);
    h.complete(fetched(&a, r1), Ok(m1.clone()), t0);
    armed(&h.complete(fetched(&a, r2), fail(), t0), r2);
    let u = h.update();
    assert_eq!(addrs(&u), set(&["a:20001"]));
    assert!(matches!(u.state, UpdateState::Degraded(_)), "{:?}", u.state);
    assert_eq!(unresolved(&u.state).revisions, vec![r2.clone()]);
}

#[test]
fn backoff_grows_per_revision_and_restarts_for_a_new_one() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (m1.revision.as_str(), m2.revision.as_str());
    let mut h = Harness::active(t0);
    let mut f1 = fetched(&h.snapshot(1, vec![inst("a", r1)], t0), r1);
    for n in 0..6 {
        let (timer, d) = armed(&h.complete(f1, fail(), h.now), r1);
        assert_band(d, n);
        f1 = fetched(&h.fire(timer), r1);
    }
    let now = h.now;
    let f2 = fetched(&h.snapshot(2, vec![inst("a", r1), inst("b", r2)], now), r2);
    assert_band(armed(&h.complete(f2, fail(), now), r2).1, 0);
    assert_band(armed(&h.complete(f1, fail(), now), r1).1, 6);
    assert_eq!(unresolved(&h.update().state).attempts, 7);
}

#[test]
fn results_with_stale_tokens_are_ignored() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut h = Harness::active(t0);
    let f1 = fetched(&h.snapshot(1, vec![inst("a", r1)], t0), r1);
    let (timer, _) = armed(&h.complete(f1, fail(), t0), r1);
    let f2 = fetched(&h.fire(timer), r1);
    h.update();
    for stale in [f1, timer] {
        assert!(h
            .m
            .on_fetch_result(r1, stale, Ok(m1.clone()), t0)
            .is_empty());
        assert!(h.m.on_fetch_result(r1, stale, fail(), t0).is_empty());
    }
    assert!(h.m.on_retry_due(r1, timer).is_empty());
    assert!(h.m.on_retry_due(r1, f2).is_empty());
    h.check();
    assert!(h.m.take_updates().is_empty());
    assert!(h.complete(f2, Ok(m1.clone()), t0 + secs(2)).is_empty());
    assert_eq!(h.update().state, UpdateState::Resolved);
}

#[test]
fn a_re_created_resolver_recalls_the_cache_and_hands_out_one_whole_reset_after_the_last_update() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (m1.revision.as_str(), m2.revision.as_str());
    let mut h = Harness::active(t0);
    let a = h.snapshot(1, vec![inst("a", r1), inst("b", r2)], t0);
    let (f1, f2) = (fetched(&a, r1), fetched(&a, r2));
    h.complete(f1, Ok(m1.clone()), t0);
    assert_eq!(addrs(&h.update()), set(&["a:20001"]));
    // R2's fetch fails: its retry waits on a schedule the panic may have
    // left half-written.
    let (_, delay) = armed(&h.complete(f2, fail(), t0 + secs(1)), r2);
    assert!(!delay.is_zero());
    let held = h.update();
    assert_ne!(held.state, UpdateState::Resolved);
    // Re-created at t0 + 2 s (the harness recalls the cache, which holds
    // R1, then delivers the registry's state): R1 resolves at once, R2
    // starts on a clean schedule, fetched now.
    let at = t0 + secs(2);
    let a = h.restart(at);
    assert_eq!(a.len(), 1, "only R2 is fetched: {a:?}");
    let g2 = fetched(&a, r2);
    assert!(g2 > f2, "tokens come after the old machine's");
    assert!(!h.m.is_resyncing());
    let u = h.update();
    assert!(u.change.is_reset(), "one whole state");
    assert!(
        u.version() > held.version(),
        "after the last update handed out"
    );
    assert_eq!(addrs(&u), set(&["a:20001"]));
    // The old machine's fetch answering late is not taken for a new one.
    assert!(h.m.on_fetch_result(r2, f2, Ok(m2.clone()), at).is_empty());
    h.check();
    h.complete(g2, Ok(m2.clone()), at);
    let u = h.update();
    assert_eq!(addrs(&u), set(&["a:20001", "b:20002"]));
    assert_eq!(u.state, UpdateState::Resolved);
}

#[test]
fn a_re_created_resolver_hands_out_nothing_before_the_registrys_state() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let mut h = Harness::active(t0);
    let a = h.snapshot(1, vec![inst("a", m1.revision.as_str())], t0);
    h.complete(fetched(&a, &m1.revision), Ok(m1.clone()), t0);
    let held = h.update();
    // The registry is down: the new subscription brings nothing. The
    // directory keeps what it holds (no Pending state replaces it), and a
    // directory attaching gets nothing either.
    let mut m = crate::resolver::ResolverMachine::new(APP, Default::default(), 7)
        .resuming(h.m.resume_point());
    m.on_recalled(h.cached.clone());
    assert!(m.subscribe_at(KEY, t0).is_empty());
    assert!(m.is_resyncing());
    assert!(m.take_updates().is_empty());
    let attach = m.attach_update(KEY);
    assert!(attach.reset.is_none() && attach.pending.is_empty());
    // Recalled metadata of another app is not taken.
    let mut other = (*m1).clone();
    other.app = "other".into();
    m.on_recalled([(m1.revision.clone(), std::sync::Arc::new(other))]);
    // The state arrives: one Reset, after the one held.
    let snap = std::sync::Arc::new(vec![inst("a", m1.revision.as_str())]);
    assert!(
        m.on_snapshot(Version::at(2), snap, t0).is_empty(),
        "R1 recalled"
    );
    let u = m.take_updates().pop().expect("the whole state");
    assert!(u.version() > held.version());
    assert_eq!(addrs(&u), set(&["a:20001"]));
}

#[test]
fn empty_or_missing_revision_is_never_fetched() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let none = ServiceInstance::new(APP, "n", 8080);
    let snap = vec![none, inst("z", "0"), inst("e", "")];
    let mut h = Harness::active(t0);
    assert!(h.snapshot(1, snap.clone(), t0).is_empty());
    let u = h.update();
    assert_eq!(
        (views::urls(&u).len(), u.state),
        (0, UpdateState::NoMatchingService)
    );
    let mut snap2 = snap;
    snap2.push(inst("a", &m1.revision));
    let a = h.snapshot(2, snap2, t0);
    assert_eq!(a.len(), 1);
    let ResolverAction::Fetch { candidates, .. } = &a[0] else {
        panic!("expected a fetch, got {a:?}")
    };
    assert_eq!(candidates, &vec![inst("a", &m1.revision)]);
}

#[test]
fn persistent_error_backs_off_at_the_cap() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut h = Harness::active(t0);
    let f1 = fetched(&h.snapshot(1, vec![inst("a", r1)], t0), r1);
    let bad = || Err(FetchError::Malformed("not json".into()));
    let (timer, d) = armed(&h.complete(f1, bad(), t0), r1);
    assert!(d >= secs(30) && d <= secs(30).mul_f64(1.25), "{d:?}");
    let f2 = fetched(&h.fire(timer), r1);
    let (_, d) = armed(&h.complete(f2, bad(), h.now), r1);
    assert!(d >= secs(30) && d <= secs(30).mul_f64(1.25), "{d:?}");
}

#[test]
fn an_attempt_limit_stops_retries_until_the_revision_comes_back() {
    let t0 = Instant::now();
    let m1 = meta(20001);
    let r1 = m1.revision.as_str();
    let mut m = super::ResolverMachine::new(APP, crate::BackoffPolicy::default(), 7)
        .with_max_attempts(Some(2));
    m.subscribe(KEY);
    let snap = std::sync::Arc::new(vec![inst("a", r1)]);
    let token = |a: &[ResolverAction]| match a {
        [ResolverAction::Fetch { token, .. }] => *token,
        other => panic!("expected one fetch, got {other:?}"),
    };
    let t = token(&m.on_snapshot(Version::at(1), snap.clone(), t0));
    let a = m.on_fetch_result(r1, t, fail(), t0);
    let [ResolverAction::ArmTimer { token: timer, .. }] = a.as_slice() else {
        panic!("first failure retries: {a:?}")
    };
    let t = token(&m.on_retry_due(r1, *timer));
    assert!(
        m.on_fetch_result(r1, t, fail(), t0).is_empty(),
        "limit reached: no timer"
    );
    assert_eq!(m.pending_timers() + m.pending_fetches(), 0);
    assert!(m.unsubscribe(KEY).is_empty());
    assert!(
        m.subscribe(KEY).is_empty(),
        "re-attaching does not revive it"
    );
    assert!(m.on_snapshot(Version::at(2), snap.clone(), t0).is_empty());
    let u = m.update_for(KEY);
    assert!(matches!(u.state, UpdateState::Unresolved(ref x) if x.attempts == 2));
    // Leaving and coming back starts afresh.
    assert!(m
        .on_snapshot(Version::at(3), std::sync::Arc::new(vec![]), t0)
        .is_empty());
    token(&m.on_snapshot(Version::at(4), snap, t0));
}
