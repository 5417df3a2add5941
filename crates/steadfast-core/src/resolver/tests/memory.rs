//! Backoff memory: a revision that leaves the snapshot and comes back within
//! twice the backoff cap resumes its schedule; after that, or when seen for
//! the first time, it starts at the initial delay.

use std::time::Duration;
use std::time::Instant;

use super::harness::{armed, assert_band, fail, fetched, inst, meta, secs, unresolved, Harness};
use super::harness::{KEY, MEMORY};
use crate::resolver::ResolverAction;

#[test]
fn a_revision_coming_back_before_its_due_time_waits_for_the_rest() {
    let t0 = Instant::now();
    let (good, bad) = (meta(20001), meta(20002));
    let (g, b) = (good.revision.as_str(), bad.revision.as_str());
    let mut h = Harness::active(t0);
    let f = fetched(&h.snapshot(1, vec![inst("a", b)], t0), b);
    let (_, delay) = armed(&h.complete(f, fail(), t0), b);
    let due = t0 + delay;
    // Away at once, back 500 ms later: no fetch, a timer for the rest.
    let a = h.snapshot(2, vec![inst("a", g)], t0);
    assert!(matches!(a[0], ResolverAction::CancelTimer { .. }), "{a:?}");
    let g1 = fetched(&a, g);
    h.complete(g1, Ok(good.clone()), t0);
    let back = t0 + Duration::from_millis(500);
    let a = h.snapshot(3, vec![inst("a", b)], back);
    let (timer, rest) = armed(&a, b);
    assert_eq!(a.len(), 1, "no fetch before the due time: {a:?}");
    assert_eq!(rest, due - back);
    let u = h.update();
    let un = unresolved(&u.state);
    assert_eq!((un.attempts, un.since), (1, t0), "the status is kept too");
    assert!(un.last_error.is_some());
    // The retry continues the grown schedule: the next delay is step 1.
    let f = fetched(&h.fire(timer), b);
    assert_band(armed(&h.complete(f, fail(), due), b).1, 1);
}

#[test]
fn a_revision_coming_back_after_its_due_time_is_fetched_at_once_on_its_schedule() {
    let t0 = Instant::now();
    let bad = meta(20002);
    let b = bad.revision.as_str();
    let mut h = Harness::active(t0);
    let mut f = fetched(&h.snapshot(1, vec![inst("a", b)], t0), b);
    for n in 0..3 {
        let now = h.now;
        let (timer, d) = armed(&h.complete(f, fail(), now), b);
        assert_band(d, n);
        f = fetched(&h.fire(timer), b);
    }
    // Three failures recorded; the fourth fetch, in flight, is abandoned
    // and counts as an attempt (it cost its provider calls).
    let left = h.now;
    h.snapshot(2, vec![], left);
    let back = left + secs(40);
    let f = fetched(&h.snapshot(3, vec![inst("a", b)], back), b);
    assert_eq!(unresolved(&h.update().state).attempts, 4);
    assert_band(armed(&h.complete(f, fail(), back), b).1, 4);
    assert_eq!(unresolved(&h.update().state).attempts, 5);
}

#[test]
fn a_revision_away_longer_than_twice_the_cap_starts_afresh() {
    let t0 = Instant::now();
    let bad = meta(20002);
    let b = bad.revision.as_str();
    let mut h = Harness::active(t0);
    let mut f = fetched(&h.snapshot(1, vec![inst("a", b)], t0), b);
    for _ in 0..4 {
        let now = h.now;
        let (timer, _) = armed(&h.complete(f, fail(), now), b);
        f = fetched(&h.fire(timer), b);
    }
    let left = h.now;
    h.snapshot(2, vec![], left);
    let back = left + MEMORY + secs(1);
    let f = fetched(&h.snapshot(3, vec![inst("a", b)], back), b);
    let u = h.update();
    assert_eq!(unresolved(&u.state).attempts, 0, "forgotten");
    assert_eq!(unresolved(&u.state).since, back);
    assert_band(armed(&h.complete(f, fail(), back), b).1, 0);
}

#[test]
fn unsubscribe_and_resubscribe_keep_the_due_time() {
    let t0 = Instant::now();
    let bad = meta(20002);
    let b = bad.revision.as_str();
    let mut h = Harness::active(t0);
    let f = fetched(&h.snapshot(1, vec![inst("a", b)], t0), b);
    let (_, delay) = armed(&h.complete(f, fail(), t0), b);
    h.unsubscribe(KEY);
    h.now = t0 + Duration::from_millis(300);
    let (timer, rest) = armed(&h.subscribe(KEY), b);
    assert_eq!(rest, t0 + delay - h.now);
    fetched(&h.fire(timer), b);
}

/// Fetches of the failing revision when one instance flips between a good
/// and a failing revision every 500 ms for `secs` seconds (every fetch of
/// the failing one fails at once).
fn flapping_fetches(seed: u64, secs: u64) -> usize {
    flapping(seed, secs, false)
}

/// Like [`flapping_fetches`], `slow` making every fetch of the failing
/// revision slower than a flap: it is still under way when the revision
/// leaves, and abandoned.
fn flapping(seed: u64, secs: u64, slow: bool) -> usize {
    let t0 = Instant::now();
    let (good, bad) = (meta(20001), meta(20002));
    let (g, b) = (good.revision.clone(), bad.revision.clone());
    let mut h = Harness::new(t0, seed);
    h.subscribe(KEY);
    let step = Duration::from_millis(500);
    let mut fetches = 0;
    let mut started = std::collections::BTreeSet::new();
    let mut generation = 0;
    let end = t0 + Duration::from_secs(secs);
    while h.now < end {
        let next = h.now + step;
        generation += 1;
        let rev = if generation % 2 == 1 { &b } else { &g };
        let now = h.now;
        h.snapshot(generation, vec![inst("a", rev)], now);
        // Run everything due before the next flip.
        for _ in 0..100 {
            let fetch = h
                .fetches
                .iter()
                .find(|(t, r)| !(slow && **r == b && started.contains(*t)))
                .map(|(t, r)| (*t, r.clone()));
            if let Some((t, r)) = fetch {
                if slow && r == b {
                    // Counted once; it will not answer before the flip.
                    fetches += 1;
                    started.insert(t);
                    continue;
                }
                let result = if r == b {
                    fetches += 1;
                    fail()
                } else {
                    Ok(good.clone())
                };
                let now = h.now;
                h.complete(t, result, now);
                continue;
            }
            let timer = h.timers.iter().find(|(_, (_, due))| *due < next);
            match timer.map(|(t, _)| *t) {
                Some(t) => {
                    h.fire(t);
                }
                None => break,
            }
        }
        h.m.take_updates();
        h.now = next;
    }
    fetches
}

#[test]
fn a_flapping_instance_keeps_its_backoff() {
    let runs: Vec<usize> = (1..=8).map(|seed| flapping_fetches(seed, 60)).collect();
    println!("flapping 60 s: fetches of the failing revision per seed = {runs:?}");
    for n in &runs {
        assert!(*n <= 12, "{runs:?}");
    }
    assert!(
        runs.iter().all(|n| *n >= 5),
        "it is still retried: {runs:?}"
    );
}

#[test]
fn a_flapping_instance_whose_fetches_are_slower_than_its_flaps_keeps_its_backoff() {
    let runs: Vec<usize> = (1..=8).map(|seed| flapping(seed, 60, true)).collect();
    println!("flapping 60 s, failing fetch slower than a flap: fetches per seed = {runs:?}");
    for n in &runs {
        assert!(*n <= 12, "{runs:?}");
    }
    assert!(runs.iter().all(|n| *n >= 5), "still retried: {runs:?}");
}
