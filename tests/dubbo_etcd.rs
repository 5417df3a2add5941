//! Dubbo 3 providers on a real etcd, as Java and dubbo-go write them
//! (`/services/<app>/<host>:<port>` under a lease; Java's Gson spelling and
//! Go's capitalised one): a consumer engine with the default fetcher reads
//! both, fetches their MetadataInfo over Triple (MetadataServiceV2, here
//! served in process) and serves both endpoints. A record whose embedded
//! Dubbo metadata does not parse is skipped; the others stay served.

#![cfg(all(feature = "etcd", feature = "dubbo"))]

mod common;

use std::time::Duration;

use steadfast::dubbo::TripleMetadataServer;
use steadfast::http::MetadataStore;
use steadfast::{Engine, MetadataInfo, Reference, ServiceInfo};
use steadfast_etcd::harness::EtcdServer;
use steadfast_etcd::{EtcdConfig, EtcdRegistry};

const APP: &str = "dubbo-estate";
const IFACE: &str = "org.example.Greeter";

fn java(port: u16, metadata_port: u16, revision: &str) -> String {
    serde_json::json!({
        "serviceName": APP, "host": "127.0.0.1", "port": port, "enabled": true, "healthy": true,
        "metadata": {
            "dubbo.metadata.revision": revision,
            "dubbo.metadata.storage-type": "local",
            "dubbo.endpoints": format!(r#"[{{"port":{port},"protocol":"tri"}}]"#),
            "dubbo.metadata-service.url-params":
                format!(r#"{{"version":"2.0.0","port":"{metadata_port}","protocol":"tri"}}"#),
            "meta-v": "2.0.0",
            "timestamp": "1733200000000"
        }
    })
    .to_string()
}

fn go(port: u16, metadata_port: u16, revision: &str) -> String {
    serde_json::json!({
        "ID": format!("127.0.0.1:{port}"), "ServiceName": APP, "Host": "127.0.0.1", "Port": port,
        "Weight": 0, "Enable": true, "Healthy": true,
        "Metadata": {
            "dubbo.metadata.revision": revision,
            "dubbo.metadata-service.url-params":
                format!(r#"{{"port":"{metadata_port}","protocol":"tri"}}"#),
            "meta-v": "2.0.0"
        },
        "ServiceMetadata": { "app": APP, "revision": revision, "services": {} },
        "Address": format!("127.0.0.1:{port}"), "GroupName": "", "Tag": ""
    })
    .to_string()
}

#[actix_rt::test]
async fn java_and_go_records_on_etcd_resolve_over_triple() {
    let etcd = EtcdServer::start().await.expect("etcd starts");
    // Dubbo's own layout: no prefix, `/services/<app>/<host>:<port>`.
    let registry = EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix("")).unwrap();
    let client = registry.client().clone();

    // The providers' MetadataServiceV2 (one revision per provider: Java's
    // revision and Go's differ even for the same services).
    let store = MetadataStore::new();
    let service = |port: u16| {
        ServiceInfo::builder(IFACE, port)
            .protocol("tri")
            .path(IFACE)
            .param("methods", "Greet")
            .build()
    };
    let java_info = MetadataInfo::new(APP, [service(20001)]);
    let mut go_info = MetadataInfo::new(APP, [service(0)]);
    go_info.revision = "9673005772".into(); // the old decimal CRC form
    store.publish(java_info.clone());
    store.publish(go_info.clone());
    let triple = TripleMetadataServer::start("127.0.0.1:0".parse().unwrap(), store)
        .await
        .unwrap();
    let mport = triple.local_addr().port();

    let lease = client.lease_grant(30).await.unwrap().id;
    let put = |port: u16, value: String| {
        let client = client.clone();
        async move {
            let key = format!("/services/{APP}/127.0.0.1:{port}");
            client
                .put(key.as_bytes(), value.as_bytes(), lease)
                .await
                .unwrap();
        }
    };
    put(20001, java(20001, mport, &java_info.revision)).await;
    put(20002, go(20002, mport, &go_info.revision)).await;
    // A Java record whose url-params is not JSON: skipped, nothing else lost.
    let broken =
        java(20003, mport, &java_info.revision).replace(r#"{\"version\""#, r#"[{\"version\""#);
    put(20003, broken).await;

    let engine = Engine::builder()
        .registry(registry.clone())
        .start()
        .unwrap();
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    let view = common::wait_for(&dir, "both providers", Duration::from_secs(30), |v| {
        v.endpoints.len() == 2
    })
    .await;
    // Java's service names its port; Go's (0) takes the instance port.
    assert_eq!(common::ports(&view), vec![20001, 20002]);
    assert!(
        registry.stats().invalid_records >= 1,
        "the broken record is skipped and counted"
    );
    engine.shutdown().await;
    triple.stop().await;
}

/// A dubbo-go provider with `storage-type=remote` whose MetadataService
/// Steadfast cannot call (V1 over the `dubbo` protocol): its MetadataInfo
/// is read from dubbo-go's etcd report (`/dubbo/<app>/<revision>`), by an
/// engine configured as users do (`STEADFAST_ETCD_PREFIX=/`: Dubbo's keys).
#[actix_rt::test]
async fn a_remote_storage_go_provider_resolves_from_the_etcd_report() {
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let client = EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix("")).unwrap();
    let client = client.client().clone();
    let revision = "10527924560";
    let report = serde_json::json!({
        "app": APP, "revision": revision, "tag": "",
        "services": { format!("{IFACE}:tri"): {
            "name": IFACE, "group": "", "version": "", "protocol": "tri", "port": 21001,
            "path": IFACE, "params": { "methods": "Greet" }
        }}
    });
    let key = format!("/dubbo/{APP}/{revision}");
    client
        .put(key.as_bytes(), report.to_string().as_bytes(), 0)
        .await
        .unwrap();
    let record = serde_json::json!({
        "ID": "127.0.0.1:21001", "ServiceName": APP, "Host": "127.0.0.1", "Port": 21001,
        "Enable": true, "Healthy": true,
        "Metadata": {
            "dubbo.metadata.revision": revision,
            "dubbo.metadata.storage-type": "remote",
            "dubbo.metadata-service.url-params": r#"{"port":"28001","protocol":"dubbo"}"#
        }
    });
    let lease = client.lease_grant(30).await.unwrap().id;
    let key = format!("/services/{APP}/127.0.0.1:21001");
    client
        .put(key.as_bytes(), record.to_string().as_bytes(), lease)
        .await
        .unwrap();

    let engine = common::config_from(&[
        (
            "STEADFAST_REGISTRY",
            format!("etcd://{}", etcd.client_addr()),
        ),
        ("STEADFAST_ETCD_PREFIX", "/".to_string()),
    ])
    .builder()
    .unwrap()
    .start()
    .unwrap();
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    let view = common::wait_for(
        &dir,
        "the remote-storage provider",
        Duration::from_secs(30),
        |v| !v.endpoints.is_empty(),
    )
    .await;
    assert_eq!(common::ports(&view), vec![21001]);
    engine.shutdown().await;
}

/// A Steadfast provider exported for Dubbo consumers on etcd
/// (`dubbo_triple`, Dubbo's key layout): its record carries Java's and Go's
/// fields beside Steadfast's. A consumer engine resolves it, and the same
/// record cut down to the fields Java's Gson writes resolves too.
#[actix_rt::test]
async fn a_dubbo_export_on_etcd_is_read_by_both_spellings() {
    use steadfast::ExportSpec;

    let etcd = EtcdServer::start().await.expect("etcd starts");
    let registry =
        || EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix("")).unwrap();
    let store = MetadataStore::new();
    let triple = TripleMetadataServer::start("127.0.0.1:0".parse().unwrap(), store.clone())
        .await
        .unwrap();
    let provider = Engine::builder()
        .registry(registry())
        .metadata_publisher(store)
        .start()
        .unwrap();
    let service = ServiceInfo::builder(IFACE, 20101)
        .protocol("tri")
        .path(IFACE)
        .build();
    let _export = provider
        .export(
            ExportSpec::new(APP, "127.0.0.1", 20101)
                .service(service)
                .dubbo_triple(triple.local_addr().port()),
        )
        .await
        .unwrap();

    let consumer_registry = registry();
    let client = consumer_registry.client().clone();
    let key = format!("/services/{APP}/127.0.0.1:20101");
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let stored = loop {
        if let Some(kv) = client.get(key.as_bytes()).await.unwrap().kvs.first() {
            break kv.value.clone();
        }
        assert!(std::time::Instant::now() < end, "the export never appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let json: serde_json::Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(json["serviceName"], APP);
    assert_eq!(json["metadata"]["meta-v"], "2.0.0");
    // Java's Gson fields only, under another instance key.
    let java: serde_json::Map<String, serde_json::Value> = [
        "serviceName",
        "host",
        "port",
        "enabled",
        "healthy",
        "metadata",
    ]
    .iter()
    .map(|k| (k.to_string(), json[*k].clone()))
    .collect();
    let lease = client.lease_grant(30).await.unwrap().id;
    let java_key = format!("/services/{APP}/127.0.0.1:20102");
    client
        .put(
            java_key.as_bytes(),
            serde_json::Value::from(java).to_string().as_bytes(),
            lease,
        )
        .await
        .unwrap();

    let consumer = Engine::builder()
        .registry(consumer_registry)
        .start()
        .unwrap();
    let dir = consumer
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    let view = common::wait_for(&dir, "both records", Duration::from_secs(30), |v| {
        v.endpoints.len() == 2
    })
    .await;
    let mut ids = common::instance_ids(&view);
    ids.sort();
    assert_eq!(ids, vec!["127.0.0.1:20101", "127.0.0.1:20102"]);
    consumer.shutdown().await;
    provider.shutdown().await;
    triple.stop().await;
}
