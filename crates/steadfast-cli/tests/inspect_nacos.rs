//! `steadfast inspect --registry nacos://...` against a real rnacos (the
//! harness starts one): a provider whose metadata is in the Nacos report
//! resolves and lists its endpoint (exit 0); an unknown app exits 4. The
//! binary runs as a child process, bounded only as a guard against a hang.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use steadfast_actors::EngineReport;
use steadfast_core::{MetadataPublisher, Registry};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder};

const RUN_LIMIT: Duration = Duration::from_secs(60);

async fn steadfast(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steadfast"))
        .args(args)
        .env_remove("STEADFAST_REGISTRY")
        .env_remove("NO_COLOR")
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
