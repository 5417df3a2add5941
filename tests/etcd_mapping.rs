//! The interface -> app mapping through the whole engine on a real etcd:
//! an export writes the mapping; a consumer whose reference names no app
//! finds the provider through it; a second app exported later is added;
//! with etcd frozen (SIGSTOP) the mapping read fails under its sub-second
//! deadline and the status says so, and once etcd is thawed the consumer
//! finds the provider. Real time, bounded: every deadline is sub-second.

use std::time::{Duration, Instant};

use steadfast::{
    BackoffPolicy, DirectoryStatus, DirectoryView, EmptyReason, Engine, ExportSpec, Reference,
    ServiceInfo,
};
use steadfast_core::Pending;
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::ScriptedFetcher;

const IFACE: &str = "demo.Greeter";

/// Sub-second deadlines, a probe every 200 ms.
fn etcd_config(endpoint: String, prefix: &str) -> EtcdConfig {
    let mut c = EtcdConfig::new([endpoint]).with_prefix(prefix);
    c.request_timeout = Duration::from_millis(400);
    c.watch_open_timeout = Duration::from_millis(400);
    c.operation_timeout = Duration::from_millis(800);
    c.liveness_probe_interval = Some(Duration::from_millis(200));
    c.probe_timeout = Duration::from_millis(200);
    c.backoff = BackoffPolicy {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(400),
        multiplier: 2.0,
        jitter: 0.1,
    };
    c
}

/// An engine on `registry` with sub-second registry deadlines and backoff.
fn engine(registry: EtcdRegistry, fetcher: &ScriptedFetcher) -> Engine {
    Engine::builder()
        .registry(registry)
        .fetcher(fetcher.clone())
        .metadata_publisher(fetcher.clone())
        .registry_call_timeout(Duration::from_millis(600))
        .registry_backoff(BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
            multiplier: 2.0,
            jitter: 0.1,
        })
        .start()
        .expect("engine starts")
}

fn spec(app: &str, port: u16) -> ExportSpec {
    ExportSpec::new(app, "127.0.0.1", port).service(ServiceInfo {
        name: IFACE.into(),
        group: None,
        version: None,
        protocol: "tri".into(),
        port,
        path: IFACE.into(),
        params: Default::default(),
    })
}

fn unnamed() -> Reference {
    Reference::new(IFACE, "tri", Vec::<String>::new())
}

fn ports(v: &DirectoryView) -> Vec<u16> {
    let mut p: Vec<u16> = v.endpoints.iter().map(|u| u.port()).collect();
    p.sort_unstable();
    p
}

async fn wait_view(
    dir: &steadfast::Directory,
    what: &str,
    limit: Duration,
    pred: impl Fn(&DirectoryView) -> bool,
) -> DirectoryView {
    let end = Instant::now() + limit;
    loop {
        let v = dir.view().await.expect("directory open");
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}: {v:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until etcd holds the mapping key of `app`.
async fn wait_mapping_key(registry: &EtcdRegistry, app: &str) {
    let key = registry.layout().mapping_key(IFACE, app);
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let r = registry.client().get(key.as_bytes()).await;
        if r.is_ok_and(|r| r.kvs.first().is_some_and(|kv| kv.value == app.as_bytes())) {
            return;
        }
        assert!(Instant::now() < end, "mapping key {key} not written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[actix_rt::test]
async fn export_writes_the_mapping_and_a_consumer_without_apps_follows_it() {
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let prefix = unique_prefix();
    let fetcher = ScriptedFetcher::new();
    let provider_registry = EtcdRegistry::new(etcd_config(etcd.endpoint(), &prefix)).unwrap();
    let providers = engine(provider_registry.clone(), &fetcher);
    let _a = providers.export(spec("greeter", 9100)).await.unwrap();
    wait_mapping_key(&provider_registry, "greeter").await;

    let consumer = engine(
        EtcdRegistry::new(etcd_config(etcd.endpoint(), &prefix)).unwrap(),
        &fetcher,
    );
    let dir = consumer.subscribe(unnamed()).await.unwrap();
    let v = wait_view(&dir, "the provider", Duration::from_secs(5), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![9100]);

    // A second app exported later: the consumer adds it.
    let _b = providers.export(spec("greeter-b", 9200)).await.unwrap();
    wait_mapping_key(&provider_registry, "greeter-b").await;
    wait_view(&dir, "both apps", Duration::from_secs(5), |v| {
        ports(v) == vec![9100, 9200]
    })
    .await;
    assert_eq!(consumer.stats().resolvers_alive, 2);
    consumer.shutdown().await;
    providers.shutdown().await;
}

#[actix_rt::test]
async fn a_frozen_etcd_makes_the_mapping_read_fail_and_the_status_says_so_until_thawed() {
    let mut etcd = EtcdServer::start().await.expect("etcd starts");
    let prefix = unique_prefix();
    let fetcher = ScriptedFetcher::new();
    let provider_registry = EtcdRegistry::new(etcd_config(etcd.endpoint(), &prefix)).unwrap();
    let providers = engine(provider_registry.clone(), &fetcher);
    let _a = providers.export(spec("greeter", 9100)).await.unwrap();
    wait_mapping_key(&provider_registry, "greeter").await;

    etcd.freeze().unwrap();
    let consumer = engine(
        EtcdRegistry::new(etcd_config(etcd.endpoint(), &prefix)).unwrap(),
        &fetcher,
    );
    let dir = consumer.subscribe(unnamed()).await.unwrap();
    let v = wait_view(
        &dir,
        "a failing mapping read",
        Duration::from_secs(3),
        |v| {
            matches!(
                &v.status,
                DirectoryStatus::Empty(EmptyReason::Pending(Pending {
                    mapping: Some(f),
                    ..
                })) if f.attempts >= 2
            )
        },
    )
    .await;
    assert!(
        v.status
            .to_string()
            .contains("interface mapping read failing"),
        "{}",
        v.status
    );
    // It stays so while etcd is frozen (never a false "no app").
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s = dir.view().await.unwrap().status;
        assert!(
            matches!(&s, DirectoryStatus::Empty(EmptyReason::Pending(p)) if p.mapping.is_some()),
            "{s:?}"
        );
    }

    etcd.thaw().unwrap();
    let t0 = Instant::now();
    let v = wait_view(
        &dir,
        "the provider after the thaw",
        Duration::from_secs(5),
        |v| v.status.is_ready(),
    )
    .await;
    assert_eq!(ports(&v), vec![9100]);
    let healed = t0.elapsed();
    eprintln!("consumer ready {healed:?} after SIGCONT");
    assert!(healed < Duration::from_secs(3), "healed after {healed:?}");
    consumer.shutdown().await;
    providers.shutdown().await;
}
