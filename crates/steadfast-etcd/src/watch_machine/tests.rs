//! Unit tests of the [`WatchMachine`] data rules, without etcd. The timing
//! rules are tested in `tests/timing_tests.rs`.

use std::time::Duration;

use rand::SeedableRng;

use super::*;
use crate::wire::KeyValue;
use crate::wire::{Event, StreamError};
use steadfast_core::{ServiceInstance, Version};

pub(crate) const CLUSTER: u64 = 42;

/// The default timing without jitter: probes every 2 s (2 failures), 1 s
/// probes while down, stale after 3 s, backoff 250 ms doubling to 10 s.
pub(crate) fn timing() -> WatchTiming {
    let mut c = crate::EtcdConfig::new(["http://e:1"]);
    c.backoff.jitter = 0.0;
    WatchTiming::from_config(&c)
}

pub(crate) fn machine_with(t: WatchTiming) -> (WatchMachine, Arc<EtcdStats>) {
    let stats = Arc::new(EtcdStats::default());
    let m = WatchMachine::new(
        KeyLayout::new("/p"),
        "web",
        t,
        stats.clone(),
        StdRng::seed_from_u64(5),
    );
    (m, stats)
}

fn machine() -> (WatchMachine, Arc<EtcdStats>) {
    machine_with(timing())
}

pub(crate) fn inst(host: &str) -> ServiceInstance {
    ServiceInstance::new("web", host, 80)
}

pub(crate) fn kv(i: &ServiceInstance, rev: i64) -> KeyValue {
    KeyValue {
        key: format!("/p/services/web/{}", i.id).into_bytes(),
        value: serde_json::to_vec(i).unwrap(),
        mod_revision: rev,
        create_revision: rev,
        version: 1,
        lease: 0,
    }
}

fn raw(key: &str, value: &[u8], rev: i64) -> KeyValue {
    KeyValue {
        key: key.as_bytes().to_vec(),
        value: value.to_vec(),
        mod_revision: rev,
        ..KeyValue::default()
    }
}

pub(crate) fn header(rev: i64, term: u64) -> ResponseHeader {
    ResponseHeader {
        cluster_id: CLUSTER,
        member_id: 1,
        revision: rev,
        raft_term: term,
    }
}

pub(crate) fn range(rev: i64, kvs: Vec<KeyValue>) -> RangeResponse {
    RangeResponse {
        header: header(rev, 2),
        count: kvs.len() as i64,
        kvs,
        more: false,
    }
}

pub(crate) fn created(rev: i64, term: u64) -> WatchResponse {
    WatchResponse {
        header: header(rev, term),
        created: true,
        ..WatchResponse::default()
    }
}

pub(crate) fn events(rev: i64, evs: Vec<(EventType, KeyValue)>) -> WatchResponse {
    WatchResponse {
        header: header(rev, 2),
        events: evs
            .into_iter()
            .map(|(kind, kv)| Event {
                kind,
                kv,
                prev_kv: None,
            })
            .collect(),
        ..WatchResponse::default()
    }
}

/// The ids `m` holds after step `s`, which must carry an event; a Reset
/// must carry exactly those instances.
pub(crate) fn ids(s: &Step, m: &WatchMachine) -> Vec<String> {
    let held: Vec<String> = m.snapshot().iter().map(|i| i.id.clone()).collect();
    match s.event.as_ref().expect("an event") {
        RegistryEvent::Reset {
            items: instances, ..
        } => {
            let reset: Vec<String> = instances.iter().map(|i| i.id().to_string()).collect();
            assert_eq!(reset, held, "the Reset is the state held");
        }
        RegistryEvent::Delta { .. } => {}
    }
    held
}

/// The upserted and removed ids of a Delta step, and its revision.
pub(crate) fn delta(s: &Step) -> (Vec<String>, Vec<String>, u64) {
    match s.event.as_ref().expect("an event") {
        RegistryEvent::Delta {
            version,
            upserts,
            removals,
            ..
        } => (
            upserts.iter().map(|i| i.id().to_string()).collect(),
            removals.iter().map(|i| i.to_string()).collect(),
            version.revision,
        ),
        other => panic!("not a delta: {other:?}"),
    }
}

pub(crate) fn refused() -> GatewayError {
    GatewayError::Unreachable {
        endpoint: "e".into(),
        reason: "refused".into(),
    }
}

pub(crate) fn timeout() -> GatewayError {
    GatewayError::Timeout {
        endpoint: "e".into(),
        timeout: Duration::from_secs(1),
    }
}

/// Ranges at `rev` and opens the watch at `t`: the machine is live.
pub(crate) fn live_at(m: &mut WatchMachine, rev: i64, kvs: Vec<KeyValue>, t: Instant) {
    m.start();
    m.on_range(&range(rev, kvs), t);
    m.on_opened(t);
    assert_eq!(m.on_message(&created(rev, 2), t).next, Next::Continue);
}

#[test]
fn range_replaces_state_and_watches_from_the_next_revision() {
    let (mut m, stats) = machine();
    let t = Instant::now();
    assert_eq!(m.start(), Step::next(Next::Range));
    let (a, b) = (inst("a"), inst("b"));
    let s = m.on_range(&range(7, vec![kv(&a, 3), kv(&b, 5)]), t);
    assert_eq!(s.next, Next::Watch { from: 8 });
    assert_eq!(ids(&s, &m), vec!["a:80", "b:80"]);
    let s = m.on_range(&range(9, vec![kv(&b, 5)]), t);
    assert_eq!(ids(&s, &m), vec!["b:80"]);
    assert_eq!(m.last_revision(), 9);
    // The second range is a re-read: `a` gone is one missed notification.
    let st = stats.snapshot();
    assert_eq!((st.rereads, st.missed_notifications), (1, 1));
}

#[test]
fn events_apply_in_order_advance_the_revision_and_skip_duplicates() {
    let (mut m, _) = machine();
    let t = Instant::now();
    let (a, b) = (inst("a"), inst("b"));
    live_at(&mut m, 7, vec![kv(&a, 3)], t);
    // One batch with two revisions; the header revision is the store's.
    let s = m.on_message(
        &events(
            20,
            vec![
                (EventType::Put, kv(&b, 8)),
                (EventType::Delete, raw("/p/services/web/a:80", b"", 9)),
            ],
        ),
        t,
    );
    assert_eq!(s.next, Next::Continue);
    assert_eq!(ids(&s, &m), vec!["b:80"]);
    // One delta with only what changed, at the last event's revision.
    assert_eq!(delta(&s), (vec!["b:80".into()], vec!["a:80".into()], 9));
    assert_eq!(m.last_revision(), 9);
    // A replay of revision 8 changes nothing and yields nothing.
    let s = m.on_message(&events(20, vec![(EventType::Put, kv(&a, 8))]), t);
    assert_eq!(s.event, None);
    assert_eq!(m.snapshot().len(), 1);
}

#[test]
fn progress_notify_advances_the_revision_without_a_snapshot() {
    let (mut m, _) = machine();
    let t = Instant::now();
    live_at(&mut m, 7, vec![], t);
    let progress = WatchResponse {
        header: header(25, 2),
        ..WatchResponse::default()
    };
    assert_eq!(m.on_message(&progress, t), Step::next(Next::Continue));
    assert_eq!(m.last_revision(), 25);
}

#[test]
fn compaction_cancel_demands_a_full_resync() {
    let (mut m, stats) = machine();
    let t = Instant::now();
    live_at(&mut m, 7, vec![kv(&inst("a"), 3)], t);
    let cancel = WatchResponse {
        header: ResponseHeader {
            revision: 0,
            ..header(0, 2)
        },
        canceled: true,
        compact_revision: 20,
        ..WatchResponse::default()
    };
    let s = m.on_message(&cancel, t);
    // The resync is a failure on the retry schedule: the range comes after
    // the first backoff step, not at once.
    assert_eq!(s, Step::next(Next::Wait));
    assert_eq!(stats.snapshot().resyncs, 1);
    resyncs_after(&mut m, t, Duration::from_millis(250));
    let s = m.on_range(&range(31, vec![]), t);
    assert_eq!(s.next, Next::Watch { from: 32 });
    assert!(
        matches!(&s.event, Some(RegistryEvent::Reset { version, items: instances })
            if instances.is_empty() && version.revision == 31),
        "{s:?}"
    );
    let st = stats.snapshot();
    assert_eq!((st.resyncs, st.rereads, st.missed_notifications), (1, 0, 1));
}

/// The machine waits (stream dropped) and ranges exactly `delay` after `t`.
fn resyncs_after(m: &mut WatchMachine, t: Instant, delay: Duration) {
    assert_eq!(m.probe_need(), ProbeNeed::Nothing, "no probe shortcut");
    assert_eq!(m.next_wake(), Some(t + delay));
    assert_eq!(m.on_timer(t + delay).next, Next::Range);
}

#[test]
fn a_wiped_or_foreign_store_is_detected_on_created() {
    let t = Instant::now();
    // Revision behind the last one seen.
    let (mut m, stats) = machine();
    m.on_range(&range(50, vec![kv(&inst("a"), 3)]), t);
    m.on_opened(t);
    let ms250 = Duration::from_millis(250);
    assert_eq!(m.on_message(&created(1, 2), t).next, Next::Wait);
    resyncs_after(&mut m, t, ms250);
    // Same revision range but a lower raft term (wiped, then written to).
    let (mut m2, _) = machine();
    live_at(&mut m2, 5, vec![], t);
    m2.on_message(&created(5, 7), t);
    assert_eq!(m2.on_message(&created(9, 3), t).next, Next::Wait);
    resyncs_after(&mut m2, t, ms250);
    // Another cluster.
    let (mut m3, _) = machine();
    m3.on_range(&range(5, vec![]), t);
    m3.on_opened(t);
    let mut c = created(9, 3);
    c.header.cluster_id = 7;
    assert_eq!(m3.on_message(&c, t).next, Next::Wait);
    resyncs_after(&mut m3, t, ms250);
    // A normal resume after a restart: same cluster, revision ahead, term up.
    assert_eq!(
        m.on_range(&range(3, vec![]), t).next,
        Next::Watch { from: 4 }
    );
    m.on_opened(t);
    assert_eq!(m.on_message(&created(4, 3), t).next, Next::Continue);
    assert_eq!(stats.snapshot().resyncs, 1);
}

#[test]
fn a_wiped_store_found_by_a_re_read_counts_as_a_resync_with_its_missed_notifications() {
    let (mut m, stats) = machine();
    let t = Instant::now();
    let (a, b, c) = (inst("a"), inst("b"), inst("c"));
    live_at(&mut m, 40, vec![kv(&a, 3), kv(&b, 4)], t);
    m.on_interrupted(&Interruption::Ended, t);
    // The new store holds only c, at a lower revision: resync, 3 missed.
    let s = m.on_range(&range(12, vec![kv(&c, 2)]), t);
    assert_eq!(ids(&s, &m), vec!["c:80"]);
    let st = stats.snapshot();
    assert_eq!((st.resyncs, st.missed_notifications), (1, 3));
    // Written past the old revision: the same-cluster re-read still fixes
    // the state and counts what differed.
    let (mut m, stats) = machine();
    live_at(&mut m, 40, vec![kv(&a, 3), kv(&b, 4)], t);
    m.on_interrupted(&Interruption::Ended, t);
    let s = m.on_range(&range(60, vec![kv(&c, 2)]), t);
    assert_eq!(ids(&s, &m), vec!["c:80"]);
    let st = stats.snapshot();
    assert_eq!((st.rereads, st.missed_notifications), (1, 3));
}

#[test]
fn invalid_records_are_skipped_counted_and_evict_a_previously_good_instance() {
    let (mut m, stats) = machine();
    let t = Instant::now();
    let (a, b) = (inst("a"), inst("b"));
    let foreign = ServiceInstance::new("db", "c", 80);
    let s = m.on_range(
        &range(
            9,
            vec![
                kv(&a, 3),
                raw("/p/services/web/x", b"{not json", 4),
                raw("/p/services/web/y", br#"{"id":"y","app":"web"}"#, 5),
                raw(
                    "/p/services/web/c:80",
                    &serde_json::to_vec(&foreign).unwrap(),
                    6,
                ),
                raw(
                    "/p/services/web/z/extra",
                    &serde_json::to_vec(&b).unwrap(),
                    7,
                ),
                kv(&b, 8),
            ],
        ),
        t,
    );
    assert_eq!(ids(&s, &m), vec!["a:80", "b:80"]);
    assert_eq!(stats.snapshot().invalid_records, 4);
    m.on_opened(t);
    // The good record of `a` is overwritten with garbage: `a` goes away.
    let s = m.on_message(
        &events(
            10,
            vec![(EventType::Put, raw("/p/services/web/a:80", b"garbage", 10))],
        ),
        t,
    );
    assert_eq!(ids(&s, &m), vec!["b:80"]);
    assert_eq!(stats.snapshot().invalid_records, 5);
    assert_eq!(m.last_revision(), 10);
}

#[test]
fn events_sharing_one_revision_all_apply() {
    let (mut m, _) = machine();
    let t = Instant::now();
    let (a, b) = (inst("a"), inst("b"));
    live_at(&mut m, 7, vec![kv(&a, 3), kv(&b, 5)], t);
    let s = m.on_message(
        &events(
            8,
            vec![
                (EventType::Delete, raw("/p/services/web/a:80", b"", 8)),
                (EventType::Delete, raw("/p/services/web/b:80", b"", 8)),
            ],
        ),
        t,
    );
    assert_eq!(
        ids(&s, &m),
        Vec::<String>::new(),
        "both deletes of revision 8 apply"
    );
}

#[test]
fn impossible_revisions_never_overflow_and_force_a_re_read() {
    let t = Instant::now();
    let secs = Duration::from_secs;
    // A range at i64::MAX is a failed range, retried at the backoff cap.
    let (mut m, _) = machine();
    m.start();
    let s = m.on_range(&range(i64::MAX, vec![kv(&inst("a"), 3)]), t);
    assert_eq!(s.next, Next::Wait);
    assert_eq!(s.event, None);
    // Persistent: the next range waits for the cap (a probe may come first).
    assert_eq!(m.on_timer(t + secs(9)).next, Next::Continue);
    assert_eq!(m.on_timer(t + secs(10)).next, Next::Range);
    for bad in [0, -5, i64::MIN] {
        assert_eq!(m.on_range(&range(bad, vec![]), t).next, Next::Wait);
    }
    // Events, progress and created headers at i64::MAX or past the header
    // break the stream and owe a re-read; no state changes.
    let bad_messages = [
        events(i64::MAX, vec![(EventType::Put, kv(&inst("b"), i64::MAX))]),
        events(9, vec![(EventType::Put, kv(&inst("b"), 12))]),
        events(9, vec![(EventType::Put, kv(&inst("b"), -1))]),
        WatchResponse {
            header: header(i64::MAX, 2),
            ..WatchResponse::default()
        },
        created(i64::MAX, 2),
    ];
    for msg in bad_messages {
        let (mut m, _) = machine();
        live_at(&mut m, 7, vec![kv(&inst("a"), 3)], t);
        let s = m.on_message(&msg, t);
        assert_eq!(s.next, Next::Wait, "{msg:?}");
        assert_eq!(m.snapshot().len(), 1);
        assert_eq!(m.last_revision(), 7);
        // The shared prober finds etcd answering: the re-read runs at once.
        assert_eq!(m.probe_need(), ProbeNeed::Answer, "{msg:?}");
        let s = m.on_answered(t + secs(1));
        assert_eq!(s.next, Next::Range, "{msg:?}");
    }
    // An event at the largest resumable revision applies; no overflow.
    let (mut m, _) = machine();
    live_at(&mut m, 7, vec![], t);
    let top = i64::MAX - 1;
    let s = m.on_message(&events(top, vec![(EventType::Put, kv(&inst("b"), top))]), t);
    assert_eq!(ids(&s, &m), vec!["b:80"]);
    m.on_interrupted(&Interruption::Ended, t);
    let s = m.on_timer(t + Duration::from_millis(250));
    assert_eq!(s.next, Next::Watch { from: i64::MAX });
}

#[test]
fn a_stream_error_is_an_interruption_like_any_other() {
    let (mut m, stats) = machine();
    let t = Instant::now();
    live_at(&mut m, 7, vec![], t);
    let sigterm = WatchError::Server(StreamError {
        grpc_code: 14,
        message: "transport is closing".into(),
        ..StreamError::default()
    });
    let s = m.on_interrupted(&Interruption::Stream(sigterm), t);
    assert_eq!(s, Step::next(Next::Wait));
    assert_eq!(stats.snapshot().resumes, 1);
    // A broken stream may hide a wiped store: the resume re-reads in full.
    let s = m.on_timer(t + Duration::from_millis(250));
    assert_eq!(s.next, Next::Range);
}

mod event_tests;

mod timing_tests;

mod sim_tests;
