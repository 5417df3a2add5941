//! The whole engine on a real etcd: a SIGKILL of etcd mid-watch keeps the
//! directory serving what it had (an outage never empties it), and after the
//! restart the engine resumes with nothing lost and nothing duplicated.

mod common;

use std::time::Duration;

use steadfast::{Engine, Reference, Registry};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";

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
    common::wait_for(&dir, "two endpoints", Duration::from_secs(20), |v| {
        v.endpoints.len() == 2
    })
    .await;

    etcd.kill().await.unwrap();
    common::keeps_serving(&dir, &["127.0.0.1:8001", "127.0.0.1:8002"]).await;

    etcd.restart().await.unwrap();
    registry
        .register(instance_for(&info, "127.0.0.1", 8003))
        .await
        .unwrap();
    let v = common::wait_for(
        &dir,
        "third endpoint after restart",
        Duration::from_secs(20),
        |v| v.endpoints.len() >= 3,
    )
    .await;
    assert_eq!(
        common::instance_ids(&v),
        ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"],
        "nothing lost, nothing duplicated"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(dir.view().await.unwrap().endpoints.len(), 3);
    engine.shutdown().await;
}
