//! Closing tombstones through the whole engine, on the embedded registry in
//! virtual time: a provider's graceful shutdown tombstones its endpoint, a
//! stale replay of the closed boot's record is vetoed, a restart on the
//! same address passes at once, even while its first metadata fetch fails
//! and is retried with no further registry event; without incarnation a
//! re-add is vetoed until the TTL (read from the live config) and then
//! comes back with no new event.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{DirectoryView, Incarnation, ServiceInstance, CLOSING_KEY};
use steadfast_actors::CallerConfig;
use steadfast_core::{NoEndpoint, NoEndpointReason};

/// Instance ports of the endpoints in a view, sorted.
fn hosts(v: &DirectoryView) -> Vec<u16> {
    let mut p: Vec<u16> = v.endpoints.iter().map(|u| u.instance.port()).collect();
    p.sort_unstable();
    p
}

fn reason(v: &DirectoryView) -> Option<NoEndpointReason> {
    NoEndpoint::of_status(&v.status).map(|e| e.reason)
}

/// `record` as its provider announces closing on graceful shutdown.
fn closing(record: &ServiceInstance) -> ServiceInstance {
    let mut c = record.clone();
    c.healthy = false;
    c.metadata.insert(CLOSING_KEY.into(), "true".into());
    c
}

#[actix_rt::test]
async fn graceful_shutdown_tombstones_a_stale_replay_is_vetoed_and_a_failing_restart_heals() {
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| b.metadata_publisher(f.clone()));
    let dir = fx.subscribe().await;
    let boot1 = fx.engine.export(export_spec(9500)).await.unwrap();
    wait_for(&dir, "boot 1 served", Duration::from_secs(5), |v| {
        hosts(v) == vec![9500]
    })
    .await;
    let stale = fx.registry.instances(APP).remove(0);
    assert!(stale.incarnation().is_some());

    // The provider announces closing (what its graceful shutdown writes
    // first): the endpoint goes at once and is tombstoned.
    fx.registry.put(closing(&stale));
    settle().await;
    let v = dir.view().await.unwrap();
    assert!(v.endpoints.is_empty());
    assert_eq!(fx.engine.stats().tombstones_written, 1);

    // The registry replays the closed boot's record (a lagging writer or
    // node): a newer version, the same incarnation. Vetoed, and the status
    // says why.
    fx.registry.put(stale.clone());
    advance(Duration::from_secs(2)).await;
    let v = dir.view().await.unwrap();
    assert!(
        v.endpoints.is_empty(),
        "the closed boot is not served again"
    );
    assert_eq!(
        reason(&v),
        Some(NoEndpointReason::AllClosing { closing: 1 })
    );
    assert!(fx.engine.stats().closing_readds_vetoed >= 1);

    // The graceful shutdown completes: closing announced, then unregistered.
    // The registry removal ends the tombstone (the instance is gone) and
    // drops the add it held back.
    let report = boot1.shutdown(Duration::ZERO).await.unwrap();
    assert!(report.unregistered);
    settle().await;
    let v = dir.view().await.unwrap();
    assert!(v.endpoints.is_empty());
    assert_eq!(reason(&v), Some(NoEndpointReason::RegistryEmpty));
    assert_eq!(fx.engine.stats().tombstones_cleared_by_removal, 1);

    // Restart on the same address with a new definition (a new revision)
    // whose MetadataService fails the first fetch.
    let m2 = metadata(APP, 9500, "boot-2");
    fx.fetcher.serve(m2.clone());
    fx.fetcher.fail_next(&m2.revision, 1);
    let mut boot2 = instance(&m2, 9500);
    boot2.id = stale.id.clone();
    Incarnation::new(2_000, &mut rand::thread_rng()).stamp(&mut boot2.metadata);
    fx.registry.put(boot2);
    let version = fx.registry.version();
    let restarted = tokio::time::Instant::now();
    let v = wait_for(&dir, "first fetch failed", Duration::from_secs(1), |v| {
        matches!(reason(v), Some(NoEndpointReason::MetadataUnresolved(_)))
    })
    .await;
    assert!(v.endpoints.is_empty());
    let v = wait_for(&dir, "restart served", Duration::from_secs(5), |v| {
        hosts(v) == vec![9500]
    })
    .await;
    assert!(
        fx.fetcher.calls(&m2.revision) >= 2,
        "first fetch failed, retried"
    );
    assert!(
        restarted.elapsed() < Duration::from_secs(30),
        "back well before the tombstone's TTL: {:?}",
        restarted.elapsed()
    );
    assert_eq!(fx.registry.version(), version, "no further registry event");
    assert!(v.status.is_ready());
    let s = fx.engine.stats();
    assert_eq!(
        s.tombstones_cleared_by_restart, 0,
        "the removal had ended it"
    );
    assert!(s.fetch_failures >= 1);
}

#[actix_rt::test]
async fn a_restart_within_the_same_millisecond_passes_at_once() {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    let mut boot1 = instance(&m1, 8001);
    Incarnation {
        export_ms: 1_000,
        boot_id: "boot-a".into(),
        created: None,
    }
    .stamp(&mut boot1.metadata);
    fx.registry.put(boot1.clone());
    settle().await;
    fx.registry.put(closing(&boot1));
    settle().await;
    assert!(dir.view().await.unwrap().endpoints.is_empty());

    // Same revision, same export millisecond, another boot: served at once.
    let mut boot2 = boot1.clone();
    Incarnation {
        export_ms: 1_000,
        boot_id: "boot-b".into(),
        created: None,
    }
    .stamp(&mut boot2.metadata);
    fx.registry.put(boot2);
    settle().await;
    let v = dir.view().await.unwrap();
    assert_eq!(hosts(&v), vec![8001], "a genuine restart, not vetoed");
}

#[actix_rt::test]
async fn without_incarnation_a_readd_is_vetoed_until_the_live_ttl_then_comes_back_alone() {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    let record = instance(&m1, 8001);
    assert!(record.incarnation().is_none());
    // The TTL is read when the tombstone is written, not at start.
    fx.engine.set_caller_config(CallerConfig {
        tombstone_ttl: Duration::from_secs(10),
        ..CallerConfig::clone(&fx.engine.caller_config())
    });

    fx.registry.put(closing(&record));
    settle().await;
    let v = dir.view().await.unwrap();
    assert_eq!(
        reason(&v),
        Some(NoEndpointReason::AllClosing { closing: 1 })
    );
    // The record comes back as serving: no incarnation to tell a restart
    // from a replay, so it is vetoed until the TTL.
    fx.registry.put(record);
    let version = fx.registry.version();
    advance(Duration::from_millis(9_900)).await;
    assert!(dir.view().await.unwrap().endpoints.is_empty(), "vetoed");
    let v = wait_for(
        &dir,
        "re-applied at the TTL",
        Duration::from_millis(200),
        |v| hosts(v) == vec![8001],
    )
    .await;
    assert!(v.status.is_ready());
    assert_eq!(fx.registry.version(), version, "with no new registry event");
    let s = fx.engine.stats();
    assert_eq!((s.tombstones_expired, s.vetoed_readds_replayed), (1, 1));
}

#[actix_rt::test]
async fn a_registry_removal_drops_the_vetoed_add_and_an_unknown_closing_writes_nothing() {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    let record = instance(&m1, 8001);
    fx.registry.put(closing(&record));
    settle().await;
    fx.registry.put(record.clone());
    settle().await;
    assert!(fx.registry.remove(APP, &record.id));
    settle().await;
    // The removal cleared the tombstone: re-registered, served at once.
    fx.registry.put(record);
    settle().await;
    assert_eq!(hosts(&dir.view().await.unwrap()), vec![8001]);
    assert_eq!(fx.engine.stats().tombstones_cleared_by_removal, 1);

    // A closing record the directory never held leaves no tombstone.
    let other = instance(&m1, 8003);
    fx.registry.put(closing(&other));
    settle().await;
    fx.registry.put(other);
    settle().await;
    assert_eq!(hosts(&dir.view().await.unwrap()), vec![8001, 8003]);
    assert_eq!(fx.engine.stats().tombstones_written, 1);
}

#[actix_rt::test]
async fn a_call_failing_with_closing_removes_the_endpoint_and_tombstones_it() {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    let mut record = instance(&m1, 8001);
    Incarnation {
        export_ms: 1_000,
        boot_id: "boot-a".into(),
        created: None,
    }
    .stamp(&mut record.metadata);
    fx.registry.put(record.clone());
    settle().await;
    assert!(hosts(&dir.view().await.unwrap()).contains(&8001));

    // Keep picking until the endpoint on 8001 comes up, then report the
    // call's closing-type failure through its lease.
    let lease = (0..1000)
        .map(|_| dir.select().expect("an endpoint"))
        .find(|l| l.instance.port() == 8001)
        .expect("8001 picked within 1000 picks");
    let _ = lease.failure(steadfast::FailureClass::Closing);
    settle().await;
    let v = dir.view().await.unwrap();
    assert!(!hosts(&v).contains(&8001), "removed at once");
    assert_eq!(fx.engine.stats().tombstones_written, 1);

    // The registry still lists the same boot: a replay of it is vetoed,
    // a restart (another boot) on the address passes at once.
    fx.registry.put(record.clone());
    settle().await;
    assert!(!hosts(&dir.view().await.unwrap()).contains(&8001));
    let mut restarted = record;
    Incarnation {
        export_ms: 1_000,
        boot_id: "boot-b".into(),
        created: None,
    }
    .stamp(&mut restarted.metadata);
    fx.registry.put(restarted);
    settle().await;
    assert!(hosts(&dir.view().await.unwrap()).contains(&8001));
    assert_eq!(fx.engine.stats().tombstones_cleared_by_restart, 1);
}

#[actix_rt::test]
async fn a_directory_that_panicked_is_re_created_serves_what_it_had_applied_and_keeps_its_tombstones(
) {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    fx.registry.put(instance(&m1, 8003));
    // :8001 announces closing: tombstoned.
    fx.registry.put(closing(&instance(&m1, 8001)));
    settle().await;
    let before = dir.view().await.unwrap();
    assert_eq!(hosts(&before), vec![8003]);
    assert_eq!(fx.engine.stats().tombstones_written, 1);
    // The directory's next handler panics after it applied an update and
    // before it published it: a provider of a revision already resolved
    // arrives (one update).
    fx.engine
        .drill_panic(steadfast_actors::RestartTarget::Directory(reference()))
        .await
        .unwrap();
    fx.registry.put(instance(&m1, 8002));
    settle().await;
    let s = fx.engine.stats();
    assert_eq!((s.handler_panics, s.restarts), (1, 1));
    // Re-created from its inputs, it learned the whole state again from
    // the resolver: the update the panic cut off is served, after the
    // version readers held.
    let v = wait_for(&dir, "the new provider", Duration::from_secs(2), |v| {
        hosts(v) == vec![8002, 8003]
    })
    .await;
    assert!(
        v.version > before.version,
        "{} {}",
        v.version,
        before.version
    );
    // The carried tombstone keeps the closed endpoint out: its re-add is
    // vetoed until the tombstone expires.
    fx.registry.put(instance(&m1, 8001));
    advance(Duration::from_secs(2)).await;
    assert_eq!(hosts(&dir.view().await.unwrap()), vec![8002, 8003]);
    assert!(fx.engine.stats().closing_readds_vetoed >= 1);
}
