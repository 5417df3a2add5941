//! The real HTTP fetcher driving the whole engine: one provider instance's
//! metadata is served by a MetadataServer, the other's by a server that
//! answers malformed JSON. The directory must serve the good instance and
//! report the bad revision as degraded.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use steadfast_actors::{DirectoryView, Engine};
use steadfast_core::{DirectoryStatus, FetchError, Reference};
use steadfast_http::{HttpMetadataFetcher, MetadataServer, MetadataStore, DEFAULT_BASE_PATH};
use steadfast_memory::MemoryRegistry;
use support::{instance, metadata, BadServer, Reply, APP, IFACE};

/// The view once the bad revision's fetch has failed as malformed.
fn settled(view: &DirectoryView, bad_revision: &str) -> bool {
    match &view.status {
        DirectoryStatus::Ready { degraded, .. } => degraded.iter().any(|(app, u)| {
            app == APP
                && u.revisions == [bad_revision]
                && matches!(u.last_error, Some(FetchError::Malformed(_)))
        }),
        DirectoryStatus::Empty(_) => false,
    }
}

#[actix_rt::test]
async fn directory_serves_the_good_instance_and_degrades_the_malformed_revision() {
    let good_info = metadata(APP, 20001, "good");
    let bad_info = metadata(APP, 20002, "bad");
    assert_ne!(good_info.revision, bad_info.revision);

    let store = MetadataStore::new();
    store.publish(good_info.clone());
    let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = MetadataServer::start(bind, DEFAULT_BASE_PATH, store).expect("server");
    let bad = BadServer::start(Reply::ok(b"{\"app\": \"greeter\", \"revision\": ")).await;

    let good_inst = instance(&good_info, "127.0.0.1", 20001, server.local_addr().port());
    let bad_inst = instance(&bad_info, "127.0.0.1", 20002, bad.port());
    let registry = MemoryRegistry::new();
    registry.put(good_inst.clone());
    registry.put(bad_inst);

    let fetcher = HttpMetadataFetcher::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .expect("fetcher");
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .fetch_timeout(Duration::from_secs(2))
        .seed(7)
        .start()
        .expect("engine");
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .expect("subscribe");

    let start = Instant::now();
    let view = loop {
        let view = dir.view().await.expect("directory open");
        if settled(&view, &bad_info.revision) {
            break view;
        }
        // A generous failure bound (real time on a machine shared with
        // other work): many times the 1 s fetch and 2 s engine deadlines.
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "directory did not settle; last view: {view:#?}; metrics: {:?}",
            fetcher.metrics()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("directory settled after {:?}", start.elapsed());

    assert_eq!(view.endpoints.len(), 1, "{view:#?}");
    let url = &view.endpoints[0];
    assert_eq!(url.instance_id(), good_inst.id);
    assert_eq!((url.host(), url.port()), ("127.0.0.1", 20001));
    assert_eq!(url.protocol(), "tri");
    assert!(matches!(
        view.status,
        DirectoryStatus::Ready { endpoints: 1, .. }
    ));
    assert!(bad.accepted() >= 1);
    let m = fetcher.metrics();
    assert!(m.by_label("malformed") >= Some(1), "{m:?}");
    assert!(m.successes >= 1, "{m:?}");

    engine.shutdown().await;
    server.stop(true).await;
}
