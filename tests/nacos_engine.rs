//! The whole engine on a real rnacos, configured as users do
//! (`STEADFAST_REGISTRY=nacos://host:port`): providers registered by
//! another client appear in a directory; a SIGKILL of the server never
//! empties it; after the restart both clients redo their registrations and
//! subscriptions and the directory converges with nothing lost or
//! duplicated; one-shot lookups answer from Nacos, and a cold start with
//! the server down serves the disk snapshot a previous engine wrote until
//! the live state replaces it.

// The engine's Nacos configuration (`ConfiguredRegistry::Nacos`) needs the
// facade's `nacos` feature.
#![cfg(feature = "nacos")]

mod common;

use std::time::{Duration, Instant};

use steadfast::{Reference, Registry};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";
/// An app only looked up, never subscribed.
const LOOKED_UP: &str = "catalog";

#[actix_rt::test]
async fn an_engine_on_nacos_survives_a_server_kill_and_redoes_everything() {
    let mut server = RnacosServer::start().await.expect("rnacos starts");
    let url = format!(
        "nacos://{}?namespace=public&group=DEFAULT_GROUP",
        server.http_addr()
    );
    let built = common::config_from(&[("STEADFAST_REGISTRY", url)])
        .build()
        .unwrap();
    assert!(matches!(
        built.registry,
        steadfast::ConfiguredRegistry::Nacos(_)
    ));
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
    let engine = built.builder.fetcher(fetcher).start().unwrap();
    let backend = engine.inspect().await.unwrap().registry.backend;
    assert_eq!(backend.kind, "nacos");
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    // The providers are another process: their own client.
    let providers = NacosRegistry::new(NacosConfig::new([server.grpc_addr()]));
    let register = |port| {
        let providers = providers.clone();
        let inst = instance_for(&info, "127.0.0.1", port);
        async move {
            let end = Instant::now() + Duration::from_secs(10);
            while let Err(e) = providers.register(inst.clone()).await {
                assert!(Instant::now() < end, "never registered: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    register(8001).await;
    register(8002).await;
    common::wait_for(&dir, "two endpoints", Duration::from_secs(20), |v| {
        v.endpoints.len() == 2
    })
    .await;

    server.kill().await.unwrap();
    common::keeps_serving(&dir, &["127.0.0.1:8001", "127.0.0.1:8002"]).await;
    server.restart().await.unwrap();
    register(8003).await;
    let v = common::wait_for(
        &dir,
        "three endpoints after the restart",
        Duration::from_secs(20),
        |v| v.endpoints.len() >= 3,
    )
    .await;
    assert_eq!(
        common::instance_ids(&v),
        ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"],
        "nothing lost, nothing duplicated"
    );
    assert!(providers.stats().redone_registrations >= 2);
    engine.shutdown().await;
}

/// The interface -> app mapping through the whole engine on Nacos: an
/// export writes it (Dubbo's item: data id = the interface, group
/// `mapping`) along with the instance and the metadata report; a consumer
/// whose reference names no app finds the provider through it, and a
/// second app exported later is added.
#[actix_rt::test]
async fn a_consumer_without_apps_follows_the_mapping_exports_write_on_nacos() {
    use steadfast::{ExportSpec, ServiceInfo};
    let server = RnacosServer::start().await.expect("rnacos starts");
    let config = NacosConfig::new([server.grpc_addr()]);
    let spec = |app: &str, port: u16| {
        ExportSpec::new(app, "127.0.0.1", port).service(ServiceInfo {
            name: IFACE.into(),
            group: None,
            version: None,
            protocol: "tri".into(),
            port,
            path: IFACE.into(),
            params: Default::default(),
        })
    };
    // The provider publishes its metadata to the Nacos report only; the
    // consumer reads it there.
    let providers_registry = NacosRegistry::new(config.clone());
    let providers = steadfast::Engine::builder()
        .registry(providers_registry.clone())
        .fetcher(ScriptedFetcher::new())
        .metadata_publisher(providers_registry.metadata_report())
        .start()
        .unwrap();
    let _a = providers.export(spec("greeter", 9100)).await.unwrap();
    let consumer_registry = NacosRegistry::new(config);
    let consumer = steadfast::Engine::builder()
        .registry(consumer_registry.clone())
        .fetcher(consumer_registry.metadata_report())
        .start()
        .unwrap();
    let dir = consumer
        .subscribe(Reference::new(IFACE, "tri", Vec::<String>::new()))
        .await
        .unwrap();
    let v = common::wait_for(&dir, "the provider", Duration::from_secs(20), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(common::ports(&v), [9100]);
    let _b = providers.export(spec("greeter-b", 9200)).await.unwrap();
    let v = common::wait_for(&dir, "the second app", Duration::from_secs(20), |v| {
        v.endpoints.len() == 2
    })
    .await;
    assert_eq!(common::ports(&v), [9100, 9200]);
    consumer.shutdown().await;
    providers.shutdown().await;
}

/// A unique directory under the system temp dir, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!(
            "steadfast-nacos-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn served_from_snapshot(v: &steadfast::DirectoryView) -> bool {
    matches!(
        &v.status,
        steadfast::DirectoryStatus::Ready {
            snapshot: Some(_),
            ..
        }
    )
}

/// The lookup cache and the disk snapshot on Nacos. An engine answers a
/// one-shot `instances` from the server and writes its directory's state
/// to disk. With the server killed, a new engine on the same directory
/// serves that snapshot (marked as such, no metadata fetched); once the
/// server is back and the providers' client has redone its registrations,
/// the live state replaces the snapshot and lookups answer from Nacos
/// again.
#[actix_rt::test]
async fn lookups_and_a_cold_start_from_the_disk_snapshot_on_nacos() {
    use steadfast_core::{Freshness, Source};
    let mut server = RnacosServer::start().await.expect("rnacos starts");
    let dir = TempDir::new("snapshot");
    let url = format!("nacos://{}", server.http_addr());
    let config = common::config_from(&[("STEADFAST_REGISTRY", url)]);
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    let providers = NacosRegistry::new(NacosConfig::new([server.grpc_addr()]));
    let catalog = steadfast::ServiceInstance::new(LOOKED_UP, "127.0.0.1", 8101);
    for inst in [
        instance_for(&info, "127.0.0.1", 8001),
        instance_for(&info, "127.0.0.1", 8002),
        catalog,
    ] {
        let end = Instant::now() + Duration::from_secs(10);
        while let Err(e) = providers.register(inst.clone()).await {
            assert!(Instant::now() < end, "never registered: {e}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let start = |fetcher: ScriptedFetcher| {
        config
            .build()
            .unwrap()
            .builder
            .snapshot_dir(&dir.0)
            .fetcher(fetcher)
            .start()
            .unwrap()
    };

    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
    let first = start(fetcher);
    let d = first
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    common::wait_for(&d, "two endpoints", Duration::from_secs(20), |v| {
        v.endpoints.len() == 2
    })
    .await;
    // An app nobody subscribed to: a registry call, not the watch.
    let answer = first.instances(LOOKED_UP).await.expect("a lookup on Nacos");
    assert_eq!(
        (answer.source, answer.freshness, answer.instances.len()),
        (Source::Registry, Freshness::Fresh, 1)
    );
    let end = Instant::now() + Duration::from_secs(20);
    while first.stats().snapshot_written == 0 {
        assert!(Instant::now() < end, "no snapshot written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.shutdown().await;

    server.kill().await.unwrap();
    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
    let second = start(fetcher);
    let d = second
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    let v = common::wait_for(&d, "the snapshot", Duration::from_secs(20), |v| {
        v.status.is_ready()
    })
    .await;
    assert!(served_from_snapshot(&v), "{}", v.status);
    assert_eq!(
        common::instance_ids(&v),
        ["127.0.0.1:8001", "127.0.0.1:8002"]
    );
    assert_eq!(second.stats().fetch_attempts, 0, "no fetch for a snapshot");

    server.restart().await.unwrap();
    let v = common::wait_for(&d, "the live state", Duration::from_secs(30), |v| {
        v.status.is_ready() && !served_from_snapshot(v)
    })
    .await;
    assert_eq!(
        common::instance_ids(&v),
        ["127.0.0.1:8001", "127.0.0.1:8002"]
    );
    // The new engine's first lookups may have met the server down (an
    // error naming it, then throttled): within a bound it answers.
    let end = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        match second.instances(LOOKED_UP).await {
            Ok(a) => break a,
            Err(e) => assert!(Instant::now() < end, "no lookup answer: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        (answer.source, answer.freshness, answer.instances.len()),
        (Source::Registry, Freshness::Fresh, 1)
    );
    second.shutdown().await;
}
