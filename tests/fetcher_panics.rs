//! Panic containment, message-level on virtual time: a metadata fetcher that
//! panics once (in the call or while polled) costs one failed attempt,
//! counted under "panicked" and shown in the status, and the directory
//! recovers within one backoff step. The cache actor never dies of it.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{DirectoryStatus, EmptyReason, FetchError};
use steadfast_testkit::ScriptedFetcher;

async fn panics_once(in_future: bool) {
    let fetcher = ScriptedFetcher::new();
    let f = fetcher.clone();
    let fx = Fixture::start_full(|b, _| b.fetcher(f));
    let m1 = metadata(APP, 20000, "t1");
    fetcher.serve(m1.clone());
    fetcher.panic_next(1, in_future);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    match dir.status().await.unwrap() {
        DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => {
            assert_eq!(u.attempts, 1);
            assert!(
                matches!(&u.last_error, Some(FetchError::Panicked(m)) if m.contains("scripted panic")),
                "{:?}",
                u.last_error
            );
        }
        other => panic!("expected the panicked attempt in the status, got {other}"),
    }
    let kinds = fx.engine.fetch_failures_by_kind();
    assert!(kinds.contains(&("panicked", 1)), "{kinds:?}");
    // One backoff step: 1 s + at most 25 % jitter.
    let v = wait_for(&dir, "recovered", Duration::from_millis(1300), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![20000]);
    assert_eq!(fetcher.calls(&m1.revision), 2);
    let s = fx.engine.stats();
    assert_eq!(
        (s.restarts, s.handler_panics),
        (0, 0),
        "nothing died: {s:?}"
    );
    assert_eq!(s.flights_in_flight, 0);
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn a_fetcher_that_panics_once_in_the_call_recovers_within_one_backoff_step() {
    tokio::time::pause();
    panics_once(false).await;
}

#[actix_rt::test]
async fn a_fetcher_that_panics_once_while_polled_recovers_within_one_backoff_step() {
    tokio::time::pause();
    panics_once(true).await;
}
