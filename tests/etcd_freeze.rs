//! The whole engine on a real etcd frozen with SIGSTOP for 20 s (longer than
//! the providers' 10 s lease TTL, so etcd expires every lease when it
//! resumes, one revision per lease). The consumer must report stale within
//! 10 s, never go empty while every provider is alive (the mass expiry on
//! resume is held while the providers re-register), resume within 2 s of
//! SIGCONT, and end with every provider served and nothing held. A second
//! app whose providers died during the freeze (their registry dropped, so
//! nothing re-registers) is held after SIGCONT, says so, is served for at
//! most the grace, and then empties with `RegistryEmpty`. Its leases run
//! out a few seconds after SIGCONT, when the consumer's watch is live
//! again, so etcd's revocations reach it one per revision: the hold must be
//! judged over the recovery window, not one snapshot at a time.

use std::time::{Duration, Instant};

use steadfast::{DirectoryStatus, DirectoryView, EmptyReason, Engine, Reference, Registry};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";
const PROVIDERS: u16 = 3;
/// The app whose providers die during the freeze.
const GONE: &str = "sunset";
/// The default mass-removal grace.
const GRACE: Duration = Duration::from_secs(3);
/// Lease TTL of the second app's providers: granted just before the
/// freeze, their leases expire 3 s after SIGCONT.
const GONE_TTL: Duration = Duration::from_secs(23);

fn stale(v: &DirectoryView) -> bool {
    matches!(
        v.status,
        DirectoryStatus::Ready {
            stale_since: Some(_),
            ..
        }
    )
}

fn held(v: &DirectoryView) -> bool {
    matches!(&v.status, DirectoryStatus::Ready { held, .. } if !held.is_empty())
}

#[actix_rt::test]
async fn a_20s_freeze_never_empties_the_consumer_and_heals_within_2s() {
    let mut etcd = EtcdServer::start().await.expect("etcd starts");
    let prefix = unique_prefix();
    let providers = EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix))
        .expect("provider registry");
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    let gone_info = MetadataBuilder::new(GONE)
        .service(IFACE, "tri", 20000)
        .build();
    let gone_providers = EtcdRegistry::new(
        EtcdConfig::new([etcd.endpoint()])
            .with_prefix(&prefix)
            .with_lease_ttl(GONE_TTL),
    )
    .expect("second provider registry");
    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
    fetcher.serve(gone_info.clone());
    let consumer = Engine::builder()
        .registry(
            EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix)).unwrap(),
        )
        .fetcher(fetcher)
        .start()
        .unwrap();
    let dir = consumer
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    let gone_dir = consumer
        .subscribe(Reference::new(IFACE, "tri", [GONE]))
        .await
        .unwrap();
    for port in 8001..8001 + PROVIDERS {
        providers
            .register(instance_for(&info, "127.0.0.1", port))
            .await
            .unwrap();
    }
    let end = Instant::now() + Duration::from_secs(10);
    while dir.view().await.unwrap().endpoints.len() < PROVIDERS as usize {
        assert!(Instant::now() < end, "providers never all served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The second app registers right before the freeze (fresh leases).
    for port in 9001..9001 + PROVIDERS {
        gone_providers
            .register(instance_for(&gone_info, "127.0.0.1", port))
            .await
            .unwrap();
    }
    while gone_dir.view().await.unwrap().endpoints.len() < PROVIDERS as usize {
        assert!(Instant::now() < end, "second app never all served");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    etcd.freeze().unwrap();
    let frozen = Instant::now();
    // The second app's providers die while etcd is frozen: nothing keeps
    // their leases alive, nothing re-registers them.
    drop(gone_providers);
    let mut stale_after = None;
    while frozen.elapsed() < Duration::from_secs(20) {
        let v = dir.view().await.unwrap();
        assert!(!v.endpoints.is_empty(), "a freeze never empties: {v:#?}");
        let g = gone_dir.view().await.unwrap();
        assert_eq!(
            g.endpoints.len(),
            PROVIDERS as usize,
            "stale, served: {g:#?}"
        );
        if stale_after.is_none() && stale(&v) {
            stale_after = Some(frozen.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stale_after = stale_after.expect("the freeze was reported as stale");
    assert!(
        stale_after <= Duration::from_secs(10),
        "stale after {stale_after:?}"
    );

    etcd.thaw().unwrap();
    let thawed = Instant::now();
    let (mut resumed, mut saw_hold, mut fewest) = (None, false, usize::MAX);
    // The second app: when it is first seen held, when it first empties.
    let (mut gone_held, mut gone_empty) = (None, None);
    // Watch long enough for etcd to expire the leases, the providers to
    // re-register, the second app's leases to run out (3 s after SIGCONT)
    // and every hold to end (grace 3 s).
    while thawed.elapsed() < Duration::from_secs(10) {
        let v = dir.view().await.unwrap();
        assert!(
            !v.endpoints.is_empty(),
            "providers alive, so never empty after the resume: {v:#?}"
        );
        fewest = fewest.min(v.endpoints.len());
        saw_hold |= held(&v);
        if resumed.is_none() && !stale(&v) {
            resumed = Some(thawed.elapsed());
        }
        let g = gone_dir.view().await.unwrap();
        if gone_held.is_none() && held(&g) {
            gone_held = Some(thawed.elapsed());
        }
        if g.endpoints.is_empty() {
            gone_empty.get_or_insert(thawed.elapsed());
            assert_eq!(
                g.status,
                DirectoryStatus::Empty(EmptyReason::RegistryEmpty),
                "gone for real: {g:#?}"
            );
        } else {
            assert!(gone_empty.is_none(), "nothing comes back: {g:#?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let v = dir.view().await.unwrap();
    assert_eq!(v.endpoints.len(), PROVIDERS as usize, "all served: {v:#?}");
    assert!(!held(&v) && !stale(&v), "settled: {v:#?}");
    let resumed = resumed.unwrap();
    let gone_held = gone_held.expect("the dead providers' mass expiry was held and said");
    let gone_empty = gone_empty.expect("and removed after the grace");
    let served = gone_empty.saturating_sub(gone_held);
    eprintln!(
        "engine on a 20 s etcd freeze: stale reported {stale_after:?} after SIGSTOP, resumed \
         {resumed:?} after SIGCONT; over the next 10 s at least {fewest} of {PROVIDERS} \
         endpoints served (mass expiry held on the way: {saw_hold}), re-registrations {}; \
         dead providers' app held from {gone_held:?} after SIGCONT, empty (RegistryEmpty) \
         from {gone_empty:?}: served held for {served:?}",
        providers.stats().reregistrations
    );
    assert!(
        resumed <= Duration::from_secs(2),
        "resumed after {resumed:?}"
    );
    // Held from each removal for the grace; the removals of one expiry and
    // the 10 ms sampling add a little.
    assert!(
        served <= GRACE + Duration::from_millis(500),
        "held past the grace: {served:?}"
    );
    consumer.shutdown().await;
}
