//! The whole engine on a real etcd frozen with SIGSTOP for 20 s (longer than
//! the providers' 10 s lease TTL, so etcd expires every lease when it
//! resumes). The consumer must report stale within 10 s, never go empty
//! while every provider is alive (the mass expiry on resume is held while
//! the providers re-register), resume within 2 s of SIGCONT, and end with
//! every provider served and nothing held.

use std::time::{Duration, Instant};

use steadfast::{DirectoryStatus, DirectoryView, Engine, Reference, Registry};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";
const PROVIDERS: u16 = 3;

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
    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
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

    etcd.freeze().unwrap();
    let frozen = Instant::now();
    let mut stale_after = None;
    while frozen.elapsed() < Duration::from_secs(20) {
        let v = dir.view().await.unwrap();
        assert!(!v.endpoints.is_empty(), "a freeze never empties: {v:#?}");
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
    // Watch long enough for etcd to expire the leases, the providers to
    // re-register and any hold to end (grace 3 s).
    while thawed.elapsed() < Duration::from_secs(8) {
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
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let v = dir.view().await.unwrap();
    assert_eq!(v.endpoints.len(), PROVIDERS as usize, "all served: {v:#?}");
    assert!(!held(&v) && !stale(&v), "settled: {v:#?}");
    let resumed = resumed.unwrap();
    eprintln!(
        "engine on a 20 s etcd freeze: stale reported {stale_after:?} after SIGSTOP, resumed \
         {resumed:?} after SIGCONT; over the next 8 s at least {fewest} of {PROVIDERS} \
         endpoints served (mass expiry held on the way: {saw_hold}), re-registrations {}",
        providers.stats().reregistrations
    );
    assert!(
        resumed <= Duration::from_secs(2),
        "resumed after {resumed:?}"
    );
    consumer.shutdown().await;
}
