//! `steadfast inspect` against a real etcd (the harness starts one on free
//! loopback ports): a provider app whose metadata is in etcd's metadata
//! report resolves and lists its endpoint; an app whose revision nobody
//! serves shows unresolved with its attempts and last error; `--watch
//! --count 2` prints two reports; an etcd that does not answer is reported
//! as such within the `--wait` bound. The binary runs as a child process,
//! each run bounded.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use steadfast_actors::EngineReport;
use steadfast_etcd::harness::{free_ports, unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::{instance_for, InstanceBuilder, MetadataBuilder};

/// Longest one CLI run may take.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Runs `steadfast` with `args`, bounded by [`RUN_LIMIT`].
async fn steadfast(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steadfast"))
        .args(args)
        .env_remove("STEADFAST_REGISTRY")
        .env_remove("STEADFAST_ETCD_PREFIX")
        .env_remove("HTTP_PROXY")
        .env_remove("ALL_PROXY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run steadfast");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            panic!("steadfast {args:?} did not finish within {RUN_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}; stderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

#[actix_rt::test]
async fn inspect_shows_a_resolved_and_an_unresolved_app_from_a_real_etcd() {
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let prefix = unique_prefix();
    let registry = EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix))
        .expect("etcd client");
    // greeter: metadata in etcd's report, one instance.
    let info = MetadataBuilder::new("greeter")
        .service("demo.Greeter", "tri", 20000)
        .build();
    registry
        .metadata_report()
        .publish(&info)
        .await
        .expect("publish metadata");
    registry
        .register_now(&instance_for(&info, "127.0.0.1", 8001))
        .await
        .expect("register greeter");
    // broken: a revision nobody serves (its metadata port refuses).
    let port = free_ports(1).expect("port")[0];
    registry
        .register_now(
            &InstanceBuilder::new("broken", "127.0.0.1", port)
                .revision("feedface0123")
                .build(),
        )
        .await
        .expect("register broken");
    let url = format!("etcd://{}", etcd.client_addr());

    // JSON: the engine's report.
    let out = steadfast(&[
        "inspect",
        "--registry",
        &url,
        "--prefix",
        &prefix,
        "--interface",
        "demo.Greeter",
        "--app",
        "greeter",
        "--json",
    ])
    .await;
    let report: EngineReport = serde_json::from_str(&stdout(&out)).expect("JSON report");
    assert_eq!(report.references.len(), 1);
    let r = &report.references[0];
    assert_eq!(r.reference, "demo.Greeter:tri");
    assert_eq!(r.state, "ready");
    assert_eq!(r.endpoints.len(), 1);
    assert_eq!(r.endpoints[0].address, "127.0.0.1:20000");
    assert!(report.registry.connected);
    let app = &report.apps[0];
    assert_eq!(app.app, "greeter");
    assert_eq!(app.instances[0].port, 8001);
    assert!(app.revisions[0].resolved);

    // Text, app only: the unresolved revision with attempts and error.
    let out = steadfast(&[
        "inspect",
        "--registry",
        &url,
        "--prefix",
        &prefix,
        "--app",
        "broken",
        "--wait",
        "10s",
    ])
    .await;
    let text = stdout(&out);
    assert!(
        text.contains("app broken: 1 instance(s), 1 revision(s)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("instance 127.0.0.1:{port} at 127.0.0.1:{port}")),
        "{text}"
    );
    assert!(text.contains("revision feedface0123  UNRESOLVED"), "{text}");
    assert!(text.contains("attempt(s), last error: "), "{text}");
    assert!(
        !text.contains("steadfast.inspect.app-only"),
        "placeholder hidden: {text}"
    );

    // --watch --count 2: two reports.
    let out = steadfast(&[
        "inspect",
        "--registry",
        &url,
        "--prefix",
        &prefix,
        "--app",
        "greeter",
        "--watch",
        "--interval",
        "200ms",
        "--count",
        "2",
        "--json",
    ])
    .await;
    let lines: Vec<EngineReport> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one report per line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[1].taken_at_ms >= lines[0].taken_at_ms);
    drop(etcd);
}

#[actix_rt::test]
async fn an_etcd_that_does_not_answer_is_reported_within_the_wait() {
    let port = free_ports(1).expect("port")[0];
    let url = format!("etcd://127.0.0.1:{port}");
    let start = Instant::now();
    let out = steadfast(&[
        "inspect",
        "--registry",
        &url,
        "--app",
        "greeter",
        "--wait",
        "3s",
        "--json",
    ])
    .await;
    let report: EngineReport = serde_json::from_str(&stdout(&out)).expect("JSON report");
    assert!(!report.registry.connected, "{:?}", report.registry);
    assert!(
        report
            .registry
            .watches
            .iter()
            .any(|w| w.subscribe_error.is_some()),
        "{:?}",
        report.registry
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}
