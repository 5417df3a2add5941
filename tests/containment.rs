//! A panic inside any actor's handler is contained: it is counted, the actor
//! restarts under its supervisor with its state resynced, and every
//! directory keeps serving and healing. Without containment the panicking
//! actor would be gone for good (actix restarts only after `ctx.stop()`).

mod common;

use std::time::Duration;

use common::*;
use steadfast::{ExportSpec, RestartTarget, ServiceInfo};

#[actix_rt::test]
async fn a_handler_panic_in_any_actor_restarts_it_and_healing_goes_on() {
    let fx = Fixture::start();
    let (m1, m2, dir) = fx.r1_ready_r2_failing().await;
    let targets = [
        RestartTarget::Registry,
        RestartTarget::Cache,
        RestartTarget::Resolver(APP.into()),
        RestartTarget::Directory(reference()),
        RestartTarget::Coordinator,
    ];
    let mut port = 8100;
    for (n, target) in targets.into_iter().enumerate() {
        let before = fx.engine.stats();
        let want = dir.view().await.unwrap();
        fx.engine.drill_panic(target.clone()).await.unwrap();
        settle().await;
        let after = fx.engine.stats();
        assert_eq!(after.handler_panics, n as u64 + 1, "{target:?}");
        assert_eq!(after.restarts, before.restarts + 1, "{target:?} restarted");
        assert_eq!(after.actors_alive, before.actors_alive, "{target:?}");
        let v = dir.view().await.expect("directory answers");
        assert_eq!(ports(&v), ports(&want), "after a panic in {target:?}");
        assert_eq!(after.timers_pending, 1, "R2 retry kept: {target:?}");
        // Still wired: a new instance reaches the directory.
        port += 1;
        fx.registry.put(instance(&m1, port));
        let n = v.endpoints.len() + 1;
        wait_for(&dir, "new instance", Duration::from_millis(50), |v| {
            v.endpoints.len() == n
        })
        .await;
    }
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
