//! Handle lifetimes (virtual time): a `Directory` keeps its engine running
//! after every `Engine` value is dropped; dropping the last handle of a
//! reference unsubscribes it after `unsubscribe_linger` unless it is
//! subscribed again meanwhile; explicit `unsubscribe` and `shutdown` still
//! stop things at once, whatever handles are alive.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use steadfast::{CallerConfig, Directory, EngineError, MemoryRegistry, NoEndpointReason};
use steadfast_testkit::ScriptedFetcher;

/// Starts an engine, subscribes, and returns only the directory: the
/// engine value is dropped on return.
async fn directory_only(registry: MemoryRegistry, fetcher: ScriptedFetcher) -> Directory {
    let engine = steadfast::Engine::builder()
        .registry(registry)
        .fetcher(fetcher)
        .seed(7)
        .start()
        .expect("engine starts");
    engine.subscribe(reference()).await.expect("subscribe")
}

fn with_linger(linger: Option<Duration>) -> Fixture {
    Fixture::start_with(|b| {
        b.config(steadfast::EngineConfig {
            caller: CallerConfig {
                unsubscribe_linger: linger,
                ..CallerConfig::default()
            },
            seed: 7,
            ..steadfast::EngineConfig::default()
        })
    })
}

#[actix_rt::test]
async fn a_directory_returned_from_a_function_keeps_serving_and_updating() {
    tokio::time::pause();
    let (registry, fetcher) = (MemoryRegistry::new(), ScriptedFetcher::new());
    let m = metadata(APP, 20000, "t1");
    fetcher.serve(m.clone());
    let dir = directory_only(registry.clone(), fetcher.clone()).await;
    advance(Duration::from_secs(5)).await;
    assert!(dir.is_open(), "the engine is still running");
    registry.put(instance(&m, 8001));
    let first = dir.select_ready(Duration::from_secs(1)).await;
    assert_eq!(first.expect("served").port(), 20000);
    // It keeps following the registry, well past any linger.
    advance(Duration::from_secs(60)).await;
    registry.put(instance(&m, 8002));
    let v = wait_for(&dir, "two endpoints", Duration::from_secs(1), |v| {
        v.endpoints.len() == 2
    })
    .await;
    assert!(v.status.is_ready());
    // A clone outlives the original too.
    let clone = dir.clone();
    drop(dir);
    advance(Duration::from_secs(60)).await;
    assert!(clone.is_open());
    assert_eq!(clone.snapshot().expect("open").len(), 2);
}

#[actix_rt::test]
async fn dropping_the_last_handle_unsubscribes_after_the_linger() {
    let fx = with_linger(Some(Duration::from_secs(5)));
    let (_, _, dir) = fx.ready_on_r1().await;
    let again = fx.engine.subscribe(reference()).await.expect("subscribe");
    let s = fx.engine.stats();
    assert_eq!((s.directories_alive, s.resolvers_alive), (1, 1));
    assert_eq!(s.watches_active, 1);
    drop(dir);
    advance(Duration::from_secs(10)).await;
    assert_eq!(fx.engine.stats().directories_alive, 1, "a handle is alive");
    drop(again);
    advance(Duration::from_millis(4900)).await;
    let s = fx.engine.stats();
    assert_eq!(s.directories_alive, 1, "still within the linger: {s:?}");
    assert_eq!(s.linger_unsubscribes, 0);
    advance(Duration::from_millis(200)).await;
    let s = fx.engine.stats();
    assert_eq!(s.linger_unsubscribes, 1, "{s:?}");
    assert_eq!(s.directories_alive, 0, "{s:?}");
    assert_eq!(s.resolvers_alive, 0, "{s:?}");
    assert_eq!(s.watches_active, 0, "the registry watch ended: {s:?}");
    assert_eq!(s.timers_pending, 0, "{s:?}");
    // Every subscription ended with it.
    assert_eq!(
        fx.engine.unsubscribe(&reference()).await,
        Err(EngineError::NotSubscribed(reference().subscribe_key()))
    );
    // The engine itself is alive: subscribing again works.
    let dir = fx.subscribe().await;
    assert!(dir.ready(Duration::from_secs(1)).await.is_ok());
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn subscribing_again_within_the_linger_keeps_the_directory() {
    let fx = with_linger(Some(Duration::from_secs(5)));
    let (m1, _, dir) = fx.ready_on_r1().await;
    fx.registry.put(instance(&m1, 8003));
    let v = wait_for(&dir, "two", Duration::from_secs(1), |v| {
        v.endpoints.len() == 2
    })
    .await;
    let calls = fx.fetcher.total_calls();
    drop(dir);
    advance(Duration::from_secs(3)).await;
    let dir = fx.subscribe().await;
    advance(Duration::from_secs(10)).await;
    let s = fx.engine.stats();
    assert_eq!(s.linger_unsubscribes, 0, "{s:?}");
    assert_eq!(s.directories_alive, 1);
    let snap = dir.snapshot().expect("open");
    // The same directory: its version went on, nothing was fetched again.
    assert!(
        snap.version() >= v.version,
        "{} < {}",
        snap.version(),
        v.version
    );
    assert_eq!(snap.len(), 2);
    assert_eq!(fx.fetcher.total_calls(), calls, "no re-resolve");
    // Dropped again: the new drop gets a whole linger of its own.
    drop(dir);
    advance(Duration::from_secs(4)).await;
    assert_eq!(fx.engine.stats().directories_alive, 1);
    advance(Duration::from_secs(2)).await;
    assert_eq!(fx.engine.stats().directories_alive, 0);
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn without_a_linger_dropped_handles_never_unsubscribe() {
    let fx = with_linger(None);
    let (_, _, dir) = fx.ready_on_r1().await;
    drop(dir);
    advance(Duration::from_secs(600)).await;
    assert_eq!(fx.engine.stats().directories_alive, 1);
    assert_eq!(fx.engine.unsubscribe(&reference()).await, Ok(true));
    settle().await;
    assert_eq!(fx.engine.stats().directories_alive, 0);
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn explicit_unsubscribe_closes_at_once_even_with_handles_alive() {
    let fx = with_linger(Some(Duration::from_secs(5)));
    let (_, _, dir) = fx.ready_on_r1().await;
    assert_eq!(fx.engine.unsubscribe(&reference()).await, Ok(true));
    let why = dir
        .select_ready(Duration::from_secs(1))
        .await
        .expect_err("closed");
    assert_eq!(why.reason, NoEndpointReason::NotSubscribed);
    // A new subscription is not touched by the old handle's drop.
    let fresh = fx.subscribe().await;
    drop(dir);
    advance(Duration::from_secs(30)).await;
    assert!(fresh.is_open());
    assert_eq!(fx.engine.stats().linger_unsubscribes, 0);
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn shutdown_with_handles_alive_stops_every_actor() {
    let fx = with_linger(Some(Duration::from_secs(5)));
    let (_, _, dir) = fx.ready_on_r1().await;
    let clone = dir.clone();
    let mut changes = Box::pin(dir.changes());
    assert!(changes.next().await.is_some());
    fx.engine.shutdown().await;
    settle().await;
    let s = fx.engine.stats();
    assert_eq!(s.actors_alive, 0, "{s:?}");
    assert_eq!(s.directories_alive, 0, "{s:?}");
    assert_eq!(s.resolvers_alive, 0, "{s:?}");
    assert_eq!(s.timers_pending, 0, "{s:?}");
    assert_eq!(s.watches_active, 0, "{s:?}");
    assert!(!clone.is_open());
    assert_eq!(changes.next().await, None, "the stream ended");
    let why = clone
        .ready(Duration::from_secs(5))
        .await
        .expect_err("closed");
    assert_eq!(why.reason, NoEndpointReason::NotSubscribed);
    assert_eq!(
        fx.engine.subscribe(reference()).await.map(|_| ()),
        Err(EngineError::ShutDown)
    );
    drop((dir, clone));
    advance(Duration::from_secs(10)).await;
    assert_eq!(fx.engine.stats().actors_alive, 0);
}

#[actix_rt::test]
async fn a_coordinator_restart_during_the_linger_does_not_forget_it() {
    let fx = with_linger(Some(Duration::from_secs(5)));
    let (_, _, dir) = fx.ready_on_r1().await;
    drop(dir);
    advance(Duration::from_secs(2)).await;
    fx.engine
        .force_restart(steadfast_actors::RestartTarget::Coordinator)
        .await
        .expect("restart");
    settle().await;
    assert!(fx.engine.stats().restarts >= 1);
    // The linger keeps its deadline across the restart (5 s after the
    // drop): neither earlier nor later than asked.
    advance(Duration::from_secs(2)).await;
    assert_eq!(fx.engine.stats().directories_alive, 1, "4 s after the drop");
    advance(Duration::from_secs(2)).await;
    let s = fx.engine.stats();
    assert_eq!(
        (s.directories_alive, s.linger_unsubscribes),
        (0, 1),
        "{s:?}"
    );
    assert_eq!(s.timers_pending, 0, "{s:?}");
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn dropping_every_engine_and_handle_stops_the_engine_at_once() {
    tokio::time::pause();
    let (registry, fetcher) = (MemoryRegistry::new(), ScriptedFetcher::new());
    let good = metadata(APP, 20000, "t1");
    let bad = metadata(APP, 20001, "t2");
    fetcher.serve(good.clone());
    fetcher.serve(bad.clone());
    fetcher.fail_always(&bad.revision);
    registry.put(instance(&good, 8001));
    registry.put(instance(&bad, 8002));
    let engine = steadfast::Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(7)
        .start()
        .expect("engine starts");
    let dir = engine.subscribe(reference()).await.expect("subscribe");
    let first = dir.select_ready(Duration::from_secs(1)).await;
    assert_eq!(first.expect("served").port(), 20000);
    let before = fetcher.calls(&bad.revision);
    advance(Duration::from_secs(5)).await;
    assert!(
        fetcher.calls(&bad.revision) > before,
        "the failing revision is being retried"
    );
    assert_eq!(registry.watcher_count(APP), 1);

    // No shutdown: the last engine value and the last handle just go.
    drop(dir);
    drop(engine);
    settle().await;
    let calls = fetcher.total_calls();
    assert_eq!(
        registry.watcher_count(APP),
        0,
        "the watch closed at the drop"
    );
    assert_eq!(fetcher.in_flight(), 0, "no fetch outlives the drop");
    // Well past the default linger (30 s) and many retry periods.
    advance(Duration::from_secs(120)).await;
    assert_eq!(fetcher.total_calls(), calls, "no fetch after the drop");
    assert_eq!(registry.watcher_count(APP), 0);
}
