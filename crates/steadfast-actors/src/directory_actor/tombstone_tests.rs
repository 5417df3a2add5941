//! The directory actor's closing handler and its one tombstone timer, in
//! virtual time: a caller's closing notice removes the endpoint at once,
//! the TTL is read when the tombstone is written, and the expiry re-adds
//! the endpoint with no further update.

use std::time::Duration;

use steadfast_core::{
    Change, Closing, ClosingSource, DirectoryUpdate, Endpoint, NoEndpoint, NoEndpointReason,
    ServiceInfo, ServiceInstance, UpdateState, Version,
};

use super::*;
use crate::handle::Directory;
use crate::live_config::{CallerConfig, LiveConfig};

use super::tests::{lone_resolver, AsResolver};

fn endpoint(port: u16) -> Endpoint {
    let svc = ServiceInfo {
        name: "demo.S".into(),
        group: None,
        version: None,
        protocol: "tri".into(),
        port: 1,
        path: "demo.S".into(),
        params: Default::default(),
    };
    let mut i = ServiceInstance::new("a", "127.0.0.1", port);
    steadfast_core::Incarnation {
        export_ms: 5,
        boot_id: "b".into(),
        created: None,
    }
    .stamp(&mut i.metadata);
    Arc::new(ServiceUrl::build(&i, &svc))
}

fn full(key: &str, version: u64, urls: Vec<Endpoint>) -> AsResolver {
    AsResolver(DirectoryUpdate {
        app: "a".into(),
        subscribe_key: key.into(),
        change: Change::Reset {
            version: Version::at(version),
            items: urls,
        },
        state: UpdateState::Resolved,
        stale_since: None,
        held: None,
        closing: Vec::new(),
        snapshot: None,
    })
}

async fn settle() {
    for _ in 0..50 {
        actix_rt::task::yield_now().await;
    }
}

fn ports(dir: &Directory) -> Vec<u16> {
    let s = dir.snapshot().expect("open");
    let mut p: Vec<u16> = s.iter().map(|u| u.instance.port()).collect();
    p.sort_unstable();
    p
}

#[actix_rt::test]
async fn a_closing_notice_tombstones_and_the_one_timer_re_adds_at_the_ttl_read_then() {
    tokio::time::pause();
    let stats = Arc::new(EngineStats::default());
    let reference = Reference::new("demo.S", "tri", ["a"]);
    let key = reference.subscribe_key();
    let resolver = lone_resolver(&stats);
    let config = LiveConfig::new(CallerConfig {
        tombstone_ttl: Duration::from_secs(5),
        ..CallerConfig::default()
    });
    let shared = Arc::new(DirectoryShared::new(config.clone()));
    let addr = DirectoryActor::new(
        7,
        &reference,
        vec![resolver.downgrade()],
        shared.clone(),
        1,
        stats.clone(),
    )
    .start();
    let dir = Directory::new(reference, addr.downgrade(), shared);
    settle().await;
    addr.do_send(full(&key, 1, vec![endpoint(1), endpoint(2)]));
    settle().await;
    assert_eq!(ports(&dir), vec![1, 2]);
    let timers = stats.snapshot().timers_pending;

    let one = endpoint(1);
    addr.do_send(EndpointClosing(Closing::of(
        &one,
        &key,
        ClosingSource::Call,
    )));
    settle().await;
    assert_eq!(ports(&dir), vec![2], "removed at once");
    // The TTL is read when the tombstone is written: a change now does not
    // move it.
    config.store(CallerConfig {
        tombstone_ttl: Duration::from_secs(60),
        ..CallerConfig::default()
    });
    let two = endpoint(2);
    addr.do_send(EndpointClosing(Closing::of(
        &two,
        &key,
        ClosingSource::Call,
    )));
    // A second notice for what is no longer held writes nothing.
    addr.do_send(EndpointClosing(Closing::of(
        &one,
        &key,
        ClosingSource::Call,
    )));
    settle().await;
    assert!(ports(&dir).is_empty());
    let status = dir.snapshot().expect("open").status().clone();
    assert_eq!(
        NoEndpoint::of_status(&status).map(|e| e.reason),
        Some(NoEndpointReason::AllClosing { closing: 2 })
    );
    let s = stats.snapshot();
    assert_eq!((s.tombstones_written, s.closings_ignored), (2, 1));
    assert_eq!(
        s.timers_pending,
        timers + 1,
        "one timer for every tombstone"
    );

    tokio::time::advance(Duration::from_millis(4_990)).await;
    settle().await;
    assert!(ports(&dir).is_empty(), "still vetoed before the TTL");
    tokio::time::advance(Duration::from_millis(20)).await;
    settle().await;
    assert_eq!(ports(&dir), vec![1], "back at 5 s, with no update");
    assert_eq!(
        stats.snapshot().timers_pending,
        timers + 1,
        "re-armed for :2"
    );
    tokio::time::advance(Duration::from_secs(55)).await;
    settle().await;
    assert_eq!(ports(&dir), vec![1, 2]);
    let s = stats.snapshot();
    assert_eq!((s.tombstones_expired, s.vetoed_readds_replayed), (2, 2));
    assert_eq!(s.timers_pending, timers, "no timer left behind");
    addr.send(Shutdown).await.expect("delivered");
}
