//! The pool machine on a hand-stepped clock.

use std::time::{Duration, Instant};

use super::*;

/// A hand-stepped clock: `at(s)` is `s` seconds after the start.
struct Clock(Instant);

impl Clock {
    fn new() -> Self {
        Self(Instant::now())
    }
    fn at(&self, secs: u64) -> Instant {
        self.0 + Duration::from_secs(secs)
    }
}

fn machine(idle: u64, drain: u64) -> PoolMachine<&'static str> {
    PoolMachine::new(PoolPolicy {
        idle_timeout: Duration::from_secs(idle),
        drain_timeout: Duration::from_secs(drain),
    })
}

/// Takes `address`'s client, building (installing `name`) when told to.
fn take(
    m: &mut PoolMachine<&'static str>,
    address: &str,
    name: &'static str,
    now: Instant,
) -> Held<&'static str> {
    match m.acquire(address, now) {
        Acquire::Held(held) => held,
        Acquire::Build => m.install(address, name, now).0,
    }
}

/// One reaper round as the shell runs it: scan, then each candidate
/// re-checked just before its close, the close finishing at once.
fn round(m: &mut PoolMachine<&'static str>, now: Instant) -> Vec<&'static str> {
    let mut closed = Vec::new();
    for id in m.scan(now) {
        if let Some(close) = m.begin_close(id, now) {
            closed.push(close.client);
            m.close_finished(close.id, true);
        }
    }
    closed
}

#[test]
fn idle_client_with_a_call_in_flight_is_skipped_then_reaped_next_round_after_the_call_ends() {
    // Idle timeout 60 s, rounds every 120 s.
    let clock = Clock::new();
    let mut m = machine(60, 30);
    let a = take(&mut m, "a:1", "A", clock.at(0));
    // Round at 120 s: A's last use is 120 s old, but a call is in flight.
    assert!(
        round(&mut m, clock.at(120)).is_empty(),
        "a client in use must be skipped"
    );
    assert_eq!(m.state(a.id), Some(ClientState::Active));
    assert_eq!(m.in_flight(a.id), 1);
    assert_eq!(m.counters().rescued, 0, "skipped by the scan, not rescued");
    // The call ends at 130 s; next round at 240 s reaps it.
    assert!(m.release(a.id, clock.at(130)).is_none());
    assert_eq!(round(&mut m, clock.at(240)), vec!["A"]);
    assert_eq!(m.state(a.id), None);
    assert_eq!(m.counters().reaped, 1);
}

#[test]
fn client_used_between_scan_and_close_is_rescued() {
    let clock = Clock::new();
    let mut m = machine(180, 30);
    let a = take(&mut m, "a:1", "A", clock.at(0));
    let b = take(&mut m, "b:1", "B", clock.at(0));
    let c = take(&mut m, "c:1", "C", clock.at(0));
    for held in [&a, &b, &c] {
        m.release(held.id, clock.at(1));
    }
    let candidates = m.scan(clock.at(200));
    assert_eq!(candidates, vec![a.id, b.id, c.id]);
    // A's close starts; while it runs, B serves a call and C takes one.
    let close = m.begin_close(a.id, clock.at(200)).expect("A still idle");
    let b2 = take(&mut m, "b:1", "-", clock.at(201));
    m.release(b2.id, clock.at(202));
    let c2 = take(&mut m, "c:1", "-", clock.at(202));
    m.close_finished(close.id, true);
    // Just before their close, B and C are found used: both kept.
    assert!(
        m.begin_close(b.id, clock.at(203)).is_none(),
        "B was used after the scan"
    );
    assert!(m.begin_close(c.id, clock.at(203)).is_none(), "C is in use");
    assert_eq!(m.counters().rescued, 2);
    assert_eq!(m.counters().reaped, 1);
    assert_eq!(m.state(b.id), Some(ClientState::Active));
    assert_eq!(m.state(c.id), Some(ClientState::Active));
    // The kept clients serve again without a rebuild.
    assert_eq!(take(&mut m, "b:1", "new B", clock.at(204)).client, "B");
    assert_eq!(m.counters().built, 3);
    m.release(c2.id, clock.at(204));
}

#[test]
fn close_failure_is_counted_and_the_other_closes_go_on() {
    let clock = Clock::new();
    let mut m = machine(180, 30);
    for (address, name) in [("a:1", "A"), ("b:1", "B"), ("c:1", "C")] {
        let held = take(&mut m, address, name, clock.at(0));
        m.release(held.id, clock.at(0));
    }
    let ids = m.scan(clock.at(200));
    assert_eq!(ids.len(), 3);
    let mut closed = Vec::new();
    for (n, id) in ids.into_iter().enumerate() {
        let close = m.begin_close(id, clock.at(200)).expect("idle");
        closed.push(close.client);
        // The first close fails.
        m.close_finished(close.id, n != 0);
    }
    assert_eq!(closed, vec!["A", "B", "C"]);
    assert_eq!(m.counters().close_failures, 1);
    assert_eq!(m.counters().reaped, 3);
    assert_eq!((m.active(), m.draining()), (0, 0));
    // The failed client's address gets a fresh client.
    assert_eq!(take(&mut m, "a:1", "A2", clock.at(201)).client, "A2");
}

#[test]
fn stale_close_callback_does_not_evict_a_rebuilt_client() {
    let clock = Clock::new();
    let mut m = machine(180, 30);
    let old = take(&mut m, "a:1", "old", clock.at(0));
    m.release(old.id, clock.at(0));
    let close = m
        .begin_close(m.scan(clock.at(200))[0], clock.at(200))
        .expect("idle");
    // While the old client closes, a call for the same address is refused
    // the closing client and gets a fresh one.
    let new = take(&mut m, "a:1", "new", clock.at(201));
    assert_eq!(new.client, "new");
    assert_ne!(new.id, old.id);
    assert_eq!(m.counters().refused_acquires, 1);
    m.release(new.id, clock.at(202));
    // The old client's close finishes late: only the old entry goes.
    m.close_finished(close.id, true);
    match m.acquire("a:1", clock.at(203)) {
        Acquire::Held(held) => {
            assert_eq!(held.id, new.id);
            assert_eq!(held.client, "new");
        }
        Acquire::Build => panic!("the rebuilt client was evicted by the old client's close"),
    }
    assert_eq!(m.counters().built, 2);
}

#[test]
fn call_longer_than_the_idle_timeout_is_never_reaped_mid_flight_nor_right_after() {
    // Idle timeout 180 s, rounds every 60 s; one call runs 0 s .. 200 s.
    let clock = Clock::new();
    let mut m = machine(180, 30);
    let call = take(&mut m, "a:1", "A", clock.at(0));
    for t in [60, 120, 180] {
        assert!(
            round(&mut m, clock.at(t)).is_empty(),
            "reaped mid-flight at {t} s"
        );
    }
    m.release(call.id, clock.at(200));
    // Last use is the call's END: idle 40 s, 100 s, 160 s at the next rounds.
    for t in [240, 300, 360] {
        assert!(
            round(&mut m, clock.at(t)).is_empty(),
            "reaped {} s after a long call ended",
            t - 200
        );
    }
    assert_eq!(round(&mut m, clock.at(420)), vec!["A"]);
}

#[test]
fn zero_idle_timeout_never_reaps() {
    let clock = Clock::new();
    let mut m = machine(0, 30);
    let a = take(&mut m, "a:1", "A", clock.at(0));
    m.release(a.id, clock.at(0));
    assert!(m.scan(clock.at(1_000_000)).is_empty());
    assert!(m.begin_close(a.id, clock.at(1_000_000)).is_none());
    assert_eq!(m.active(), 1);
}

#[test]
fn dropped_endpoint_drains_then_closes_when_its_last_call_ends() {
    let clock = Clock::new();
    let mut m = machine(180, 30);
    let owner = m.new_owner();
    assert!(m
        .sync_owner(owner, ["a:1".to_string(), "b:1".to_string()], clock.at(0))
        .is_empty());
    let a = take(&mut m, "a:1", "A", clock.at(0));
    let b = take(&mut m, "b:1", "B", clock.at(0));
    m.release(b.id, clock.at(0));
    // Both dropped: idle B closes at once, A drains.
    let closes = m.sync_owner(owner, Vec::<String>::new(), clock.at(10));
    assert_eq!(closes.len(), 1);
    assert_eq!(
        (closes[0].client, closes[0].reason),
        ("B", CloseReason::Drained)
    );
    assert_eq!(
        m.state(a.id),
        Some(ClientState::Draining {
            deadline: Some(clock.at(40))
        })
    );
    assert_eq!(m.draining(), 1);
    // No new call on a draining client: a fresh one is built.
    let fresh = take(&mut m, "a:1", "A2", clock.at(11));
    assert_eq!(fresh.client, "A2");
    assert_eq!(m.counters().refused_acquires, 1);
    // A's last call ends: closed as drained, before the deadline.
    let close = m.release(a.id, clock.at(12)).expect("drained");
    assert_eq!((close.client, close.reason), ("A", CloseReason::Drained));
    assert!(m.poll_deadlines(clock.at(40)).is_empty());
    assert_eq!(m.counters().drained, 2);
    assert_eq!(m.counters().forced_closes, 0);
    m.release(fresh.id, clock.at(13));
}

#[test]
fn draining_client_still_in_use_is_force_closed_at_the_deadline() {
    let clock = Clock::new();
    let mut m = machine(180, 30);
    let owner = m.new_owner();
    m.sync_owner(owner, ["a:1".to_string()], clock.at(0));
    let a = take(&mut m, "a:1", "A", clock.at(0));
    m.sync_owner(owner, Vec::<String>::new(), clock.at(5));
    assert_eq!(m.next_deadline(), Some(clock.at(35)));
    assert!(m.poll_deadlines(clock.at(34)).is_empty());
    let forced = m.poll_deadlines(clock.at(35));
    assert_eq!(forced.len(), 1);
    assert_eq!(
        (forced[0].client, forced[0].reason),
        ("A", CloseReason::Forced)
    );
    assert_eq!(m.counters().forced_closes, 1);
    assert_eq!(m.next_deadline(), None);
    // The cut call ends later: nothing more to close.
    assert!(m.release(a.id, clock.at(36)).is_none());
    m.close_finished(forced[0].id, true);
    assert_eq!(m.state(a.id), None);
}

#[test]
fn address_still_listed_by_another_owner_does_not_drain() {
    let clock = Clock::new();
    let mut m = machine(180, 30);
    let (one, two) = (m.new_owner(), m.new_owner());
    m.sync_owner(one, ["a:1".to_string()], clock.at(0));
    m.sync_owner(two, ["a:1".to_string()], clock.at(0));
    let a = take(&mut m, "a:1", "A", clock.at(0));
    m.release(a.id, clock.at(0));
    assert!(m
        .sync_owner(one, Vec::<String>::new(), clock.at(1))
        .is_empty());
    assert_eq!(m.state(a.id), Some(ClientState::Active));
    let closes = m.sync_owner(two, Vec::<String>::new(), clock.at(2));
    assert_eq!(closes.len(), 1);
}

#[test]
fn concurrent_builds_keep_one_client_and_close_the_other() {
    let clock = Clock::new();
    let mut m = machine(180, 30);
    // Two acquires both told to build.
    assert!(matches!(m.acquire("a:1", clock.at(0)), Acquire::Build));
    assert!(matches!(m.acquire("a:1", clock.at(0)), Acquire::Build));
    let (first, none) = m.install("a:1", "first", clock.at(0));
    assert!(none.is_none());
    let (second, duplicate) = m.install("a:1", "second", clock.at(0));
    assert_eq!(second.client, "first");
    assert_eq!(second.id, first.id);
    let duplicate = duplicate.expect("the loser is closed");
    assert_eq!(
        (duplicate.client, duplicate.reason),
        ("second", CloseReason::Duplicate)
    );
    assert_eq!(m.in_flight(first.id), 2);
    m.close_finished(duplicate.id, true);
    assert_eq!(m.state(first.id), Some(ClientState::Active));
    assert_eq!(m.counters().built, 1);
}

#[test]
fn a_client_built_for_an_endpoint_just_dropped_drains_with_its_call() {
    let clock = Clock::new();
    let mut m = machine(0, 30);
    let owner = m.new_owner();
    assert!(m
        .sync_owner(owner, ["a:1".to_string()], clock.at(0))
        .is_empty());
    let a = take(&mut m, "a:1", "A", clock.at(0));
    // The endpoint leaves while A's call runs: A drains.
    assert!(m
        .sync_owner(owner, ["b:1".to_string()], clock.at(1))
        .is_empty());
    // A call that leased the endpoint just before it left asks for a
    // client: refused (A drains), so a fresh one is built, and since no
    // owner lists the address it drains too, instead of living on unlisted
    // (with reaping disabled, for ever).
    let late = take(&mut m, "a:1", "A2", clock.at(2));
    assert_ne!(late.id, a.id);
    assert!(matches!(
        m.state(late.id),
        Some(ClientState::Draining { .. })
    ));
    let close = m
        .release(late.id, clock.at(3))
        .expect("closed with its call");
    assert_eq!((close.client, close.reason), ("A2", CloseReason::Drained));
    // While a listed address's fresh client stays Active.
    let b = take(&mut m, "b:1", "B", clock.at(3));
    assert_eq!(m.state(b.id), Some(ClientState::Active));
}

#[test]
fn striped_machines_hand_out_ids_unique_across_the_stripes() {
    let clock = Clock::new();
    let policy = PoolPolicy {
        idle_timeout: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(30),
    };
    let mut stripes: Vec<PoolMachine<&'static str>> =
        (0..4).map(|i| PoolMachine::stripe(policy, i, 4)).collect();
    let mut seen = std::collections::HashSet::new();
    for (at, m) in stripes.iter_mut().enumerate() {
        for n in 0..5 {
            let address = format!("h{at}:{n}");
            let held = take(m, &address, "c", clock.at(0));
            assert_eq!(held.id.0 % 4, (at as u64 + 1) % 4, "the stripe's residue");
            assert!(seen.insert(held.id), "{:?} handed out twice", held.id);
        }
    }
    assert_eq!(seen.len(), 20);
    // One machine alone numbers its clients 1, 2, 3, ...
    let mut one = machine(60, 30);
    let ids: Vec<u64> = ["a:1", "b:1", "c:1"]
        .iter()
        .map(|a| take(&mut one, a, "c", clock.at(0)).id.0)
        .collect();
    assert_eq!(ids, vec![1, 2, 3]);
}

#[test]
fn every_pool_counter_is_one_row_of_the_export_list_and_adds_up() {
    let c = PoolCounters {
        built: 1,
        reaped: 2,
        rescued: 3,
        refused_acquires: 4,
        drained: 5,
        forced_closes: 6,
        close_failures: 7,
    };
    let mut values: Vec<u64> = c.rows().iter().map(|(_, _, v)| *v).collect();
    values.sort_unstable();
    assert_eq!(values, [1, 2, 3, 4, 5, 6, 7], "each field once");
    let mut names: Vec<&str> = c.rows().iter().map(|(n, _, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 7, "one family per counter");
    let mut sum = c;
    sum.add(&c);
    let doubled: Vec<u64> = sum.rows().iter().map(|(_, _, v)| *v).collect();
    let once: Vec<u64> = c.rows().iter().map(|(_, _, v)| v * 2).collect();
    assert_eq!(doubled, once);
}
