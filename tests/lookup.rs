//! One-shot queries (`Engine::instances`) on virtual time: the go-micro
//! cache scenarios with the corrected semantics, the cold-start race, per-app
//! error state, TTL jitter, max staleness, watch answers and call deadlines.
//! Each test prints the load it measured (`--nocapture`).

mod common;

use std::error::Error as _;
use std::time::Duration;

use common::{advance, settle, Fixture, APP};
use futures::future::join_all;
use steadfast::{LookupError, RegistryError, ServiceInstance};
use steadfast_core::{Freshness, Source};
use tokio::time::{sleep, Instant};

fn put(fx: &Fixture, app: &str, port: u16) {
    fx.registry
        .put(ServiceInstance::new(app, "127.0.0.1", port));
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[actix_rt::test]
async fn go_micro_a_registry_down_with_a_copy_serves_it_stale_with_its_age() {
    let fx = Fixture::start();
    put(&fx, APP, 8001);
    let first = fx.engine.instances(APP).await.expect("listed");
    assert_eq!(first.freshness, Freshness::Fresh);
    assert_eq!((first.source, first.instances.len()), (Source::Registry, 1));
    advance(secs(70)).await; // past the TTL (60 s ±10 %)
    fx.registry.set_down(true);
    let calls = fx.registry.list_calls();
    let stale = fx
        .engine
        .instances(APP)
        .await
        .expect("stale copy, not an error");
    let Freshness::Stale { age } = stale.freshness else {
        panic!("flagged stale: {stale:?}");
    };
    assert!(age >= secs(70) && age < secs(71), "{age:?}");
    assert_eq!(
        (stale.source, stale.version),
        (Source::Cache, first.version)
    );
    assert_eq!(stale.instances, first.instances);
    assert_eq!(fx.registry.list_calls(), calls + 1, "one refresh tried");
    // A minute of callers every 100 ms while down (the first one above):
    // stale answers, bounded load.
    let before = calls;
    for _ in 1..600 {
        let a = fx.engine.instances(APP).await.expect("stale copy");
        assert!(!a.freshness.is_fresh());
        sleep(Duration::from_millis(100)).await;
    }
    let made = fx.registry.list_calls() - before;
    println!(
        "registry down, copy held: 600 callers over 60 s -> {made} registry calls, all served \
         the stale copy with its age"
    );
    assert_eq!(made, 12, "one call per 5 s");
    let s = fx.engine.stats();
    assert_eq!(s.lookup_stale_answers, 600, "{s:?}");
}

#[actix_rt::test]
async fn go_micro_b_a_thousand_concurrent_callers_on_a_cold_key_make_one_call() {
    let fx = Fixture::start();
    put(&fx, APP, 8001);
    fx.registry.delay_calls(Duration::from_millis(200));
    let start = Instant::now();
    let answers = join_all((0..1000).map(|_| fx.engine.instances(APP))).await;
    let took = start.elapsed();
    assert_eq!(fx.registry.list_calls(), 1, "exactly one registry call");
    assert_eq!(answers.len(), 1000);
    for a in &answers {
        let a = a.as_ref().expect("every caller gets the result");
        assert_eq!((a.instances.len(), a.freshness), (1, Freshness::Fresh));
        assert_eq!(a.source, Source::Registry);
    }
    println!(
        "1000 concurrent callers on a cold key: {} registry call, all answered after {took:?}",
        fx.registry.list_calls()
    );
    let s = fx.engine.stats();
    assert_eq!((s.lookups, s.lookup_registry_calls), (1000, 1), "{s:?}");
}

#[actix_rt::test]
async fn go_micro_c_no_copy_and_registry_down_one_call_per_interval_the_rest_throttled() {
    let fx = Fixture::start();
    put(&fx, APP, 8001);
    fx.registry.set_down(true);
    let (mut unavailable, mut throttled) = (0, 0);
    for _ in 0..600 {
        match fx.engine.instances(APP).await {
            Err(LookupError::Unavailable { cause, .. }) => {
                assert!(matches!(cause, RegistryError::Unavailable(_)), "{cause}");
                unavailable += 1;
            }
            Err(e @ LookupError::Throttled { retry_after, .. }) => {
                assert!(retry_after <= secs(5));
                assert!(e.source().is_some(), "carries the last registry error");
                throttled += 1;
            }
            other => panic!("never NotFound, never an answer: {other:?}"),
        }
        sleep(Duration::from_millis(100)).await;
    }
    let calls = fx.registry.list_calls();
    println!(
        "registry down, no copy: 600 callers over 60 s -> {calls} registry calls ({unavailable} \
         Unavailable, {throttled} Throttled, 0 NotFound)"
    );
    assert_eq!(calls, 12, "one call per 5 s interval");
    assert_eq!((unavailable, throttled), (12, 588));
    let s = fx.engine.stats();
    assert_eq!((s.lookup_throttled, s.lookup_unavailable), (588, 12));
    assert_eq!(s.lookup_not_found, 0);
    // The registry comes back: the next call after the interval heals it.
    fx.registry.set_down(false);
    advance(secs(5)).await;
    let healed = fx.engine.instances(APP).await.expect("back");
    assert!(healed.freshness.is_fresh());
}

#[actix_rt::test]
async fn the_cold_start_race_cannot_happen() {
    let fx = Fixture::start();
    put(&fx, APP, 8001);
    fx.registry.delay_calls(Duration::from_millis(50));
    let engine = fx.engine.clone();
    let first = actix_rt::spawn(async move { engine.instances(APP).await });
    // Callers arriving around the instant the flight completes (50 ms):
    // just before (they join it), at it, and just after (they read the
    // stored result).
    let late: Vec<_> = (45..=55u64)
        .flat_map(|at| (0..10).map(move |_| at))
        .map(|at| {
            let engine = fx.engine.clone();
            actix_rt::spawn(async move {
                sleep(Duration::from_millis(at)).await;
                engine.instances(APP).await
            })
        })
        .collect();
    assert!(first.await.unwrap().is_ok());
    for r in join_all(late).await {
        let b = r
            .unwrap()
            .expect("never NotFound right after a successful lookup");
        assert_eq!(b.instances.len(), 1);
    }
    let c = fx.engine.instances(APP).await.expect("stored");
    assert_eq!(c.source, Source::Cache);
    assert_eq!(fx.registry.list_calls(), 1, "no second call");
}

#[actix_rt::test]
async fn one_apps_failure_does_not_change_anothers_freshness() {
    let fx = Fixture::start();
    put(&fx, "a", 8001);
    put(&fx, "b", 8002);
    fx.engine.instances("a").await.unwrap();
    fx.engine.instances("b").await.unwrap();
    advance(secs(70)).await;
    fx.registry.fail_next_lists(1);
    let a = fx.engine.instances("a").await.expect("stale copy");
    assert!(matches!(a.freshness, Freshness::Stale { .. }), "{a:?}");
    let b = fx.engine.instances("b").await.expect("fresh");
    assert_eq!(
        (b.freshness, b.source),
        (Freshness::Fresh, Source::Registry)
    );
    // a stays throttled on its own clock; b is unaffected.
    let a = fx.engine.instances("a").await.unwrap();
    assert!(!a.freshness.is_fresh());
    assert!(fx.engine.instances("b").await.unwrap().freshness.is_fresh());
}

#[actix_rt::test]
async fn ttl_jitter_spreads_expiries_of_a_fleet_looked_up_at_once() {
    let fx = Fixture::start();
    let apps: Vec<String> = (0..200).map(|i| format!("app-{i}")).collect();
    for (i, app) in apps.iter().enumerate() {
        put(&fx, app, 9000 + i as u16);
    }
    join_all(apps.iter().map(|a| fx.engine.instances(a))).await;
    assert_eq!(fx.registry.list_calls(), 200);
    // Ask every app once a second from 50 s to 70 s; count refreshes per second.
    advance(secs(50)).await;
    let mut per_second = Vec::new();
    for _ in 50..70 {
        let before = fx.registry.list_calls();
        join_all(apps.iter().map(|a| fx.engine.instances(a))).await;
        per_second.push(fx.registry.list_calls() - before);
        advance(secs(1)).await;
    }
    println!("refreshes per second from t=50 s, 200 apps looked up together: {per_second:?}");
    assert_eq!(per_second.iter().sum::<usize>(), 200, "each refreshed once");
    let peak = *per_second.iter().max().unwrap();
    assert!(peak <= 40, "no step: at most {peak} in one second");
    let seconds_with_refreshes = per_second.iter().filter(|n| **n > 0).count();
    assert!(seconds_with_refreshes >= 10, "{per_second:?}");
}

#[actix_rt::test]
async fn max_staleness_refuses_a_too_old_copy() {
    let fx = Fixture::start_with(|b| b.lookup_max_staleness(Some(secs(90))));
    put(&fx, APP, 8001);
    fx.engine.instances(APP).await.unwrap();
    advance(secs(70)).await;
    fx.registry.set_down(true);
    let a = fx.engine.instances(APP).await.expect("70 s old: served");
    assert!(!a.freshness.is_fresh());
    advance(secs(25)).await;
    match fx.engine.instances(APP).await {
        Err(e @ LookupError::TooStale { .. }) => {
            let LookupError::TooStale {
                age, max_staleness, ..
            } = &e
            else {
                unreachable!()
            };
            assert!(*age > secs(90) && *max_staleness == secs(90), "{e}");
            assert!(e.source().is_some(), "the registry error is the cause");
        }
        other => panic!("refused as too stale: {other:?}"),
    }
    assert_eq!(fx.engine.stats().lookup_too_stale, 1);
}

#[actix_rt::test]
async fn a_subscribed_app_answers_from_the_watch_with_no_list_call() {
    let fx = Fixture::start();
    let (_, _, _dir) = fx.ready_on_r1().await;
    let calls = fx.registry.list_calls();
    for _ in 0..100 {
        let a = fx.engine.instances(APP).await.expect("live");
        assert_eq!((a.source, a.freshness), (Source::Watch, Freshness::Fresh));
        assert_eq!(a.instances.len(), 1);
    }
    assert_eq!(fx.registry.list_calls(), calls, "zero list calls");
    // The watch goes unhealthy: the live state, flagged stale with its age.
    fx.registry.report_watch_errors(APP);
    settle().await;
    advance(secs(2)).await;
    let a = fx.engine.instances(APP).await.expect("live, stale");
    assert_eq!(a.source, Source::Watch);
    assert!(
        matches!(a.freshness, Freshness::Stale { age } if age >= secs(2)),
        "{a:?}"
    );
    let s = fx.engine.stats();
    assert_eq!((s.lookup_registry_calls, s.lookup_watch_answers), (0, 101));
}

#[actix_rt::test]
async fn a_hung_registry_is_unavailable_after_the_call_deadline_and_waiters_are_released() {
    let fx = Fixture::start_with(|b| b.registry_call_timeout(secs(2)));
    put(&fx, APP, 8001);
    fx.registry.delay_calls(Duration::from_secs(3600));
    let start = Instant::now();
    let answers = join_all((0..50).map(|_| fx.engine.instances(APP))).await;
    let took = start.elapsed();
    println!("registry hung: 50 callers released after {took:?} (deadline 2 s)");
    assert!(took >= secs(2) && took < secs(3), "{took:?}");
    for a in answers {
        assert!(
            matches!(
                a,
                Err(LookupError::Unavailable {
                    cause: RegistryError::Timeout,
                    ..
                })
            ),
            "{a:?}"
        );
    }
}

#[actix_rt::test]
async fn not_found_only_on_the_registrys_word() {
    let fx = Fixture::start();
    match fx.engine.instances("nobody").await {
        Err(LookupError::NotFound { freshness, .. }) => assert!(freshness.is_fresh()),
        other => panic!("{other:?}"),
    }
    let calls = fx.registry.list_calls();
    assert!(matches!(
        fx.engine.instances("nobody").await,
        Err(LookupError::NotFound { .. })
    ));
    assert_eq!(
        fx.registry.list_calls(),
        calls,
        "the negative answer is cached"
    );
    // An app that appears is seen once the negative TTL (5 s ±10 %) passed.
    put(&fx, "nobody", 8001);
    advance(secs(6)).await;
    assert!(fx.engine.instances("nobody").await.is_ok());
    // With the registry down and no copy, it is Unavailable, not NotFound.
    fx.registry.set_down(true);
    assert!(matches!(
        fx.engine.instances("never-seen").await,
        Err(LookupError::Unavailable { .. })
    ));
}

#[actix_rt::test]
async fn after_shutdown_queries_say_so_and_no_actor_is_left() {
    let fx = Fixture::start();
    put(&fx, APP, 8001);
    fx.engine.instances(APP).await.unwrap();
    fx.engine.shutdown().await;
    settle().await;
    assert_eq!(
        fx.engine.instances(APP).await.map(|_| ()),
        Err(LookupError::ShutDown)
    );
    assert_eq!(fx.engine.stats().actors_alive, 0);
}
