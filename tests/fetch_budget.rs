//! The fetch budget, message-level on virtual time: hedged candidates under
//! one whole-fetch deadline, failures counted as they happen, a bounded
//! number of provider calls per retry, and a bound per source of
//! `FallbackFetcher`.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{DirectoryStatus, EmptyReason, FallbackFetcher, FetchError, Unresolved};
use steadfast_testkit::ScriptedFetcher;
use tokio::time::Instant;

const HEDGE: Duration = Duration::from_millis(250);
const DEADLINE: Duration = Duration::from_secs(5);

/// An engine on the embedded registry fetching through `fetcher`, on the
/// clock the test paused.
fn engine_with(fetcher: impl steadfast::MetadataFetcher + Clone) -> Fixture {
    Fixture::start_full(|b, _| b.fetcher(fetcher.clone()))
}

fn unresolved(status: &DirectoryStatus) -> Option<&Unresolved> {
    match status {
        DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => Some(u),
        _ => None,
    }
}

fn failures_of(fx: &Fixture, kind: &str) -> u64 {
    let kinds = fx.engine.fetch_failures_by_kind();
    kinds
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(0, |(_, n)| *n)
}

#[actix_rt::test]
async fn nine_of_ten_hung_instances_resolve_within_the_hedge_delay() {
    tokio::time::pause();
    let fetcher = ScriptedFetcher::new();
    let fx = engine_with(fetcher.clone());
    let m1 = metadata(APP, 20000, "t1");
    fetcher.serve(m1.clone());
    // Whatever order the candidates are tried in, the first nine hang.
    fetcher.hang_next(&m1.revision, 9);
    let dir = fx.subscribe().await;
    let instances = (0..10).map(|i| instance(&m1, 8001 + i)).collect();
    let t0 = Instant::now();
    fx.registry.set_instances(APP, instances);
    let v = wait_for(&dir, "ready", HEDGE + Duration::from_millis(20), |v| {
        v.status.is_ready()
    })
    .await;
    let took = t0.elapsed();
    println!("9 of 10 hung: resolved after {took:?} (hedge delay {HEDGE:?})");
    assert!(
        took >= HEDGE,
        "the nine hung calls were not raced: {took:?}"
    );
    assert_eq!(v.endpoints.len(), 10);
    assert_eq!(fetcher.calls(&m1.revision), 10);
    let s = fx.engine.stats();
    assert_eq!((s.fetch_attempts, s.fetch_hedged), (10, 9), "{s:?}");
    assert_eq!(s.fetch_failures, 0, "overtaken calls are not failures");
    assert_eq!(s.flights_in_flight, 0, "the hung calls were dropped");
}

#[actix_rt::test]
async fn all_hung_instances_report_the_first_failure_at_the_deadline() {
    tokio::time::pause();
    let fetcher = ScriptedFetcher::new();
    let fx = engine_with(fetcher.clone());
    let m1 = metadata(APP, 20000, "t1");
    fetcher.block(&m1.revision);
    let dir = fx.subscribe().await;
    let t0 = Instant::now();
    fx.registry
        .set_instances(APP, (0..10).map(|i| instance(&m1, 8001 + i)).collect());
    advance(DEADLINE - Duration::from_millis(100)).await;
    let status = dir.status().await.unwrap();
    assert_eq!(unresolved(&status).map(|u| u.attempts), Some(0), "{status}");
    let v = wait_for(&dir, "first failure", Duration::from_millis(200), |v| {
        unresolved(&v.status).is_some_and(|u| u.attempts == 1)
    })
    .await;
    let took = t0.elapsed();
    println!("10 of 10 hung: first failure reported after {took:?}");
    assert!(took >= DEADLINE && took <= DEADLINE + Duration::from_millis(20));
    let u = unresolved(&v.status).unwrap();
    assert_eq!(u.last_error, Some(FetchError::Timeout));
    assert_eq!(failures_of(&fx, "timeout"), 10, "each hung call counted");
    let s = fx.engine.stats();
    assert_eq!((s.fetch_attempts, s.fetch_deadlines), (10, 1), "{s:?}");
    assert_eq!(fetcher.calls(&m1.revision), 10);
}

/// Provider calls per retry of 20 failing revisions of 10 instances each
/// over 10 virtual minutes; `hang` makes every call hang instead of
/// failing at once. Returns (first-attempt calls, retry calls, retries).
async fn calls_per_retry(hang: bool) -> (usize, usize, u64) {
    let fetcher = ScriptedFetcher::new();
    let fx = engine_with(fetcher.clone());
    let _dir = fx.subscribe().await;
    let mut instances = Vec::new();
    for r in 0..20u16 {
        let m = metadata(APP, 20000 + r, &format!("t{r}"));
        if hang {
            fetcher.block(&m.revision);
        } else {
            fetcher.fail_always_with(&m.revision, FetchError::Unreachable("refused".into()));
        }
        instances.extend((0..10).map(|i| instance(&m, 8000 + r * 10 + i)));
    }
    let ids: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
    fx.registry.set_instances(APP, instances);
    // Every first attempt ends before the first retry is due (1 s).
    advance(Duration::from_millis(if hang { 5100 } else { 500 })).await;
    let first = fetcher.total_calls();
    let flights = fx.engine.stats().flights_started;
    assert_eq!(flights, 20, "one flight per revision so far");
    advance(Duration::from_secs(600)).await;
    let retries = fx.engine.stats().flights_started - flights;
    let retry_calls = fetcher.total_calls() - first;
    for id in &ids {
        assert!(fetcher.calls_to(id) >= 2, "retries rotate through {id}");
    }
    fx.engine.shutdown().await;
    (first, retry_calls, retries)
}

#[actix_rt::test]
async fn a_retry_costs_at_most_two_provider_calls() {
    tokio::time::pause();
    for (hang, what) in [(false, "failing at once"), (true, "hung")] {
        let (first, calls, retries) = calls_per_retry(hang).await;
        let per_retry = calls as f64 / retries as f64;
        println!(
            "20 revisions x 10 instances {what}, 10 virtual minutes: {first} first-attempt calls, \
             {calls} calls in {retries} retries, {} calls in all",
            first + calls
        );
        println!("provider calls per retry = {per_retry:.2}");
        assert_eq!(first, 200, "a fresh revision tries every instance");
        assert!(
            retries >= 20 * 15,
            "the revisions are still retried: {retries}"
        );
        assert!(per_retry <= 2.0, "{per_retry}");
    }
}

#[actix_rt::test]
async fn a_hung_metadata_report_leaves_time_for_the_http_fallback() {
    tokio::time::pause();
    let (report, http) = (ScriptedFetcher::new(), ScriptedFetcher::new());
    let m1 = metadata(APP, 20000, "t1");
    report.block(&m1.revision);
    http.serve(m1.clone());
    let fx = engine_with(FallbackFetcher::new(report.clone(), http.clone()));
    let dir = fx.subscribe().await;
    let t0 = Instant::now();
    fx.registry.put(instance(&m1, 8001));
    wait_for(&dir, "ready from the fallback", DEADLINE, |v| {
        v.status.is_ready()
    })
    .await;
    let took = t0.elapsed();
    println!("hung report, HTTP fallback: resolved after {took:?}");
    assert!(took >= Duration::from_secs(1) && took < Duration::from_millis(1100));
    assert_eq!((report.total_calls(), http.total_calls()), (1, 1));
    assert_eq!(fx.engine.stats().fetch_failures, 0);
}
