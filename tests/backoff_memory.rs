//! Backoff memory, message-level on virtual time: a revision that leaves the
//! snapshot and comes back resumes its retry schedule instead of starting
//! over, so a flapping instance does not turn into a fetch storm.

mod common;

use std::time::Duration;

use common::*;

/// Fetches of the failing revision while instance :8001 flips between a
/// good and a failing revision every 500 ms for 60 s.
async fn flapping_fetches(seed: u64) -> usize {
    let fx = Fixture::start_paused(|b| b.seed(seed));
    let good = metadata(APP, 20000, "good");
    let bad = metadata(APP, 20001, "bad");
    fx.fetcher.serve(good.clone());
    fx.fetcher.serve(bad.clone());
    fx.fetcher.fail_always(&bad.revision);
    let dir = fx.subscribe().await;
    for flip in 0..120 {
        let m = if flip % 2 == 0 { &bad } else { &good };
        fx.registry.put(instance(m, 8001));
        advance(Duration::from_millis(500)).await;
    }
    let calls = fx.fetcher.calls(&bad.revision);
    assert_eq!(
        fx.fetcher.calls(&good.revision),
        1,
        "the good one is cached"
    );
    assert!(dir.view().await.is_ok());
    fx.engine.shutdown().await;
    calls
}

#[actix_rt::test]
async fn a_flapping_instance_fetches_its_failing_revision_at_most_12_times_a_minute() {
    tokio::time::pause();
    let mut runs = Vec::new();
    for seed in 1..=4 {
        runs.push(flapping_fetches(seed).await);
    }
    println!("flapping every 500 ms for 60 s: fetches of the failing revision = {runs:?}");
    assert!(runs.iter().all(|n| *n <= 12), "{runs:?}");
    assert!(runs.iter().all(|n| *n >= 5), "still retried: {runs:?}");
}

#[actix_rt::test]
async fn a_revision_seen_for_the_first_time_starts_at_the_initial_delay() {
    let fx = Fixture::start();
    let old = metadata(APP, 20000, "old");
    let new = metadata(APP, 20001, "new");
    fx.fetcher.serve(old.clone());
    fx.fetcher.serve(new.clone());
    fx.fetcher.fail_always(&old.revision);
    fx.fetcher.fail_next(&new.revision, 1);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&old, 8001));
    // Let the old revision's backoff grow to 8 s.
    advance(Duration::from_secs(10)).await;
    assert!(fx.fetcher.calls(&old.revision) >= 4);
    // A new revision on another instance: its one failure is retried after
    // the initial 1 s (+25 %), not after the old one's grown delay.
    fx.registry.put(instance(&new, 8002));
    settle().await;
    assert_eq!(fx.fetcher.calls(&new.revision), 1);
    let v = wait_for(&dir, "new revision", Duration::from_millis(1300), |v| {
        ports(v) == vec![20001]
    })
    .await;
    assert_eq!(fx.fetcher.calls(&new.revision), 2);
    assert!(v.status.is_ready());
}
