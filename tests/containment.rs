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
        // actions; directory: applying the update). Then drive traffic
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
