//! The interface -> app mapping through the whole engine on a real etcd:
//! an export writes the mapping; a consumer whose reference names no app
//! finds the provider through it; a second app exported later is added;
//! with etcd frozen (SIGSTOP) the mapping read fails under its sub-second
//! deadline and the status says so, and once etcd is thawed the consumer
//! finds the provider. Real time: every deadline is sub-second, and every
//! wait is bounded by [`WAIT`] (a failure bound, never a claim about speed)
//! or by the deadlines of what it measures with headroom (tests share two
//! cores with other CPU-heavy work).

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

/// Longest any wait of these tests polls before failing: it only bounds a
/// failure, so it is many times every deadline below.
const WAIT: Duration = Duration::from_secs(20);
/// The engine's deadline of one registry call (the mapping read included).
const CALL_TIMEOUT: Duration = Duration::from_millis(600);
/// The engine's registry backoff (its cap bounds the wait between reads).
const BACKOFF_MAX: Duration = Duration::from_millis(400);
/// The etcd client's liveness probe cadence and deadline.
const PROBE_EVERY: Duration = Duration::from_millis(200);
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// Sub-second deadlines, a probe every 200 ms.
fn etcd_config(endpoint: String, prefix: &str) -> EtcdConfig {
    let mut c = EtcdConfig::new([endpoint]).with_prefix(prefix);
    c.request_timeout = Duration::from_millis(400);
    c.watch_open_timeout = Duration::from_millis(400);
    c.operation_timeout = Duration::from_millis(800);
    c.liveness_probe_interval = Some(PROBE_EVERY);
    c.probe_timeout = PROBE_TIMEOUT;
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
        .registry_call_timeout(CALL_TIMEOUT)
        .registry_backoff(BackoffPolicy {
            initial: Duration::from_millis(100),
            max: BACKOFF_MAX,
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
    let start = Instant::now();
    loop {
        let v = dir.view().await.expect("directory open");
        if pred(&v) {
            eprintln!("{what}: after {:?}", start.elapsed());
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}: {v:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until etcd holds the mapping key of `app`.
async fn wait_mapping_key(registry: &EtcdRegistry, app: &str) {
    let key = registry.layout().mapping_key(IFACE, app);
    let start = Instant::now();
    loop {
        let r = registry.client().get(key.as_bytes()).await;
        if r.is_ok_and(|r| r.kvs.first().is_some_and(|kv| kv.value == app.as_bytes())) {
            eprintln!("mapping key {key} written after {:?}", start.elapsed());
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "mapping key {key} not written within {WAIT:?}"
        );
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
    let v = wait_view(&dir, "the provider", WAIT, |v| v.status.is_ready()).await;
    assert_eq!(ports(&v), vec![9100]);

    // A second app exported later: the consumer adds it.
    let _b = providers.export(spec("greeter-b", 9200)).await.unwrap();
    wait_mapping_key(&provider_registry, "greeter-b").await;
    wait_view(&dir, "both apps", WAIT, |v| ports(v) == vec![9100, 9200]).await;
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
    let v = wait_view(&dir, "a failing mapping read", WAIT, |v| {
        matches!(
            &v.status,
            DirectoryStatus::Empty(EmptyReason::Pending(Pending {
                mapping: Some(f),
                ..
            })) if f.attempts >= 2
        )
    })
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
    let v = wait_view(&dir, "the provider after the thaw", WAIT, |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![9100]);
    let healed = t0.elapsed();
    // Once etcd answers, the etcd client notices within one probe (cadence
    // + deadline); the consumer's next mapping read starts within one
    // backoff step (its cap), then that read, the app's list and its watch
    // each finish within the call deadline. Twice that, plus 1 s of
    // scheduling slack for a loaded machine.
    let bound =
        (PROBE_EVERY + PROBE_TIMEOUT + BACKOFF_MAX + CALL_TIMEOUT * 3) * 2 + Duration::from_secs(1);
    eprintln!("consumer ready {healed:?} after SIGCONT (bound {bound:?})");
    assert!(healed < bound, "healed after {healed:?}, bound {bound:?}");
    consumer.shutdown().await;
    providers.shutdown().await;
}
