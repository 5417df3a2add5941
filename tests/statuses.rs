//! Statuses tell the real cause: instances present but none serving are
//! `NotServing` with the count per cause, never `NoMatchingService`.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{DirectoryStatus, EmptyReason, NotServing, CLOSING_KEY};

#[actix_rt::test]
async fn present_but_not_serving_says_why_per_cause() {
    let fx = Fixture::start();
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    let mut sick = instance(&m, 8001);
    sick.healthy = false;
    let mut idle = instance(&m, 8002);
    idle.weight = 0;
    let mut closing = instance(&m, 8003);
    closing.healthy = false;
    closing.metadata.insert(CLOSING_KEY.into(), "true".into());
    for i in [&sick, &idle, &closing] {
        fx.registry.put(i.clone());
    }
    let v = wait_for(&dir, "not serving", Duration::from_secs(1), |v| {
        matches!(v.status, DirectoryStatus::Empty(EmptyReason::NotServing(_)))
    })
    .await;
    let want = NotServing {
        unhealthy: 1,
        closing: 1,
        zero_weight: 1,
    };
    assert_eq!(
        v.status,
        DirectoryStatus::Empty(EmptyReason::NotServing(want))
    );
    assert!(v.endpoints.is_empty());
    assert_eq!(
        v.status.to_string(),
        "empty: 3 instance(s) present, none serving (1 unhealthy, 1 closing, 1 with weight 0)"
    );

    // One healthy instance back: served at once.
    let mut back = sick.clone();
    back.healthy = true;
    fx.registry.put(back);
    let v = wait_for(&dir, "ready", Duration::from_secs(1), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![20000]);
}

#[actix_rt::test]
async fn a_closing_record_is_not_served_even_when_marked_healthy() {
    let fx = Fixture::start();
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    let mut closing = instance(&m, 8001);
    closing.metadata.insert(CLOSING_KEY.into(), "true".into());
    fx.registry.put(closing);
    let v = wait_for(&dir, "not serving", Duration::from_secs(1), |v| {
        matches!(v.status, DirectoryStatus::Empty(EmptyReason::NotServing(_)))
    })
    .await;
    assert_eq!(
        v.status,
        DirectoryStatus::Empty(EmptyReason::NotServing(NotServing {
            closing: 1,
            ..NotServing::default()
        }))
    );
}
