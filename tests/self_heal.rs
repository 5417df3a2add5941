//! The dubbo-go regression cases: a transient metadata failure heals with
//! no further registry event, gone and superseded revisions stop retrying,
//! and repeated events never stack timers.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{DirectoryStatus, EmptyReason};

#[actix_rt::test]
async fn first_fetch_fails_then_recovers_after_one_backoff_step() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_next(&m1.revision, 1);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;

    let v = dir.view().await.unwrap();
    match &v.status {
        DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => {
            assert_eq!(u.revisions, vec![m1.revision.clone()]);
            assert_eq!(u.attempts, 1);
            assert!(u.last_error.is_some());
        }
        other => panic!("expected unresolved after the failed fetch, got {other:?}"),
    }
    // No further registry event: only the retry timer can heal it, within
    // one backoff step (1 s + at most 25 % jitter).
    let v = wait_for(&dir, "ready", Duration::from_millis(1300), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![20000]);
    assert_eq!(fx.fetcher.calls(&m1.revision), 2);
    assert_eq!(fx.engine.stats().timers_pending, 0);
}

#[actix_rt::test]
async fn instance_removed_while_retried_is_never_fetched_or_re_added() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_always(&m1.revision);
    let dir = fx.subscribe().await;
    let i1 = instance(&m1, 8001);
    fx.registry.put(i1.clone());
    settle().await;
    assert_eq!(fx.fetcher.calls(&m1.revision), 1);
    assert_eq!(fx.engine.stats().timers_pending, 1);

    assert!(fx.registry.remove(APP, &i1.id));
    settle().await;
    assert_eq!(fx.engine.stats().timers_pending, 0, "retry timer cancelled");
    fx.fetcher.heal(&m1.revision);
    advance(Duration::from_secs(300)).await;
    assert_eq!(fx.fetcher.calls(&m1.revision), 1, "no fetch after removal");
    let v = dir.view().await.unwrap();
    assert!(v.endpoints.is_empty());
    assert_eq!(v.status, DirectoryStatus::Empty(EmptyReason::RegistryEmpty));
}

#[actix_rt::test]
async fn superseded_revision_is_fetched_once_and_only_the_latest_appears() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    let m2 = metadata(APP, 20001, "t2");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.serve(m2.clone());
    fx.fetcher.fail_always(&m1.revision);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    assert_eq!(fx.fetcher.calls(&m1.revision), 1);

    // The instance restarts with R2 while R1 waits for its retry.
    fx.registry.put(instance(&m2, 8001));
    let v = wait_for(&dir, "R2 ready", Duration::from_millis(50), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![20001]);
    fx.fetcher.heal(&m1.revision);
    advance(Duration::from_secs(120)).await;
    assert_eq!(fx.fetcher.calls(&m1.revision), 1, "R1 fetched exactly once");
    assert_eq!(ports(&dir.view().await.unwrap()), vec![20001]);
    assert_eq!(fx.engine.stats().timers_pending, 0);
}

#[actix_rt::test]
async fn identical_failing_snapshots_keep_one_pending_retry() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_always(&m1.revision);
    let _dir = fx.subscribe().await;
    let i1 = instance(&m1, 8001);
    for _ in 0..3 {
        fx.registry.put(i1.clone());
        settle().await;
    }
    let stats = fx.engine.stats();
    assert_eq!(stats.timers_pending, 1, "one pending retry");
    assert!(stats.snapshots_received >= 3, "three snapshots arrived");
    assert!(fx.fetcher.calls(&m1.revision) <= 3);
    assert_eq!(fx.fetcher.calls(&m1.revision), 1);
    // The single timer fires once: one more fetch, still one timer.
    advance(Duration::from_millis(1300)).await;
    assert_eq!(fx.fetcher.calls(&m1.revision), 2);
    assert_eq!(fx.engine.stats().timers_pending, 1);
}

#[actix_rt::test]
async fn live_instance_keeps_previous_urls_until_new_revision_resolves() {
    let fx = Fixture::start();
    let (_m1, m2, dir) = fx.ready_on_r1().await;

    fx.fetcher.fail_next(&m2.revision, 3);
    fx.registry.put(instance(&m2, 8001));
    settle().await;
    let v = dir.view().await.unwrap();
    assert_eq!(ports(&v), vec![20000], "last-known-good URLs kept");
    match &v.status {
        DirectoryStatus::Ready { degraded, .. } => {
            assert_eq!(degraded.len(), 1);
            assert_eq!(degraded[0].1.revisions, vec![m2.revision.clone()]);
        }
        other => panic!("expected degraded ready, got {other:?}"),
    }
    // 1 s + 2 s + 4 s (+25 %) later R2 resolves and replaces R1's URLs.
    let v = wait_for(&dir, "R2 URLs", Duration::from_secs(9), |v| {
        ports(v) == vec![20001]
    })
    .await;
    assert!(matches!(v.status, DirectoryStatus::Ready { ref degraded, .. } if degraded.is_empty()));
    assert_eq!(fx.fetcher.calls(&m2.revision), 4);
}

#[actix_rt::test]
async fn a_configured_attempt_limit_is_honoured_and_reported() {
    let fx = Fixture::start_with(|b| b.metadata_max_attempts(3));
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_always(&m1.revision);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    advance(Duration::from_secs(600)).await;
    assert_eq!(
        fx.fetcher.calls(&m1.revision),
        3,
        "gave up after 3 attempts"
    );
    assert_eq!(fx.engine.stats().timers_pending, 0);
    match dir.status().await.unwrap() {
        DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => assert_eq!(u.attempts, 3),
        other => panic!("expected unresolved, got {other:?}"),
    }
}
