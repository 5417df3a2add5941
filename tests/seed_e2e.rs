//! The seed's reproduction over real sockets: consumer and provider engines
//! in one process, a real etcd as registry, the provider's metadata served
//! over HTTP behind a TCP proxy. The provider restarts on the same port and
//! deploys a changed service definition, so a new revision (revisions hash
//! only the definitions); the proxy blackholes the first metadata fetch for longer
//! than its timeout, then heals. The consumer must recover with no further
//! registry event, and calls must succeed.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpServer};
use steadfast::{
    DirectoryStatus, EmptyReason, Engine, ExportHandle, ExportSpec, FetchError, Reference,
    ServiceInfo,
};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_http::{metadata_scope, HttpMetadataFetcher, MetadataStore, DEFAULT_BASE_PATH};
use steadfast_testkit::TcpProxy;

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";
/// The consumer's metadata fetch deadline.
const FETCH_TIMEOUT: Duration = Duration::from_millis(400);
/// Longest a wait for a registration or a failed fetch polls: it only
/// bounds a failure (real etcd, a machine shared with other work).
const WAIT: Duration = Duration::from_secs(30);

/// The consumer's fetch backoff: 300 ms doubling to the default cap.
fn backoff() -> steadfast::BackoffPolicy {
    steadfast::BackoffPolicy {
        initial: Duration::from_millis(300),
        ..Default::default()
    }
}

/// One boot of the provider: its actix-web app (a greet route plus the
/// metadata scope) on `port`, and an engine that exports and registers it.
struct Provider {
    engine: Engine,
    export: ExportHandle,
    server: actix_web::dev::ServerHandle,
}

async fn boot_provider(
    etcd: &str,
    prefix: &str,
    (port, metadata_port): (u16, u16),
    methods: &str,
) -> Provider {
    let store = MetadataStore::new();
    let s = store.clone();
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("provider port free");
    let server = HttpServer::new(move || {
        App::new()
            .service(metadata_scope(DEFAULT_BASE_PATH, s.clone()))
            .route(
                "/demo.Greeter/greet",
                web::get().to(|| async { "hello from greeter" }),
            )
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)
    .expect("listen")
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let registry = EtcdRegistry::new(EtcdConfig::new([etcd]).with_prefix(prefix)).unwrap();
    let engine = Engine::builder()
        .registry(registry)
        .metadata_publisher(store)
        .start()
        .unwrap();
    let spec = ExportSpec::new(APP, "127.0.0.1", port)
        .metadata_port(metadata_port)
        .service(ServiceInfo {
            name: IFACE.into(),
            group: None,
            version: None,
            protocol: "http".into(),
            port,
            path: IFACE.into(),
            params: [("methods".to_string(), methods.to_string())].into(),
        });
    let export = engine.export(spec).await.unwrap();
    Provider {
        engine,
        export,
        server: handle,
    }
}

async fn poll<T>(limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(t) = f().await {
            return Some(t);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[actix_rt::test]
async fn provider_restart_with_blackholed_first_fetch_recovers_without_registry_event() {
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let prefix = unique_prefix();
    let port = free_port();
    let upstream: SocketAddr = ([127, 0, 0, 1], port).into();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let metadata_port = proxy.addr().port();

    let consumer = Engine::builder()
        .registry(
            EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix)).unwrap(),
        )
        .fetcher(
            HttpMetadataFetcher::builder()
                .timeout(FETCH_TIMEOUT)
                .build()
                .unwrap(),
        )
        .backoff(backoff())
        .start()
        .unwrap();
    let dir = consumer
        .subscribe(Reference::new(IFACE, "http", [APP]))
        .await
        .unwrap();
    let http = reqwest::Client::new();

    // Boot 1.
    let p1 = boot_provider(&etcd.endpoint(), &prefix, (port, metadata_port), "greet").await;
    let url = poll(WAIT, async || {
        dir.select().ok().map(|l| l.endpoint().clone())
    })
    .await
    .expect("boot 1 resolved");
    assert_eq!(url.port(), port);

    // Restart on the same port with a changed definition (a new method):
    // graceful stop, then a new boot whose first metadata fetch goes into a
    // blackhole.
    let report = p1.export.shutdown(Duration::from_secs(1)).await.unwrap();
    assert!(report.unregistered);
    p1.server.stop(true).await;
    p1.engine.shutdown().await;
    proxy.freeze();
    let p2 = boot_provider(
        &etcd.endpoint(),
        &prefix,
        (port, metadata_port),
        "greet,farewell",
    )
    .await;
    assert_ne!(
        p2.export.metadata().revision,
        p1.export.metadata().revision,
        "a changed definition is a new revision"
    );
    let new_boot = p2.export.instance().incarnation().unwrap().boot_id;

    let failed = poll(WAIT, async || match dir.status().await.ok()? {
        DirectoryStatus::Empty(EmptyReason::Unresolved(u)) if u.attempts >= 1 => Some(u),
        _ => None,
    })
    .await
    .expect("the blackholed fetch failed and the consumer says why");
    assert_eq!(
        failed.revisions,
        vec![p2.export.metadata().revision.clone()]
    );
    assert_eq!(failed.last_error, Some(FetchError::Timeout));
    let snapshots = consumer.stats().snapshots_received;

    proxy.restore();
    let healed = Instant::now();
    // The next retry comes within one backoff step (at most the cap, +25 %
    // jitter) and its fetch within the fetch deadline.
    let b = backoff();
    let recovery_limit = b.max.mul_f64(1.0 + b.jitter) + FETCH_TIMEOUT;
    let url = poll(recovery_limit, async || {
        let u = dir.select().ok()?.endpoint().clone();
        (u.param("steadfast.boot-id") == Some(new_boot.to_string())).then_some(u)
    })
    .await
    .expect("consumer recovered after the metadata path healed");
    let recovered_ms = healed.elapsed().as_millis();
    assert_eq!(
        consumer.stats().snapshots_received,
        snapshots,
        "recovered with no further registry event"
    );
    let body = http
        .get(format!(
            "http://{}:{}/{}/greet",
            url.host(),
            url.port(),
            url.path()
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "hello from greeter");
    assert!(proxy.accepted() >= 2);
    eprintln!("recovered {recovered_ms} ms after the proxy healed (bound {recovery_limit:?})");

    p2.export.shutdown(Duration::ZERO).await.unwrap();
    p2.server.stop(true).await;
    p2.engine.shutdown().await;
    consumer.shutdown().await;
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
