//! The whole engine on a real etcd: a SIGKILL of etcd mid-watch keeps the
//! directory serving what it had (an outage never empties it), and after the
//! restart the engine resumes with nothing lost and nothing duplicated.

use std::time::{Duration, Instant};

use steadfast::{DirectoryView, Engine, Reference, Registry};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";

async fn wait_view(
    dir: &steadfast::Directory,
    what: &str,
    pred: impl Fn(&DirectoryView) -> bool,
) -> DirectoryView {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let v = dir.view().await.expect("directory open");
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}: {v:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn hosts(v: &DirectoryView) -> Vec<String> {
    let mut h: Vec<String> = v
        .endpoints
        .iter()
        .map(|u| u.instance_id().to_string())
        .collect();
    h.sort();
    h
}

#[actix_rt::test]
async fn etcd_killed_mid_watch_keeps_serving_and_resumes_without_loss_or_duplicates() {
    let mut etcd = EtcdServer::start().await.expect("etcd starts");
    let config = EtcdConfig::new([etcd.endpoint()]).with_prefix(unique_prefix());
    let registry = EtcdRegistry::new(config).unwrap();
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher)
        .start()
        .unwrap();
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    for port in [8001, 8002] {
        registry
            .register(instance_for(&info, "127.0.0.1", port))
            .await
            .unwrap();
    }
    wait_view(&dir, "two endpoints", |v| v.endpoints.len() == 2).await;

    etcd.kill().await.unwrap();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let v = dir.view().await.unwrap();
        assert_eq!(
            hosts(&v),
            ["127.0.0.1:8001", "127.0.0.1:8002"],
            "an outage never empties"
        );
    }

    etcd.restart().await.unwrap();
    registry
        .register(instance_for(&info, "127.0.0.1", 8003))
        .await
        .unwrap();
    let v = wait_view(&dir, "third endpoint after restart", |v| {
        v.endpoints.len() >= 3
    })
    .await;
    assert_eq!(
        hosts(&v),
        ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"],
        "nothing lost, nothing duplicated"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(dir.view().await.unwrap().endpoints.len(), 3);
    engine.shutdown().await;
}
