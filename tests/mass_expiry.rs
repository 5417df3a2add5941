//! No flap to empty after a registry-caused mass expiry, on virtual time:
//! right after a registry recovery, a removal of most of an app's instances
//! (in one snapshot, or one per snapshot as etcd reports it) is held for the
//! grace (3 s by default) and the status says so; a single removal is never
//! delayed; nothing is held past the grace; providers that re-register
//! replace the held records; a hold that ends, or a registry restart,
//! during a new outage keeps the stale mark.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{DirectoryStatus, DirectoryView, MetadataInfo};
use steadfast_actors::RestartTarget;

const GRACE: Duration = Duration::from_secs(3);

fn held(v: &DirectoryView) -> Option<usize> {
    match &v.status {
        DirectoryStatus::Ready { held, .. } => held.first().map(|(_, h)| h.count),
        DirectoryStatus::Empty(_) => None,
    }
}

fn ids(v: &DirectoryView) -> Vec<u16> {
    let mut ids: Vec<u16> = v
        .endpoints
        .iter()
        .filter_map(|u| u.instance_id().rsplit(':').next()?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// Ready on `ports` (one revision); then a registry outage (the watch
/// ends) during which the registry drops every instance but `keep`, as a
/// resumed etcd does with the leases that expired while it was frozen.
/// Returns once the watch is back (1 s backoff step) with that snapshot.
async fn recovery_dropping(
    fx: &Fixture,
    ports: &[u16],
    keep: &[u16],
) -> (MetadataInfo, steadfast::Directory) {
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    for p in ports {
        fx.registry.put(instance(&m, *p));
    }
    let n = ports.len();
    wait_for(&dir, "all ready", Duration::from_millis(50), |v| {
        v.endpoints.len() == n
    })
    .await;
    fx.registry.error_watches(APP);
    let kept = keep.iter().map(|p| instance(&m, *p)).collect();
    fx.registry.set_instances(APP, kept);
    settle().await;
    let watches = fx.registry.watch_calls();
    wait_for(&dir, "watch back", Duration::from_millis(1300), |_| {
        fx.registry.watch_calls() > watches
    })
    .await;
    settle().await;
    (m, dir)
}

#[actix_rt::test]
async fn a_mass_expiry_after_a_registry_recovery_is_held_for_the_grace_and_said() {
    let fx = Fixture::start();
    let (_m, dir) = recovery_dropping(&fx, &[8001, 8002, 8003, 8004], &[8001]).await;
    let v = dir.view().await.unwrap();
    assert_eq!(ids(&v), [8001, 8002, 8003, 8004], "no flap to one instance");
    assert_eq!(held(&v), Some(3));
    let text = v.status.to_string();
    assert!(
        text.contains("holding 3 instance(s) of greeter removed in a mass expiry"),
        "{text}"
    );
    assert_eq!(fx.engine.stats().instances_held, 3);
    advance(GRACE - Duration::from_millis(200)).await;
    assert_eq!(
        dir.view().await.unwrap().endpoints.len(),
        4,
        "held during the grace"
    );
    advance(Duration::from_millis(250)).await;
    let v = dir.view().await.unwrap();
    assert_eq!(ids(&v), [8001], "nothing held past the grace");
    assert_eq!(held(&v), None);
    assert!(!v.status.to_string().contains("holding"));
}

#[actix_rt::test]
async fn providers_that_re_register_replace_the_held_endpoints() {
    let fx = Fixture::start();
    let (m, dir) = recovery_dropping(&fx, &[8001, 8002, 8003, 8004], &[]).await;
    let v = dir.view().await.unwrap();
    assert_eq!(
        held(&v),
        Some(4),
        "not even empty for a moment: {:?}",
        v.status
    );
    advance(Duration::from_millis(800)).await;
    let mut back = instance(&m, 8002);
    back.weight = 7;
    fx.registry.put(back);
    fx.registry.put(instance(&m, 8003));
    settle().await;
    let v = dir.view().await.unwrap();
    assert_eq!(ids(&v), [8001, 8002, 8003, 8004]);
    assert_eq!(held(&v), Some(2), "8002 and 8003 are live records again");
    let w = v
        .endpoints
        .iter()
        .find(|u| u.instance_id().ends_with(":8002"));
    assert_eq!(
        w.map(|u| u.weight()),
        Some(7),
        "the new record replaced the held one"
    );
    advance(GRACE).await;
    let v = dir.view().await.unwrap();
    assert_eq!(
        ids(&v),
        [8002, 8003],
        "the ones that never came back are gone"
    );
    assert_eq!(held(&v), None);
}

#[actix_rt::test]
async fn a_single_instance_removal_is_never_delayed() {
    let fx = Fixture::start();
    let (_m, dir) = recovery_dropping(&fx, &[8001, 8002], &[8001]).await;
    let v = dir.view().await.unwrap();
    assert_eq!(
        ids(&v),
        [8001],
        "removed at once, even right after a recovery"
    );
    assert_eq!(held(&v), None);

    let fx = Fixture::start_paused(|b| b);
    let (_m, dir) = recovery_dropping(&fx, &[8001], &[]).await;
    let v = dir.view().await.unwrap();
    assert!(v.endpoints.is_empty(), "{:?}", v.status);
    assert_eq!(fx.engine.stats().instances_held, 0);
}

#[actix_rt::test]
async fn a_mass_removal_without_a_registry_recovery_is_applied_at_once() {
    let fx = Fixture::start();
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    for p in [8001, 8002, 8003, 8004] {
        fx.registry.put(instance(&m, p));
    }
    wait_for(&dir, "ready", Duration::from_millis(50), |v| {
        v.endpoints.len() == 4
    })
    .await;
    fx.registry.set_instances(APP, vec![instance(&m, 8001)]);
    settle().await;
    let v = dir.view().await.unwrap();
    assert_eq!(ids(&v), [8001], "the providers really left");
    assert_eq!(held(&v), None);
}

#[actix_rt::test]
async fn a_zero_grace_turns_the_hold_off() {
    let fx = Fixture::start_with(|b| b.mass_removal_grace(Duration::ZERO));
    let (_m, dir) = recovery_dropping(&fx, &[8001, 8002, 8003, 8004], &[8001]).await;
    assert_eq!(ids(&dir.view().await.unwrap()), [8001]);
}

#[actix_rt::test]
async fn removals_one_per_snapshot_right_after_a_recovery_are_held() {
    let fx = Fixture::start();
    let all = [8001, 8002, 8003, 8004];
    let (_m, dir) = recovery_dropping(&fx, &all, &all).await;
    assert!(!stale(&dir.view().await.unwrap()), "recovered");
    // One lease revoked per revision: one removal per snapshot.
    let mut seen = Vec::new();
    for p in all {
        assert!(fx.registry.remove(APP, &format!("127.0.0.1:{p}")));
        settle().await;
        let v = dir.view().await.unwrap();
        seen.push((ids(&v).len(), held(&v)));
    }
    assert_eq!(
        seen,
        [(3, None), (2, None), (4, Some(3)), (4, Some(4))],
        "held once 3 of 4 are gone, the earlier ones brought back"
    );
    assert_eq!(fx.engine.stats().instances_held, 4);
    // Each one leaves at its own removal + grace: nothing past the grace.
    advance(GRACE + Duration::from_millis(100)).await;
    let v = dir.view().await.unwrap();
    assert!(v.endpoints.is_empty(), "{:?}", v.status);
    assert!(matches!(
        v.status,
        DirectoryStatus::Empty(steadfast::EmptyReason::RegistryEmpty)
    ));
}

#[actix_rt::test]
async fn a_hold_ending_or_a_registry_restart_during_an_outage_keeps_the_stale_mark() {
    let fx = Fixture::start();
    let (_m, dir) = recovery_dropping(&fx, &[8001, 8002, 8003, 8004], &[8001]).await;
    assert_eq!(held(&dir.view().await.unwrap()), Some(3));
    // The registry goes down again while the hold lasts.
    fx.registry.fail_next_watches(usize::MAX);
    fx.registry.fail_next_lists(usize::MAX);
    fx.registry.error_watches(APP);
    settle().await;
    let v = dir.view().await.unwrap();
    assert!(stale(&v) && held(&v) == Some(3), "{:?}", v.status);
    // A forced restart of the registry actor (and of the resolver) during
    // the outage: the watch cannot re-open, so still stale.
    for target in [RestartTarget::Registry, RestartTarget::Resolver(APP.into())] {
        fx.engine.force_restart(target).await.unwrap();
        settle().await;
        let v = dir.view().await.unwrap();
        assert!(stale(&v), "after a restart: {:?}", v.status);
    }
    assert!(fx.engine.stats().restarts >= 2);
    // The hold ends during the outage: delivered, and still stale.
    advance(GRACE).await;
    let v = dir.view().await.unwrap();
    assert_eq!(ids(&v), [8001], "nothing held past the grace");
    assert_eq!(held(&v), None);
    assert!(stale(&v), "the registry is still down: {:?}", v.status);
    advance(Duration::from_secs(10)).await;
    assert!(
        stale(&dir.view().await.unwrap()),
        "for as long as it is down"
    );
    // The registry answers again: fresh within a probe interval.
    fx.registry.fail_next_watches(0);
    fx.registry.fail_next_lists(0);
    wait_for(&dir, "fresh", Duration::from_millis(1300), |v| !stale(v)).await;
}
