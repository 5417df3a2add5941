//! `steadfast inspect` against a real etcd (the harness starts one on free
//! loopback ports): a provider app whose metadata is in etcd's metadata
//! report resolves and lists its endpoint (exit 0); an app whose revision
//! nobody serves shows unresolved with its attempts and last error (exit
//! 5); `--watch --count 2` prints two reports; the default protocol finds
//! an http export, and a protocol nobody exports names the ones found
//! (exit 4); an unknown app exits 4; an etcd that does not answer is
//! reported as such after the `--wait` (exit 3); usage errors exit 2. No
//! run writes an ANSI escape into its pipes. The binary runs as a child
//! process, each run bounded only as a guard against a hang: no assertion
//! bounds how long a run takes.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use steadfast_actors::EngineReport;
use steadfast_etcd::harness::{free_ports, unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::{instance_for, InstanceBuilder, MetadataBuilder};

/// Longest one CLI run may take before the test gives up on it (a guard
/// against a hang, far above any `--wait` used here).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The exit codes of `steadfast inspect --help`.
const COMPLETE: i32 = 0;
const REGISTRY_UNREACHABLE: i32 = 3;
const NOT_FOUND: i32 = 4;
const METADATA_UNRESOLVED: i32 = 5;

/// Runs `steadfast` with `args` and pipes for stdout and stderr, bounded
/// by [`RUN_LIMIT`]; `NO_COLOR` is removed so that only the terminal test
/// keeps colours out, and `RUST_LOG=info` makes it log.
async fn steadfast(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steadfast"))
        .args(args)
        .env_remove("STEADFAST_REGISTRY")
        .env_remove("STEADFAST_ETCD_PREFIX")
        .env_remove("HTTP_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run steadfast");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            let out = child.wait_with_output().expect("output");
            println!(
                "steadfast {args:?}: {:?} in {:?}",
                out.status,
                start.elapsed()
            );
            return out;
        }
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            panic!("steadfast {args:?} did not finish within {RUN_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stdout of `o`, after checking that it exited with `code` and that
/// neither pipe holds an ANSI escape.
fn stdout(o: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit {:?}; stderr: {err}",
        o.status
    );
    for (name, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        assert!(
            !bytes.windows(2).any(|w| w == b"\x1b["),
            "an ANSI escape in {name}: {}",
            String::from_utf8_lossy(bytes)
        );
    }
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

/// Stderr of `o`.
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `inspect --registry url --prefix prefix` followed by `rest`.
async fn inspect(url: &str, prefix: &str, rest: &[&str]) -> Output {
    let mut args = vec!["inspect", "--registry", url, "--prefix", prefix];
    args.extend_from_slice(rest);
    steadfast(&args).await
}

/// A real etcd, a unique prefix, and a client registry on it.
async fn etcd() -> (EtcdServer, String, EtcdRegistry, String) {
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let prefix = unique_prefix();
    let registry = EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix))
        .expect("etcd client");
    let url = format!("etcd://{}", etcd.client_addr());
    (etcd, prefix, registry, url)
}

/// Publishes `app`'s metadata (demo.Greeter over `protocol`) in etcd's
/// metadata report and registers one instance on `port`.
async fn provider(registry: &EtcdRegistry, app: &str, protocol: &str, port: u16) {
    let info = MetadataBuilder::new(app)
        .service("demo.Greeter", protocol, 20000)
        .build();
    registry
        .metadata_report()
        .publish(&info)
        .await
        .expect("publish metadata");
    registry
        .register_now(&instance_for(&info, "127.0.0.1", port))
        .await
        .expect("register the provider");
}

#[actix_rt::test]
async fn inspect_shows_a_resolved_and_an_unresolved_app_from_a_real_etcd() {
    let (etcd, prefix, registry, url) = etcd().await;
    // greeter: metadata in etcd's report, one instance.
    provider(&registry, "greeter", "tri", 8001).await;
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

    // JSON: the engine's report; complete, so exit 0.
    let out = inspect(
        &url,
        &prefix,
        &[
            "--interface",
            "demo.Greeter",
            "--app",
            "greeter",
            "--protocol",
            "tri",
            "--json",
        ],
    )
    .await;
    let report: EngineReport = serde_json::from_str(&stdout(&out, COMPLETE)).expect("JSON report");
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

    // Text, app only: the unresolved revision with attempts and error;
    // metadata unresolved, so exit 5.
    let out = inspect(&url, &prefix, &["--app", "broken", "--wait", "10s"]).await;
    let text = stdout(&out, METADATA_UNRESOLVED);
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
    assert!(
        stderr(&out).contains("app broken: revision feedface0123 unresolved"),
        "{}",
        stderr(&out)
    );

    // --watch --count 2: two reports, complete.
    let out = inspect(
        &url,
        &prefix,
        &[
            "--app",
            "greeter",
            "--watch",
            "--interval",
            "200ms",
            "--count",
            "2",
            "--json",
        ],
    )
    .await;
    let lines: Vec<EngineReport> = stdout(&out, COMPLETE)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one report per line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[1].taken_at_ms >= lines[0].taken_at_ms);
    drop(etcd);
}

#[actix_rt::test]
async fn the_default_protocol_finds_an_http_export_and_another_names_what_it_found() {
    let (etcd, prefix, registry, url) = etcd().await;
    provider(&registry, "web", "http", 8002).await;

    // No --protocol: http, as everywhere in Steadfast.
    let out = inspect(
        &url,
        &prefix,
        &["--interface", "demo.Greeter", "--app", "web", "--json"],
    )
    .await;
    let report: EngineReport = serde_json::from_str(&stdout(&out, COMPLETE)).expect("JSON report");
    let r = &report.references[0];
    assert_eq!(r.reference, "demo.Greeter:http");
    assert_eq!(r.state, "ready");
    assert_eq!(r.endpoints.len(), 1);
    assert_eq!(r.endpoints[0].address, "127.0.0.1:20000");

    // A protocol the provider does not export: the ones it does, not
    // "no provider exports this service"; nothing to call, so exit 4.
    let out = inspect(
        &url,
        &prefix,
        &[
            "--interface",
            "demo.Greeter",
            "--app",
            "web",
            "--protocol",
            "tri",
        ],
    )
    .await;
    let text = stdout(&out, NOT_FOUND);
    assert!(
        text.contains("status: empty: demo.Greeter is exported over http, not tri"),
        "{text}"
    );
    assert!(!text.contains("no provider exports this service"), "{text}");
    assert!(
        stderr(&out).contains("demo.Greeter:tri: demo.Greeter is exported over http, not tri"),
        "{}",
        stderr(&out)
    );
    drop(etcd);
}

#[actix_rt::test]
async fn an_unknown_app_exits_with_not_found() {
    let (etcd, prefix, registry, url) = etcd().await;
    provider(&registry, "greeter", "http", 8003).await;
    let out = inspect(&url, &prefix, &["--app", "nosuch", "--json"]).await;
    let report: EngineReport = serde_json::from_str(&stdout(&out, NOT_FOUND)).expect("JSON report");
    assert!(report.registry.connected, "{:?}", report.registry);
    assert!(
        stderr(&out).contains("unknown app nosuch: the registry holds no instance of it"),
        "{}",
        stderr(&out)
    );

    // The same of an interface reference naming the unknown app.
    let out = inspect(
        &url,
        &prefix,
        &["--interface", "demo.Greeter", "--app", "nosuch"],
    )
    .await;
    stdout(&out, NOT_FOUND);

    // And of the embedded registry, which is empty.
    let out = steadfast(&["inspect", "--registry", "memory", "--app", "nosuch"]).await;
    stdout(&out, NOT_FOUND);
    drop(etcd);
}

#[actix_rt::test]
async fn an_etcd_that_does_not_answer_exits_registry_unreachable() {
    // A loopback port nothing listens on.
    let port = free_ports(1).expect("port")[0];
    let url = format!("etcd://127.0.0.1:{port}");
    let out = steadfast(&[
        "inspect",
        "--registry",
        &url,
        "--app",
        "greeter",
        "--wait",
        "2s",
        "--json",
    ])
    .await;
    // The report is still printed, and says so; the code is 3.
    let report: EngineReport =
        serde_json::from_str(&stdout(&out, REGISTRY_UNREACHABLE)).expect("JSON report");
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
    let err = stderr(&out);
    assert!(err.contains("registry unreachable"), "{err}");
    // The engine logged its failing watch into the pipe, uncoloured
    // (`stdout` checked there is no escape).
    assert!(err.contains("WARN") || err.contains("INFO"), "{err}");
}

#[test]
fn usage_errors_keep_clap_s_code() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_steadfast"))
            .args(args)
            .env_remove("STEADFAST_REGISTRY")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .output()
            .expect("run steadfast")
    };
    // clap's own: no --app nor --interface.
    let out = run(&["inspect", "--registry", "memory"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!out.stderr.windows(2).any(|w| w == b"\x1b["), "{out:?}");
    // A registry the command does not know.
    let out = run(&[
        "inspect",
        "--registry",
        "consul://127.0.0.1:1",
        "--app",
        "a",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unsupported registry"),
        "{out:?}"
    );
}

/// A dubbo-go provider on etcd in Dubbo's layout (`--prefix /`) with
/// `storage-type=remote` and a MetadataService Steadfast cannot call (V1
/// over `dubbo`): inspect reads its MetadataInfo from dubbo-go's report
/// (`/dubbo/<app>/<revision>`), as the engine configured from
/// `STEADFAST_REGISTRY` does, and lists its endpoint (exit 0).
#[actix_rt::test]
async fn inspect_reads_a_remote_storage_dubbo_go_provider_from_its_etcd_report() {
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let registry =
        EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix("")).expect("client");
    let client = registry.client().clone();
    let (app, revision) = ("go-shop", "10527924560");
    let report = serde_json::json!({
        "app": app, "revision": revision, "tag": "",
        "services": { "demo.Greeter:tri": {
            "name": "demo.Greeter", "group": "", "version": "", "protocol": "tri",
            "port": 21001, "path": "demo.Greeter", "params": { "methods": "Greet" }
        }}
    });
    let key = format!("/dubbo/{app}/{revision}");
    client
        .put(key.as_bytes(), report.to_string().as_bytes(), 0)
        .await
        .expect("put the report");
    let record = serde_json::json!({
        "ID": "127.0.0.1:21001", "ServiceName": app, "Host": "127.0.0.1", "Port": 21001,
        "Enable": true, "Healthy": true,
        "Metadata": {
            "dubbo.metadata.revision": revision,
            "dubbo.metadata.storage-type": "remote",
            "dubbo.metadata-service.url-params": r#"{"port":"28001","protocol":"dubbo"}"#
        }
    });
    let key = format!("/services/{app}/127.0.0.1:21001");
    client
        .put(key.as_bytes(), record.to_string().as_bytes(), 0)
        .await
        .expect("put the record");
    let url = format!("etcd://{}", etcd.client_addr());
    let out = inspect(
        &url,
        "/",
        &[
            "--app",
            app,
            "--interface",
            "demo.Greeter",
            "--protocol",
            "tri",
            "--json",
        ],
    )
    .await;
    let text = stdout(&out, COMPLETE);
    let report: EngineReport = serde_json::from_str(&text).expect("JSON report");
    assert_eq!(report.references[0].endpoints.len(), 1, "{report:?}");
}
