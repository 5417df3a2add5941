//! Subscriber changes, shutdown races, unsubscribe and supervised restarts:
//! afterwards nothing is left running, and restarts lose nothing.

mod common;

use std::time::Duration;

use common::*;
use steadfast::EngineError;
use steadfast_actors::RestartTarget;

#[actix_rt::test]
async fn last_subscriber_leaving_stops_retries_and_reattach_resumes_them() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_always(&m1.revision);
    let _dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    assert_eq!(fx.engine.stats().timers_pending, 1);

    assert!(fx.engine.unsubscribe(&reference()).await.unwrap());
    settle().await;
    let calls = fx.fetcher.calls(&m1.revision);
    assert_eq!(fx.engine.stats().timers_pending, 0, "retry stopped");
    assert_eq!(fx.registry.watcher_count(APP), 0, "watch closed");
    // Snapshots with no subscriber arm nothing.
    fx.registry.put(instance(&m1, 8002));
    advance(Duration::from_secs(120)).await;
    assert_eq!(fx.fetcher.calls(&m1.revision), calls);
    assert_eq!(fx.engine.stats().timers_pending, 0);

    // A subscriber attaches again: resolution resumes and heals.
    fx.fetcher.heal(&m1.revision);
    let dir = fx.subscribe().await;
    let v = wait_for(
        &dir,
        "ready after re-attach",
        Duration::from_millis(100),
        |v| v.status.is_ready(),
    )
    .await;
    assert_eq!(v.endpoints.len(), 2);
    assert!(fx.fetcher.calls(&m1.revision) > calls);
}

fn assert_all_stopped(fx: &Fixture) {
    let s = fx.engine.stats();
    assert_eq!(s.actors_alive, 0, "no actor alive: {s:?}");
    assert_eq!(s.resolvers_alive, 0, "{s:?}");
    assert_eq!(s.directories_alive, 0, "{s:?}");
    assert_eq!(s.flights_in_flight, 0, "no fetch in flight: {s:?}");
    assert_eq!(s.timers_pending, 0, "no timer: {s:?}");
    assert_eq!(s.watches_active, 0, "no watch: {s:?}");
    assert_eq!(fx.fetcher.in_flight(), 0, "fetch futures dropped");
}

#[actix_rt::test]
async fn shutdown_with_a_fetch_blocked_in_flight_leaves_nothing_running() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    let m2 = metadata(APP, 20001, "t2");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.serve(m2.clone());
    fx.fetcher.block(&m1.revision);
    fx.fetcher.fail_always(&m2.revision);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    fx.registry.put(instance(&m2, 8002));
    settle().await;
    assert_eq!(fx.fetcher.blocked_now(&m1.revision), 1);
    assert_eq!(
        fx.engine.stats().timers_pending,
        2,
        "R1's blocked fetch has its deadline armed, R2 waits for a retry"
    );

    fx.engine.shutdown().await;
    settle().await;
    assert_all_stopped(&fx);
    assert!(!dir.is_open());
    assert_eq!(dir.view().await, Err(EngineError::DirectoryClosed));
    let before = (fx.fetcher.total_calls(), fx.engine.stats());
    fx.fetcher.release(&m1.revision);
    fx.registry.put(instance(&m1, 8003));
    advance(Duration::from_secs(600)).await;
    assert_eq!(
        (fx.fetcher.total_calls(), fx.engine.stats()),
        before,
        "flat"
    );
    assert_eq!(fx.registry.watcher_count(APP), 0);
    assert_eq!(
        fx.engine.subscribe(reference()).await.unwrap_err(),
        EngineError::ShutDown
    );
}

#[actix_rt::test]
async fn subscribe_racing_shutdown_installs_nothing() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_always(&m1.revision);
    fx.registry.put(instance(&m1, 8001));
    let other = steadfast::Reference::new("demo.Other", "tri", [APP]);
    let (a, (), b) = futures::join!(
        fx.engine.subscribe(reference()),
        fx.engine.shutdown(),
        fx.engine.subscribe(other)
    );
    assert!(a.is_ok(), "queued before shutdown: served, then torn down");
    assert_eq!(b.unwrap_err(), EngineError::ShutDown);
    settle().await;
    assert_all_stopped(&fx);
    let calls = fx.fetcher.total_calls();
    advance(Duration::from_secs(600)).await;
    assert_eq!(fx.fetcher.total_calls(), calls);
    assert_all_stopped(&fx);
}

#[actix_rt::test]
async fn unsubscribe_with_the_same_reference_stops_everything_for_it() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.fail_always(&m1.revision);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    assert_eq!(fx.engine.stats().resolvers_alive, 1);

    // A reference built anew from the same fields derives the same key.
    let same = common::reference();
    assert!(fx.engine.unsubscribe(&same).await.unwrap());
    settle().await;
    let s = fx.engine.stats();
    assert_eq!((s.resolvers_alive, s.directories_alive), (0, 0));
    assert_eq!(
        (s.timers_pending, s.flights_in_flight, s.watches_active),
        (0, 0, 0)
    );
    assert!(!dir.is_open());
    let calls = fx.fetcher.calls(&m1.revision);
    advance(Duration::from_secs(300)).await;
    assert_eq!(fx.fetcher.calls(&m1.revision), calls);
    assert!(matches!(
        fx.engine.unsubscribe(&same).await,
        Err(EngineError::NotSubscribed(_))
    ));
}

#[actix_rt::test]
async fn a_fetch_that_never_returns_delays_nothing_else() {
    let fx = Fixture::start_with(|b| b.fetch_timeout(Duration::from_secs(3600)));
    let m1 = metadata(APP, 20000, "t1");
    let m2 = metadata(APP, 20001, "t2");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.serve(m2.clone());
    fx.fetcher.block(&m1.revision);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    assert_eq!(fx.fetcher.blocked_now(&m1.revision), 1);

    // Another revision, a snapshot change and a new subscriber all proceed.
    fx.registry.put(instance(&m2, 8002));
    let v = wait_for(&dir, "R2 served", Duration::from_millis(50), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![20001]);
    let other = fx
        .engine
        .subscribe(steadfast::Reference::new(IFACE, "tri", [APP, "other-app"]))
        .await
        .unwrap();
    wait_for(&other, "second directory", Duration::from_millis(50), |v| {
        ports(v) == vec![20001]
    })
    .await;
    assert_eq!(fx.fetcher.blocked_now(&m1.revision), 1, "still blocked");
    fx.registry.remove(APP, "127.0.0.1:8002");
    wait_for(&dir, "removal applied", Duration::from_millis(50), |v| {
        v.endpoints.is_empty()
    })
    .await;
}

#[actix_rt::test]
async fn forced_restart_of_each_actor_converges_to_the_same_state() {
    let fx = Fixture::start();
    let (m1, m2, dir) = fx.r1_ready_r2_failing().await;
    let targets = [
        RestartTarget::Registry,
        RestartTarget::Cache,
        RestartTarget::Resolver(APP.into()),
        RestartTarget::Directory(reference()),
    ];
    let mut port = 8100;
    for target in targets {
        let restarts = fx.engine.stats().restarts;
        let want = dir.view().await.unwrap();
        fx.engine.force_restart(target.clone()).await.unwrap();
        settle().await;
        assert_eq!(fx.engine.stats().restarts, restarts + 1, "{target:?}");
        let v = dir.view().await.unwrap();
        assert_eq!(ports(&v), ports(&want), "after restarting {target:?}");
        assert_eq!(
            fx.engine.stats().timers_pending,
            1,
            "R2 retry kept: {target:?}"
        );
        // No subscriber was lost: a new instance still reaches the directory.
        port += 1;
        fx.registry.put(instance(&m1, port));
        let n = v.endpoints.len() + 1;
        wait_for(
            &dir,
            "new instance after restart",
            Duration::from_millis(50),
            |v| v.endpoints.len() == n,
        )
        .await;
    }
    // R2 heals: its retry still runs after all those restarts.
    fx.fetcher.heal(&m2.revision);
    wait_for(&dir, "R2 resolved", Duration::from_secs(120), |v| {
        ports(v).contains(&20001)
    })
    .await;
}

#[actix_rt::test]
async fn resolver_restart_mid_fetch_then_unsubscribe_leaves_no_flight() {
    let fx = Fixture::start_with(|b| b.fetch_timeout(Duration::from_secs(3600)));
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.block(&m1.revision);
    let _dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    assert_eq!(fx.engine.stats().flights_in_flight, 1);
    fx.engine
        .force_restart(RestartTarget::Resolver(APP.into()))
        .await
        .unwrap();
    settle().await;
    assert_eq!(
        fx.engine.stats().flights_in_flight,
        1,
        "joined, not doubled"
    );
    assert!(fx.engine.unsubscribe(&reference()).await.unwrap());
    settle().await;
    let s = fx.engine.stats();
    assert_eq!(s.resolvers_alive, 0);
    assert_eq!(
        s.flights_in_flight, 0,
        "the last detach abandons the fetch: {s:?}"
    );
    assert_eq!(fx.fetcher.in_flight(), 0);
}

#[actix_rt::test]
async fn cache_restart_mid_flight_still_answers_the_resolver() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.block(&m1.revision);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    settle().await;
    fx.engine.force_restart(RestartTarget::Cache).await.unwrap();
    settle().await;
    fx.fetcher.release(&m1.revision);
    wait_for(
        &dir,
        "resolved after cache restart",
        Duration::from_secs(2),
        |v| v.status.is_ready(),
    )
    .await;
}
