//! The Nacos config items this backend keeps, against a real rnacos: the
//! remote metadata report and the interface -> app mapping (Dubbo's
//! layout), merged on write and listened to.

use std::time::Duration;

use futures::StreamExt;
use steadfast_core::{FetchError, MappingStream, MetadataInfo, MetadataPublisher, Registry};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};

fn registry(server: &RnacosServer) -> NacosRegistry {
    NacosRegistry::new(NacosConfig::new([server.grpc_addr()]))
}

fn info(app: &str, revision: &str) -> MetadataInfo {
    serde_json::from_value(serde_json::json!({
        "app": app, "revision": revision, "services": {}
    }))
    .unwrap()
}

#[tokio::test]
async fn metadata_is_published_read_and_withdrawn() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    let provider = registry(&server).metadata_report();
    let consumer = registry(&server).metadata_report();
    let published = info("greeter", "abc123");
    MetadataPublisher::publish(&provider, published.clone())
        .await
        .unwrap();
    let read = consumer.fetch_revision("greeter", "abc123").await.unwrap();
    assert_eq!(read, published);
    assert!(matches!(
        consumer.fetch_revision("greeter", "other").await,
        Err(FetchError::UnknownRevision(_))
    ));
    MetadataPublisher::withdraw(&provider, "greeter", "abc123")
        .await
        .unwrap();
    assert!(matches!(
        consumer.fetch_revision("greeter", "abc123").await,
        Err(FetchError::UnknownRevision(_))
    ));
}

/// The next apps `stream` reports, within 10 s (errors skipped).
async fn next_apps(stream: &mut MappingStream) -> Vec<String> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(Ok(event))) => return event.apps,
            Ok(Some(Err(_))) => {}
            other => panic!("no mapping event within 10 s: {other:?}"),
        }
    }
}

#[tokio::test]
async fn mappings_merge_concurrent_writers_and_watchers_hear_every_change() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    let watcher = registry(&server);
    let mut stream = watcher.watch_mapping("demo.Greeter").await.unwrap();
    assert!(next_apps(&mut stream).await.is_empty());
    // Three providers of three apps write at once: none is lost for long
    // (rnacos has no compare-and-swap: an app a concurrent writer dropped
    // is written back at its client's next resync, 1 s here).
    let writers: Vec<NacosRegistry> = (0..3)
        .map(|_| {
            let mut c = NacosConfig::new([server.grpc_addr()]);
            c.resync_interval = Duration::from_secs(1);
            NacosRegistry::new(c)
        })
        .collect();
    let writes = writers
        .iter()
        .zip(["app-a", "app-b", "app-c"])
        .map(|(w, app)| w.register_mapping("demo.Greeter", app));
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    let mut apps = Vec::new();
    while apps != ["app-a", "app-b", "app-c"] {
        apps = next_apps(&mut stream).await;
    }
    // Registering again changes nothing; removing one is heard.
    writers[0]
        .register_mapping("demo.Greeter", "app-a")
        .await
        .unwrap();
    writers[1]
        .unregister_mapping("demo.Greeter", "app-b")
        .await
        .unwrap();
    while apps != ["app-a", "app-c"] {
        apps = next_apps(&mut stream).await;
    }
}

/// A report dubbo-go wrote (through Nacos's HTTP config API, as another
/// client would: `tag`, `lastUpdatedTime`, group and version as `""`)
/// reads as a service without group or version, keyed by its match key.
#[tokio::test]
async fn a_report_written_by_dubbo_go_reads_without_empty_group_or_version() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    let content = serde_json::json!({
        "app": "go-shop", "revision": "10527924560", "tag": "", "lastUpdatedTime": "x",
        "services": { "demo.Greeter:tri": {
            "name": "demo.Greeter", "group": "", "version": "", "protocol": "tri",
            "port": 21001, "path": "demo.Greeter", "params": { "Greet.timeout": "3000" }
        }}
    })
    .to_string();
    let url = format!("http://{}/nacos/v1/cs/configs", server.http_addr());
    let written = reqwest::Client::new()
        .post(url)
        .form(&[
            ("dataId", "go-shop"),
            ("group", "10527924560"),
            ("content", content.as_str()),
        ])
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("config write");
    assert!(written.status().is_success(), "{written:?}");
    let read = registry(&server)
        .metadata_report()
        .fetch_revision("go-shop", "10527924560")
        .await
        .unwrap();
    let s = &read.services["demo.Greeter:tri"];
    assert_eq!((s.group.as_deref(), s.version.as_deref()), (None, None));
    assert_eq!(s.port, 21001);
}
