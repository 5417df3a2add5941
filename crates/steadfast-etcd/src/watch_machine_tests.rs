//! Unit tests of the [`WatchMachine`] rules, without etcd.

use super::*;
use crate::wire::{Event, StreamError};

const CLUSTER: u64 = 42;

fn machine(unavailable_after: u32) -> (WatchMachine, Arc<EtcdStats>) {
    let stats = Arc::new(EtcdStats::default());
    let m = WatchMachine::new(
        KeyLayout::new("/p"),
        "web",
        unavailable_after,
        stats.clone(),
    );
    (m, stats)
}

fn inst(host: &str) -> ServiceInstance {
    ServiceInstance::new("web", host, 80)
}

fn kv(i: &ServiceInstance, rev: i64) -> KeyValue {
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

fn header(rev: i64, term: u64) -> ResponseHeader {
    ResponseHeader {
        cluster_id: CLUSTER,
        member_id: 1,
        revision: rev,
        raft_term: term,
    }
}

fn range(rev: i64, kvs: Vec<KeyValue>) -> RangeResponse {
    RangeResponse {
        header: header(rev, 2),
        count: kvs.len() as i64,
        kvs,
        more: false,
    }
}

fn created(rev: i64, term: u64) -> WatchResponse {
    WatchResponse {
        header: header(rev, term),
        created: true,
        ..WatchResponse::default()
    }
}

fn events(rev: i64, evs: Vec<(EventType, KeyValue)>) -> WatchResponse {
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

fn ids(s: &Step) -> Vec<String> {
    s.snapshot
        .as_ref()
        .expect("a snapshot")
        .iter()
        .map(|i| i.id.clone())
        .collect()
}

#[test]
fn range_replaces_state_and_watches_from_the_next_revision() {
    let (mut m, _) = machine(5);
    let (a, b) = (inst("a"), inst("b"));
    let s = m.on_range(&range(7, vec![kv(&a, 3), kv(&b, 5)]));
    assert_eq!(s.next, Next::Watch { from: 8 });
    assert_eq!(ids(&s), vec!["a:80", "b:80"]);
    let s = m.on_range(&range(9, vec![kv(&b, 5)]));
    assert_eq!(ids(&s), vec!["b:80"]);
    assert_eq!(m.last_revision(), 9);
}

#[test]
fn events_apply_in_order_advance_the_revision_and_skip_duplicates() {
    let (mut m, _) = machine(5);
    let (a, b) = (inst("a"), inst("b"));
    m.on_range(&range(7, vec![kv(&a, 3)]));
    assert_eq!(m.on_message(&created(7, 2)), Step::next(Next::Continue));
    // One batch with two revisions; the header revision is the store's.
    let s = m.on_message(&events(
        20,
        vec![
            (EventType::Put, kv(&b, 8)),
            (EventType::Delete, raw("/p/services/web/a:80", b"", 9)),
        ],
    ));
    assert_eq!(s.next, Next::Continue);
    assert_eq!(ids(&s), vec!["b:80"]);
    assert_eq!(m.last_revision(), 9);
    // A replay of revision 8 changes nothing and yields nothing.
    let s = m.on_message(&events(20, vec![(EventType::Put, kv(&a, 8))]));
    assert_eq!(s.snapshot, None);
    assert_eq!(m.snapshot().len(), 1);
}

#[test]
fn progress_notify_advances_the_revision_without_a_snapshot() {
    let (mut m, _) = machine(5);
    m.on_range(&range(7, vec![]));
    m.on_message(&created(7, 2));
    let progress = WatchResponse {
        header: header(25, 2),
        ..WatchResponse::default()
    };
    assert_eq!(m.on_message(&progress), Step::next(Next::Continue));
    assert_eq!(m.last_revision(), 25);
}

#[test]
fn compaction_cancel_demands_a_full_resync() {
    let (mut m, stats) = machine(5);
    m.on_range(&range(7, vec![kv(&inst("a"), 3)]));
    m.on_message(&created(30, 2));
    let cancel = WatchResponse {
        header: ResponseHeader {
            revision: 0,
            ..header(0, 2)
        },
        canceled: true,
        compact_revision: 20,
        ..WatchResponse::default()
    };
    let s = m.on_message(&cancel);
    assert_eq!(s, Step::next(Next::Range));
    assert_eq!(stats.snapshot().resyncs, 1);
    let s = m.on_range(&range(31, vec![]));
    assert_eq!(s.next, Next::Watch { from: 32 });
    assert_eq!(s.snapshot, Some(vec![]));
}

#[test]
fn a_wiped_or_foreign_store_is_detected_on_created() {
    // Revision behind the last one seen.
    let (mut m, stats) = machine(5);
    m.on_range(&range(50, vec![kv(&inst("a"), 3)]));
    assert_eq!(m.on_message(&created(1, 2)).next, Next::Range);
    // Same revision range but a lower raft term (wiped, then written to).
    let (mut m2, _) = machine(5);
    m2.on_range(&range(5, vec![]));
    m2.on_message(&created(5, 7));
    assert_eq!(m2.on_message(&created(9, 3)).next, Next::Range);
    // Another cluster.
    let (mut m3, _) = machine(5);
    m3.on_range(&range(5, vec![]));
    let mut c = created(9, 3);
    c.header.cluster_id = 7;
    assert_eq!(m3.on_message(&c).next, Next::Range);
    // A normal resume after a restart: same cluster, revision ahead, term up.
    assert_eq!(m.on_range(&range(3, vec![])).next, Next::Watch { from: 4 });
    assert_eq!(m.on_message(&created(4, 3)).next, Next::Continue);
    assert_eq!(stats.snapshot().resyncs, 1);
}

#[test]
fn interruptions_back_off_resume_from_last_plus_one_and_give_up_at_the_threshold() {
    let (mut m, stats) = machine(3);
    m.on_range(&range(7, vec![]));
    m.on_message(&events(8, vec![(EventType::Put, kv(&inst("a"), 8))]));
    let resume = Resume::Watch { from: 9 };
    let s = m.on_interrupted(&Interruption::Ended);
    assert_eq!(
        s.next,
        Next::Backoff {
            attempt: 0,
            then: resume
        }
    );
    assert_eq!(s.give_up, None);
    let sigterm = WatchError::Server(StreamError {
        grpc_code: 14,
        message: "transport is closing".into(),
        ..StreamError::default()
    });
    let s = m.on_interrupted(&Interruption::Stream(sigterm));
    assert_eq!(
        s.next,
        Next::Backoff {
            attempt: 1,
            then: resume
        }
    );
    let refused = GatewayError::Unreachable {
        endpoint: "e".into(),
        reason: "refused".into(),
    };
    let s = m.on_interrupted(&Interruption::Open(refused));
    assert_eq!(
        s.next,
        Next::Backoff {
            attempt: 2,
            then: resume
        }
    );
    assert!(matches!(s.give_up, Some(RegistryError::Unavailable(_))));
    assert_eq!(stats.snapshot().resumes, 3);
    // A created answer proves etcd is back: the count restarts.
    m.on_message(&created(9, 3));
    assert_eq!(m.failures(), 0);
    let s = m.on_interrupted(&Interruption::Idle);
    assert_eq!(
        s.next,
        Next::Backoff {
            attempt: 0,
            then: resume
        }
    );
}

#[test]
fn a_failed_range_is_retried_as_a_range() {
    let (mut m, _) = machine(5);
    let e = GatewayError::Timeout {
        endpoint: "e".into(),
        timeout: std::time::Duration::from_secs(1),
    };
    let s = m.on_range_failed(&e);
    assert_eq!(
        s.next,
        Next::Backoff {
            attempt: 0,
            then: Resume::Range
        }
    );
    // Before any range, an interruption also resumes with a range.
    let s = m.on_interrupted(&Interruption::Ended);
    assert_eq!(
        s.next,
        Next::Backoff {
            attempt: 1,
            then: Resume::Range
        }
    );
}

#[test]
fn invalid_records_are_skipped_counted_and_evict_a_previously_good_instance() {
    let (mut m, stats) = machine(5);
    let (a, b) = (inst("a"), inst("b"));
    let foreign = ServiceInstance::new("db", "c", 80);
    let s = m.on_range(&range(
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
    ));
    assert_eq!(ids(&s), vec!["a:80", "b:80"]);
    assert_eq!(stats.snapshot().invalid_records, 4);
    // The good record of `a` is overwritten with garbage: `a` goes away.
    let s = m.on_message(&events(
        10,
        vec![(EventType::Put, raw("/p/services/web/a:80", b"garbage", 10))],
    ));
    assert_eq!(ids(&s), vec!["b:80"]);
    assert_eq!(stats.snapshot().invalid_records, 5);
    assert_eq!(m.last_revision(), 10);
}

#[test]
fn events_sharing_one_revision_all_apply() {
    let (mut m, _) = machine(5);
    let (a, b) = (inst("a"), inst("b"));
    m.on_range(&range(7, vec![kv(&a, 3), kv(&b, 5)]));
    m.on_message(&created(7, 2));
    let s = m.on_message(&events(
        8,
        vec![
            (EventType::Delete, raw("/p/services/web/a:80", b"", 8)),
            (EventType::Delete, raw("/p/services/web/b:80", b"", 8)),
        ],
    ));
    assert_eq!(
        ids(&s),
        Vec::<String>::new(),
        "both deletes of revision 8 apply"
    );
}
