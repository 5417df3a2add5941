//! `steadfast inspect --registry nacos://...` against a real rnacos (the
//! harness starts one): a provider whose metadata is in the Nacos report
//! resolves and lists its endpoint (exit 0); an unknown app exits 4; on a
//! server with auth on, `--nacos-user` and `STEADFAST_NACOS_PASSWORD` log
//! in. The binary runs as a child process, bounded only as a guard against
//! a hang.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use steadfast_actors::EngineReport;
use steadfast_core::{MetadataPublisher, Registry};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosAuth, NacosConfig, NacosRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder};

const RUN_LIMIT: Duration = Duration::from_secs(60);

async fn steadfast(args: &[&str]) -> Output {
    steadfast_with(args, &[]).await
}

async fn steadfast_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steadfast"))
        .args(args)
        .env_remove("STEADFAST_REGISTRY")
        .env_remove("STEADFAST_NACOS_USER")
        .env_remove("STEADFAST_NACOS_PASSWORD")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
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

#[actix_rt::test]
async fn inspect_reads_a_provider_and_its_reported_metadata_from_nacos() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    // The provider: its own client (kept: Nacos instances live with it).
    let provider = NacosRegistry::new(NacosConfig::new([server.grpc_addr()]));
    let info = MetadataBuilder::new("greeter")
        .service("demo.Greeter", "tri", 20000)
        .build();
    MetadataPublisher::publish(&provider.metadata_report(), info.clone())
        .await
        .expect("publish metadata");
    provider
        .register(instance_for(&info, "127.0.0.1", 8001))
        .await
        .expect("register");
    let url = format!("nacos://{}", server.http_addr());
    let out = steadfast(&[
        "inspect",
        "--registry",
        &url,
        "--interface",
        "demo.Greeter",
        "--app",
        "greeter",
        "--protocol",
        "tri",
        "--json",
    ])
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let report: EngineReport = serde_json::from_slice(&out.stdout).expect("JSON report");
    let r = &report.references[0];
    assert_eq!(r.endpoints.len(), 1, "{r:?}");
    assert_eq!(report.registry.backend.kind, "nacos");

    let out = steadfast(&["inspect", "--registry", &url, "--app", "nobody"]).await;
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server with auth on: the provider logs in through `NacosConfig::auth`,
/// the CLI through `--nacos-user` and `STEADFAST_NACOS_PASSWORD`; it
/// resolves the provider (exit 0) and never prints the password. Without
/// the user it is refused: a nonzero exit that names no password either.
#[actix_rt::test]
async fn inspect_logs_in_to_a_nacos_with_auth_on() {
    const PASSWORD: &str = "cli-s3cret-pw";
    let server = RnacosServer::start_with_env(&[
        ("RNACOS_ENABLE_OPEN_API_AUTH", "true"),
        ("RNACOS_INIT_ADMIN_USERNAME", "operator"),
        ("RNACOS_INIT_ADMIN_PASSWORD", PASSWORD),
    ])
    .await
    .expect("rnacos starts");
    let mut config = NacosConfig::new([server.grpc_addr()]);
    config.auth = Some(NacosAuth::new("operator", PASSWORD));
    let provider = NacosRegistry::new(config);
    let info = MetadataBuilder::new("guarded")
        .service("demo.Guarded", "tri", 20000)
        .build();
    MetadataPublisher::publish(&provider.metadata_report(), info.clone())
        .await
        .expect("publish metadata");
    provider
        .register(instance_for(&info, "127.0.0.1", 8002))
        .await
        .expect("register");
    let url = format!("nacos://{}", server.http_addr());
    let args = [
        "inspect",
        "--registry",
        &url,
        "--app",
        "guarded",
        "--interface",
        "demo.Guarded",
        "--protocol",
        "tri",
        "--json",
    ];

    let mut with_user = args.to_vec();
    with_user.extend(["--nacos-user", "operator"]);
    let out = steadfast_with(&with_user, &[("STEADFAST_NACOS_PASSWORD", PASSWORD)]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let report: EngineReport = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report.references[0].endpoints.len(), 1, "{report:?}");
    assert!(!text.contains(PASSWORD) && !err.contains(PASSWORD));

    let out = steadfast_with(&args, &[("STEADFAST_NACOS_PASSWORD", PASSWORD)]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "no user, no login: {err}");
    assert!(!err.contains(PASSWORD), "{err}");
}
