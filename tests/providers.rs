//! Several providers, really empty provider sets, registry watch failures,
//! and the retry load bound under a long outage.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{DirectoryStatus, EmptyReason, Reference};

#[actix_rt::test]
async fn one_failing_revision_never_hides_a_healthy_provider() {
    let fx = Fixture::start();
    let ok = metadata(APP, 20000, "ok");
    let bad = metadata(APP, 20001, "bad");
    fx.fetcher.serve(ok.clone());
    fx.fetcher.serve(bad.clone());
    fx.fetcher.fail_always_with(
        &bad.revision,
        steadfast::FetchError::Malformed("bad json".into()),
    );
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&bad, 8002));
    fx.registry.put(instance(&ok, 8001));
    for _ in 0..10 {
        settle().await;
        let v = dir.view().await.unwrap();
        assert_eq!(ports(&v), vec![20000], "healthy provider served throughout");
        match v.status {
            DirectoryStatus::Ready { degraded, .. } => {
                assert_eq!(degraded[0].1.revisions, vec![bad.revision.clone()])
            }
            other => panic!("expected degraded ready, got {other:?}"),
        }
        advance(Duration::from_secs(7)).await;
    }
    let kinds = fx.engine.fetch_failures_by_kind();
    let malformed = kinds.iter().find(|(k, _)| *k == "malformed").unwrap().1;
    assert!(malformed >= 2, "bad input is counted by kind: {kinds:?}");
    assert_eq!(malformed, fx.engine.stats().fetch_failures);
}

#[actix_rt::test]
async fn really_empty_provider_set_empties_at_once_without_gone_addresses() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    let dir = fx.subscribe().await;
    let i1 = instance(&m1, 8001);
    fx.registry.put(i1.clone());
    wait_for(&dir, "ready", Duration::from_millis(50), |v| {
        v.status.is_ready()
    })
    .await;

    fx.registry.remove(APP, &i1.id);
    settle().await;
    let v = dir.view().await.unwrap();
    assert!(v.endpoints.is_empty(), "no gone address served");
    assert_eq!(v.status, DirectoryStatus::Empty(EmptyReason::RegistryEmpty));
    assert_eq!(
        dir.select()
            .map(|l| l.endpoint().clone())
            .unwrap_err()
            .reason,
        steadfast::NoEndpointReason::RegistryEmpty
    );
    advance(Duration::from_secs(60)).await;
    assert!(dir.view().await.unwrap().endpoints.is_empty());
}

#[actix_rt::test]
async fn watch_failure_resubscribes_with_backoff_and_fresh_snapshot_wins() {
    let fx = Fixture::start();
    let (m1, m2, dir) = fx.ready_on_r1().await;
    let watches = fx.registry.watch_calls();

    // The watch breaks and the next two re-subscribes fail; meanwhile the
    // provider set changes with nobody watching.
    fx.registry.fail_next_watches(2);
    fx.registry.error_watches(APP);
    fx.registry.set_instances(APP, vec![instance(&m2, 8002)]);
    settle().await;
    assert_eq!(
        ports(&dir.view().await.unwrap()),
        vec![20000],
        "old state kept while down"
    );
    assert!(fx.engine.stats().watch_failures >= 1);
    advance(Duration::from_millis(900)).await;
    assert_eq!(
        fx.registry.watch_calls(),
        watches,
        "no re-subscribe before the backoff"
    );

    // 1 s, 2 s, 4 s (+jitter): the third re-subscribe succeeds.
    let v = wait_for(&dir, "fresh snapshot", Duration::from_secs(10), |v| {
        ports(v) == vec![20001]
    })
    .await;
    assert!(v.status.is_ready());
    assert_eq!(fx.registry.watch_calls(), watches + 3);
    assert_eq!(fx.engine.stats().watches_active, 1);
    // Clean end of stream is handled the same way.
    fx.registry.end_watches(APP);
    fx.registry.put(instance(&m1, 8001));
    wait_for(&dir, "after clean end", Duration::from_secs(3), |v| {
        ports(v) == vec![20000, 20001]
    })
    .await;
}

#[actix_rt::test]
async fn registry_outage_keeps_endpoints_and_says_they_are_stale() {
    let fx = Fixture::start();
    let (_m1, _m2, dir) = fx.ready_on_r1().await;
    let stale = |v: &steadfast::DirectoryView| match &v.status {
        DirectoryStatus::Ready { stale_since, .. } => stale_since.is_some(),
        DirectoryStatus::Empty(_) => false,
    };
    assert!(!stale(&dir.view().await.unwrap()));

    fx.registry.fail_next_watches(3);
    fx.registry.error_watches(APP);
    settle().await;
    let v = dir.view().await.unwrap();
    assert_eq!(
        ports(&v),
        vec![20000],
        "an outage never empties the directory"
    );
    assert!(
        stale(&v),
        "but it says the endpoints may be stale: {:?}",
        v.status
    );
    assert!(v.status.to_string().contains("registry unreachable"));

    // Back after 1 + 2 + 4 + 8 s of backoff (+jitter): fresh, not stale.
    let v = wait_for(&dir, "fresh again", Duration::from_secs(20), |v| !stale(v)).await;
    assert_eq!(ports(&v), vec![20000]);
    assert_eq!(fx.registry.watcher_count(APP), 1);
}

/// Fetches of one failing revision during a 10-minute outage.
async fn outage_fetches(listeners: usize, seed: u64) -> usize {
    let fx = Fixture::start_paused(|b| b.seed(seed));
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_always(&m1.revision);
    let mut dirs = Vec::new();
    for i in 0..listeners {
        let r = Reference::new(format!("demo.Service{i}"), "tri", [APP]);
        dirs.push(fx.engine.subscribe(r).await.unwrap());
    }
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    advance(Duration::from_secs(600)).await;
    let calls = fx.fetcher.calls(&m1.revision);
    fx.engine.shutdown().await;
    calls
}

/// 50 listeners of one app make exactly the fetches one listener makes, and
/// that is the retry budget: 1 + the retries that fit in 600 s at 1, 2, 4,
/// 8, 16, then 30 s (+0-25 % jitter). At the smallest jitter that is 24; the
/// jitter averages it to 22 or fewer.
#[actix_rt::test]
async fn fifty_listeners_of_one_app_stay_within_the_retry_budget() {
    tokio::time::pause();
    let mut total = 0;
    let seeds = 1..=8u64;
    for seed in seeds.clone() {
        let one = outage_fetches(1, seed).await;
        let fifty = outage_fetches(50, seed).await;
        assert_eq!(
            fifty, one,
            "seed {seed}: listeners share one schedule per revision"
        );
        assert!(
            (20..=24).contains(&fifty),
            "seed {seed}: {fifty} fetches in 10 minutes"
        );
        total += fifty;
    }
    let mean = total as f64 / seeds.count() as f64;
    eprintln!("fetches per revision over seeds: mean {mean}");
    assert!(
        mean <= 22.5,
        "mean fetches per revision in 10 minutes: {mean}"
    );
}
