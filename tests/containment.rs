//! A panic inside any actor's handler is contained: it is counted, the actor
//! restarts under its supervisor with its state resynced, and every
//! directory keeps serving and healing. Without containment the panicking
//! actor would be gone for good (actix restarts only after `ctx.stop()`).

mod common;

use std::time::Duration;

use common::*;
use steadfast::{ExportSpec, ServiceInfo};
use steadfast_actors::RestartTarget;

#[actix_rt::test]
async fn a_handler_panic_in_any_actor_restarts_it_and_healing_goes_on() {
    let fx = Fixture::start();
    let (_m1, m2, dir) = fx.r1_ready_r2_failing().await;
    let targets = [
        RestartTarget::Registry,
        RestartTarget::Cache,
        RestartTarget::Resolver(APP.into()),
        RestartTarget::Directory(reference()),
    ];
    for (n, target) in targets.into_iter().enumerate() {
        let before = fx.engine.stats();
        let want = dir.view().await.unwrap();
        // Arm the drill: the actor's next real handler panics at its drill
        // point (registry: delivering the snapshot; cache: taking the fetch
        // request, which is lost; resolver: performing the snapshot's
        // actions; directory: after applying the update, before publishing it). Then drive traffic
        // through that handler: an instance of a new revision, which needs a
        // fetch.
        fx.engine.drill_panic(target.clone()).await.unwrap();
        let m = metadata(APP, 20100 + n as u16, &format!("drill{n}"));
        fx.fetcher.serve(m.clone());
        let t0 = tokio::time::Instant::now();
        fx.registry.put(instance(&m, 8100 + n as u16));
        let v = wait_for(
            &dir,
            "the new revision served",
            Duration::from_secs(30),
            |v| ports(v).contains(&(20100 + n as u16)),
        )
        .await;
        let took = t0.elapsed();
        if target == RestartTarget::Cache {
            // The lost request is bounded by the resolver's fetch guard
            // (2 x 5 s + 5 s), then retried after 1 s.
            assert!(
                took >= Duration::from_secs(15) && took <= Duration::from_secs(17),
                "{took:?}"
            );
        } else {
            assert!(took <= Duration::from_secs(2), "{target:?}: {took:?}");
        }
        let after = fx.engine.stats();
        assert_eq!(after.handler_panics, n as u64 + 1, "{target:?} panicked");
        assert_eq!(after.restarts, before.restarts + 1, "{target:?} restarted");
        assert_eq!(after.actors_alive, before.actors_alive, "{target:?}");
        assert_eq!(v.endpoints.len(), want.endpoints.len() + 1, "{target:?}");
        assert_eq!(after.timers_pending, 1, "R2 retry kept: {target:?}");
    }
    // The coordinator: the drilled call fails with a typed error, the next
    // one works.
    fx.engine
        .drill_panic(RestartTarget::Coordinator)
        .await
        .unwrap();
    let other = steadfast::Reference::new("demo.Other", "tri", [APP]);
    assert_eq!(
        fx.engine.subscribe(other.clone()).await.err(),
        Some(steadfast::EngineError::Panicked)
    );
    settle().await;
    assert_eq!(fx.engine.stats().handler_panics, 5);
    fx.engine
        .subscribe(other)
        .await
        .expect("the coordinator restarted");
    // The engine still takes calls after its coordinator restarted.
    let export = fx
        .engine
        .export(
            ExportSpec::new("other", "127.0.0.1", 9000).service(ServiceInfo {
                name: "x".into(),
                group: None,
                version: None,
                protocol: "tri".into(),
                port: 9000,
                path: "x".into(),
                params: Default::default(),
            }),
        )
        .await;
    assert!(export.is_ok());
    // R2 heals: its retry still runs after all those panics.
    fx.fetcher.heal(&m2.revision);
    wait_for(&dir, "R2 resolved", Duration::from_secs(120), |v| {
        ports(v).contains(&20001)
    })
    .await;
    fx.engine.shutdown().await;
    settle().await;
    assert_eq!(fx.engine.stats().actors_alive, 0);
}

/// The failed attempts of the app's degraded revisions, as the status says.
fn degraded_attempts(v: &steadfast::DirectoryView) -> Option<u32> {
    match &v.status {
        steadfast::DirectoryStatus::Ready { degraded, .. } => {
            degraded.first().map(|(_, u)| u.attempts)
        }
        _ => None,
    }
}

#[actix_rt::test]
async fn a_resolver_that_panicked_is_re_created_from_its_inputs_while_its_directory_serves() {
    let fx = Fixture::start();
    let (m1, m2, dir) = fx.r1_ready_r2_failing().await;
    // R2 keeps failing: its retry schedule grows (1 s, 2 s, 4 s, 8 s...).
    advance(Duration::from_secs(20)).await;
    let before = dir.view().await.unwrap();
    let attempts = degraded_attempts(&before).expect("R2 degraded");
    assert!(attempts >= 4, "{:?}", before.status);
    let calls = fx.fetcher.calls(&m2.revision);
    // The resolver's next handler panics (drill): a new instance of R1
    // arrives, the feed is drained, and the panic hits before anything was
    // published.
    fx.engine
        .drill_panic(RestartTarget::Resolver(APP.into()))
        .await
        .unwrap();
    fx.registry.put(instance(&m1, 8003));
    settle().await;
    assert_eq!(fx.engine.stats().handler_panics, 1);
    // Re-created from its inputs: it subscribed again (the registry actor's
    // state has the new instance), learned R1 from the metadata cache, and
    // started R2 on a clean schedule: fetched at once, one failed attempt.
    let after = dir.view().await.unwrap();
    let ids: Vec<&str> = after.endpoints.iter().map(|e| e.instance_id()).collect();
    assert_eq!(ids, ["127.0.0.1:8001", "127.0.0.1:8003"], "{after:#?}");
    assert_eq!(degraded_attempts(&after), Some(1), "{:?}", after.status);
    assert_eq!(fx.fetcher.calls(&m2.revision), calls + 1, "R2 at once");
    // The directory never saw a half-learned, pending or empty state: it
    // served what it held until the replacement's first update, a Reset of
    // the whole state (R1 recalled from the cache, R2 fetching), then R2's
    // failed attempt. Two updates, no other in between.
    assert_eq!(after.version, before.version + 2, "{after:#?}");
    let s = fx.engine.stats();
    assert_eq!(s.restarts, 1);
    assert_eq!(
        s.flights_in_flight, 0,
        "no flight left for the old resolver"
    );
    assert_eq!(s.timers_pending, 1, "R2's one retry");
    // And it keeps healing.
    fx.fetcher.heal(&m2.revision);
    wait_for(&dir, "R2 resolved", Duration::from_secs(5), |v| {
        ports(v).contains(&20001)
    })
    .await;
}

#[actix_rt::test]
async fn a_registry_actor_that_panicked_is_re_created_from_its_inputs_while_its_directory_serves() {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    // The registry goes down: the watch ends, every re-open and probe
    // fails, and the re-open backoff grows past 16 s.
    fx.registry.fail_next_watches(usize::MAX);
    fx.registry.fail_next_lists(usize::MAX);
    fx.registry.end_watches(APP);
    advance(Duration::from_secs(60)).await;
    let before = dir.view().await.unwrap();
    let Some(down) = stale_since(&before) else {
        panic!("stale: {:?}", before.status);
    };
    // A provider registers meanwhile (the watch cannot tell).
    fx.registry.put(instance(&m1, 8002));
    // The registry actor's next handler panics: the probe timer, within a
    // probe interval.
    let watches = fx.registry.watch_calls();
    fx.engine
        .drill_panic(RestartTarget::Registry)
        .await
        .unwrap();
    advance(Duration::from_secs(2)).await;
    let s = fx.engine.stats();
    assert_eq!((s.handler_panics, s.restarts), (1, 1));
    // Re-created: the directory kept what it held, still stale since the
    // outage began (nothing pending, empty or fresh in between).
    let after = dir.view().await.unwrap();
    assert_eq!(after.endpoints, before.endpoints);
    assert_eq!(after.version, before.version, "no update at all");
    assert_eq!(stale_since(&after), Some(down), "{:?}", after.status);
    // The replacement re-opens at once on a clean schedule (at once, then
    // 1 s, 2 s, 4 s), where the old one waited out its grown backoff.
    advance(Duration::from_secs(6)).await;
    let reopened = fx.registry.watch_calls() - watches;
    assert!(reopened >= 3, "re-opens in 8 s: {reopened}");
    // The registry answers: fresh within a probe interval, with its state
    // delivered whole (the provider that registered meanwhile).
    fx.registry.fail_next_watches(0);
    fx.registry.fail_next_lists(0);
    let v = wait_for(&dir, "fresh", Duration::from_millis(1300), |v| {
        stale_since(v).is_none() && v.endpoints.len() == 2
    })
    .await;
    assert!(v.status.is_ready());
}

/// Since when the directory serves a stale registry state, if it does.
fn stale_since(v: &steadfast::DirectoryView) -> Option<tokio::time::Instant> {
    match &v.status {
        steadfast::DirectoryStatus::Ready { stale_since, .. } => {
            stale_since.map(tokio::time::Instant::from_std)
        }
        _ => None,
    }
}
