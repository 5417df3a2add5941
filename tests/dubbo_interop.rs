//! A consumer engine against a Dubbo peer nobody here wrote: the PyPI
//! `apache-dubbo` Triple server (dubbo-python 3.0.0b1, in a venv that
//! `tests/dubbo_peer/setup.sh` makes) serving MetadataServiceV2 for one
//! revision, and the matching Dubbo 3 record (the layout a Java provider
//! writes) registered in a real rnacos. The engine, built as users build it
//! (`STEADFAST_REGISTRY=nacos://...`, the default fetcher), resolves the
//! provider, retries a revision the peer does not serve yet, and heals when
//! the peer starts answering, with no further registry event: the seed's
//! story against a foreign Triple implementation.

#![cfg(all(feature = "nacos", feature = "dubbo"))]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steadfast::{Reference, Registry, ServiceInstance};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};

const APP: &str = "first-dubbo-provider";
const IFACE: &str = "org.apache.dubbo.samples.api.GreetingsService";
/// V1 of the interop notes: a real Java provider's revision.
const REVISION: &str = "871fbc9cb2730caea9b0d858852d5ede";

/// The venv's python (made by setup.sh when missing; idempotent), once
/// per test binary: the tests run in parallel and must not race to make it.
fn python() -> String {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(setup_venv).clone()
}

fn setup_venv() -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg(format!("{root}/tests/dubbo_peer/setup.sh"))
        .arg(format!("{root}/target/dubbo-peer-venv"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/dubbo_peer/setup.sh");
    assert!(out.status.success(), "setup.sh failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .expect("setup.sh prints the python path")
        .to_string()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The running peer and the lines it printed.
struct Peer {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    port: u16,
}

impl Peer {
    fn start(python: &str, service_port: u16, serve_after: &std::path::Path) -> Peer {
        let port = free_port();
        let script = format!("{}/tests/dubbo_peer/peer.py", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new(python)
            .arg(script)
            .args(["--port", &port.to_string(), "--app", APP])
            .args(["--revision", REVISION, "--interface", IFACE])
            .args(["--service-port", &service_port.to_string()])
            .args(["--params", "methods=sayHi,release=3.3.0"])
            .arg("--serve-after")
            .arg(serve_after)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start peer.py");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Peer { child, lines, port }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (bounded) until a printed line satisfies `pred`.
    async fn wait_line(&self, what: &str, limit: Duration, pred: impl Fn(&[String]) -> bool) {
        let end = Instant::now() + limit;
        while !pred(&self.lines()) {
            assert!(
                Instant::now() < end,
                "peer never printed {what}: {:?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn calls(&self, revision: &str, served: bool) -> usize {
        let want = format!("call revision={revision} served={served}");
        self.lines().iter().filter(|l| **l == want).count()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The record a Dubbo 3.3 Java provider with Triple writes on Nacos for
/// an instance on `port` whose MetadataServiceV2 listens on `metadata_port`.
fn dubbo_record(port: u16, metadata_port: u16, revision: &str) -> ServiceInstance {
    let mut i = ServiceInstance::new(APP, "127.0.0.1", port);
    let meta: BTreeMap<String, String> = [
        ("dubbo.metadata.revision", revision.to_string()),
        ("dubbo.metadata.storage-type", "local".into()),
        (
            "dubbo.endpoints",
            format!(r#"[{{"port":{port},"protocol":"tri"}}]"#),
        ),
        (
            "dubbo.metadata-service.url-params",
            format!(
                r#"{{"connections":"1","version":"2.0.0","dubbo":"2.0.2","release":"3.3.0","side":"provider","port":"{metadata_port}","protocol":"tri"}}"#
            ),
        ),
        ("meta-v", "2.0.0".into()),
        ("timestamp", "1733200000000".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    i.metadata = meta;
    i
}

#[actix_rt::test]
async fn a_dubbo_provider_on_nacos_resolves_through_a_foreign_triple_peer_and_heals() {
    let python = python();
    let server = RnacosServer::start().await.expect("rnacos starts");
    let dir_tmp = std::env::temp_dir().join(format!("steadfast-dubbo-{}", std::process::id()));
    std::fs::create_dir_all(&dir_tmp).unwrap();
    let gate: PathBuf = dir_tmp.join("serve");
    let _ = std::fs::remove_file(&gate);
    let service_port = free_port();
    let peer = Peer::start(&python, service_port, &gate);
    peer.wait_line("its listening line", Duration::from_secs(30), |l| {
        l.iter().any(|l| l.starts_with("peer: apache-dubbo "))
    })
    .await;
    let banner = peer.lines()[0].clone();
    let version = banner
        .trim_start_matches("peer: apache-dubbo ")
        .split(' ')
        .next()
        .unwrap_or("?")
        .to_string();
    println!("peer: apache-dubbo {version}");

    // The provider's record, by another client (the provider's process).
    let providers = NacosRegistry::new(NacosConfig::new([server.grpc_addr()]));
    let end = Instant::now() + Duration::from_secs(10);
    while let Err(e) = providers
        .register(dubbo_record(service_port, peer.port, REVISION))
        .await
    {
        assert!(Instant::now() < end, "never registered: {e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The consumer, configured as users do: the default fetcher.
    let url = format!("nacos://{}", server.http_addr());
    let built = common::config_from(&[("STEADFAST_REGISTRY", url)])
        .build()
        .unwrap();
    let steadfast::ConfiguredRegistry::Nacos(consumer_nacos) = built.registry.clone() else {
        panic!("a Nacos registry");
    };
    let engine = built.builder.start().unwrap();
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();

    // The peer does not serve the revision yet: fetched, failed, retried.
    peer.wait_line("two refused fetches", Duration::from_secs(30), |_| {
        peer.calls(REVISION, false) >= 2
    })
    .await;
    let view = dir.view().await.unwrap();
    assert!(view.endpoints.is_empty(), "nothing served before metadata");
    let status = format!("{:?}", view.status);
    assert!(
        status.contains("Unresolved") || status.contains("Pending"),
        "{status}"
    );

    // The peer starts answering; no registry event follows.
    let pushes_before = consumer_nacos.last_push();
    std::fs::write(&gate, b"").unwrap();
    let view = common::wait_for(&dir, "the healed endpoint", Duration::from_secs(60), |v| {
        !v.endpoints.is_empty()
    })
    .await;
    assert_eq!(
        consumer_nacos.last_push(),
        pushes_before,
        "healed without a push"
    );
    let url = &view.endpoints[0];
    assert_eq!(
        (url.host(), url.port(), url.protocol()),
        ("127.0.0.1", service_port, "tri")
    );
    assert_eq!(url.param("methods").as_deref(), Some("sayHi"));
    assert!(peer.calls(REVISION, true) >= 1);

    // A second instance at a revision the peer never serves: retried on
    // the backoff, never served, and the first instance keeps serving.
    let other_port = free_port();
    providers
        .register(dubbo_record(other_port, peer.port, "deadbeef"))
        .await
        .unwrap();
    peer.wait_line(
        "two refused fetches of deadbeef",
        Duration::from_secs(30),
        |_| peer.calls("deadbeef", false) >= 2,
    )
    .await;
    let view = dir.view().await.unwrap();
    assert_eq!(common::ports(&view), vec![service_port]);
    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir_tmp);
}

/// The other way round: a Steadfast provider exported in Dubbo's layout
/// (`ExportSpec::dubbo_triple`) serving MetadataServiceV2 from its
/// metadata store. Its record reads as a Dubbo 3 record, a consumer engine
/// resolves it over Triple, and the foreign client (dubbo-python's Triple
/// client, `tests/dubbo_peer/client.py`) reads its MetadataInfoV2.
#[actix_rt::test]
async fn a_steadfast_provider_is_found_the_dubbo_way() {
    use steadfast::dubbo::TripleMetadataServer;
    use steadfast::http::MetadataStore;
    use steadfast::{ExportSpec, ServiceInfo};

    let python = python();
    let server = RnacosServer::start().await.expect("rnacos starts");
    let registry = || NacosRegistry::new(NacosConfig::new([server.grpc_addr()]));

    // The provider: its store serves both the HTTP and the Triple
    // MetadataService; here only Triple listens.
    let store = MetadataStore::new();
    let triple = TripleMetadataServer::start("127.0.0.1:0".parse().unwrap(), store.clone())
        .await
        .unwrap();
    let provider = steadfast::Engine::builder()
        .registry(registry())
        .metadata_publisher(store.clone())
        .start()
        .unwrap();
    let service_port = free_port();
    let spec = ExportSpec::new("rust-provider", "127.0.0.1", service_port)
        .service(
            ServiceInfo::builder(IFACE, service_port)
                .protocol("tri")
                .path(IFACE)
                .param("methods", "sayHi")
                .build(),
        )
        .dubbo_triple(triple.local_addr().port());
    let _exported = provider.export(spec).await.unwrap();

    // The record as another client lists it: Dubbo's keys.
    let listing = registry();
    let end = Instant::now() + Duration::from_secs(20);
    let record = loop {
        if let Ok(l) = listing.list("rust-provider").await {
            if let Some(i) = l.instances.first() {
                break i.to_record("rust-provider");
            }
        }
        assert!(Instant::now() < end, "the export never appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let revision = record.revision().expect("a revision").to_string();
    assert_eq!(revision.len(), 32, "Dubbo's MD5 revision");
    assert_eq!(record.metadata["meta-v"], "2.0.0");
    assert!(record.metadata["dubbo.metadata-service.url-params"].contains("\"tri\""));

    // A consumer engine resolves it over Triple.
    let consumer = steadfast::Engine::builder()
        .registry(registry())
        .start()
        .unwrap();
    let dir = consumer
        .subscribe(Reference::new(IFACE, "tri", ["rust-provider"]))
        .await
        .unwrap();
    let view = common::wait_for(&dir, "the provider", Duration::from_secs(30), |v| {
        !v.endpoints.is_empty()
    })
    .await;
    assert_eq!(common::ports(&view), vec![service_port]);

    // The foreign client reads the same MetadataInfoV2.
    let client = format!("{}/tests/dubbo_peer/client.py", env!("CARGO_MANIFEST_DIR"));
    let addr = triple.local_addr().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(client)
            .args(["--addr", &addr, "--revision", &revision])
            .args(["--group", "rust-provider"])
            .stderr(Stdio::null())
            .output()
            .expect("run client.py")
    })
    .await
    .unwrap();
    let answer: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("client.py prints one JSON line");
    println!("client: {}", answer["client"]);
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["app"], "rust-provider");
    let services = answer["services"].as_object().unwrap();
    let service = &services[&format!("{IFACE}:tri")];
    assert_eq!(service["port"], service_port);
    assert_eq!(service["params"]["methods"], "sayHi");

    consumer.shutdown().await;
    provider.shutdown().await;
    triple.stop().await;
}

/// A Dubbo provider with `dubbo.metadata.storage-type=remote` and only
/// MetadataService V1 (hessian2, which Steadfast does not speak): its
/// MetadataInfo is read from the Nacos metadata report (config data id =
/// app, group = revision), where Java and Go providers publish it.
#[actix_rt::test]
async fn a_remote_storage_provider_resolves_from_the_nacos_report() {
    use steadfast::{MetadataInfo, ServiceInfo};

    let server = RnacosServer::start().await.expect("rnacos starts");
    let providers = NacosRegistry::new(NacosConfig::new([server.grpc_addr()]));
    let info = MetadataInfo::new(
        APP,
        [ServiceInfo::builder(IFACE, 20880)
            .protocol("tri")
            .path(IFACE)
            .build()],
    );
    let end = Instant::now() + Duration::from_secs(10);
    while let Err(e) = providers.metadata_report().publish(&info).await {
        assert!(Instant::now() < end, "never published: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut record = dubbo_record(20880, 20880, &info.revision);
    record
        .metadata
        .insert("dubbo.metadata.storage-type".into(), "remote".into());
    record.metadata.insert("meta-v".into(), "1.0.0".into());
    providers.register(record).await.unwrap();

    let url = format!("nacos://{}", server.http_addr());
    let engine = common::config_from(&[("STEADFAST_REGISTRY", url)])
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
    assert_eq!(common::ports(&view), vec![20880]);
    engine.shutdown().await;
}
