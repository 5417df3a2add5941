//! Self-heal demo on the embedded registry.
//!
//! A provider app restarts and deploys a changed service definition (a new
//! method), so a new metadata revision, and its MetadataService is not ready
//! for the first fetch (the failure that leaves
//! dubbo-go consumers empty forever). Steadfast retries on its own backoff,
//! with no further registry event, and the directory recovers.
//!
//! Then the closing story: the provider shuts down gracefully (its record
//! announces closing), the consumer drops the endpoint at once and keeps a
//! tombstone for that boot; a stale write of the closed boot's record is
//! vetoed; the provider restarts on the same address with a new revision
//! whose first metadata fetch fails, and the endpoint is back after the
//! retry, with no further registry event and long before the tombstone
//! expires. Prints a timeline and ends with `recovered in <ms> ms after the
//! metadata service healed`; exits non-zero if a step did not happen.
//!
//! Run: `cargo run --example self_heal` (embedded registry), or against a
//! real etcd: `cargo run --example self_heal -- --registry etcd://127.0.0.1:2379`,
//! or a real Nacos: `-- --registry nacos://127.0.0.1:8848`, or `-- --registry
//! nacos` (a throwaway rnacos started through the test harness; `rnacos`
//! on `PATH`).
//! `--print-metrics` ends the run by printing the Prometheus exposition
//! (`steadfast_metrics::Metrics::encode`); `RUST_LOG=steadfast_actors=debug`
//! (or `info`, `warn`, ...) turns the engine's logs on (stderr).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use steadfast::{
    DirectoryStatus, Engine, FetchError, Incarnation, MemoryRegistry, MetadataFetcher,
    MetadataInfo, Reference, Registry, ServiceInfo, ServiceInstance, CLOSING_KEY,
};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{grpc_address, NacosConfig, NacosRegistry};

const APP: &str = "greeter-app";
const IFACE: &str = "demo.Greeter";

/// The provider's MetadataService, in process: serves each revision once it
/// is ready, and refuses connections before that.
#[derive(Clone, Default)]
struct DemoMetadataService {
    revisions: Arc<Mutex<HashMap<String, (MetadataInfo, Instant)>>>,
    calls: Arc<Mutex<Vec<(Instant, String, bool)>>>,
}

impl DemoMetadataService {
    fn publish(&self, info: MetadataInfo, ready_at: Instant) {
        let mut map = self.revisions.lock().expect("demo lock");
        map.insert(info.revision.clone(), (info, ready_at));
    }
}

impl MetadataFetcher for DemoMetadataService {
    fn fetch(
        &self,
        _instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let now = Instant::now();
        let found = self
            .revisions
            .lock()
            .expect("demo lock")
            .get(revision)
            .cloned();
        let result = match found {
            Some((info, ready_at)) if now >= ready_at => Ok(info),
            Some(_) => Err(FetchError::Unreachable("connection refused".into())),
            None => Err(FetchError::UnknownRevision(revision.into())),
        };
        let mut calls = self.calls.lock().expect("demo lock");
        calls.push((now, revision.to_string(), result.is_ok()));
        Box::pin(async move { result })
    }
}

/// The provider's exported metadata at one boot, exporting `methods`. The
/// revision hashes only the definitions; the boot is in the incarnation.
fn provider_boot(export_ms: u64, methods: &str) -> (MetadataInfo, ServiceInstance) {
    let mut params = std::collections::BTreeMap::new();
    params.insert("methods".to_string(), methods.to_string());
    let service = ServiceInfo {
        name: IFACE.into(),
        group: None,
        version: None,
        protocol: "tri".into(),
        port: 50051,
        path: IFACE.into(),
        params,
    };
    let info = MetadataInfo::new(APP, [service]);
    let mut instance = ServiceInstance::new(APP, "127.0.0.1", 50051);
    instance.set_revision(info.revision.clone());
    Incarnation::new(export_ms, &mut rand::thread_rng()).stamp(&mut instance.metadata);
    (info, instance)
}

fn short(rev: &str) -> String {
    rev.chars().take(8).collect()
}

fn describe(status: &DirectoryStatus) -> String {
    status.to_string()
}

/// The registry named by `--registry` (default: embedded), the backend
/// handles for their metrics, a throwaway server kept alive, and whether
/// `--print-metrics` was given.
struct Args {
    registry: Arc<dyn Registry>,
    etcd: Option<EtcdRegistry>,
    nacos: Option<NacosRegistry>,
    name: String,
    print_metrics: bool,
    /// How long the registry may take to deliver a change: zero for the
    /// embedded registry and etcd (a watch event), 1.5 s for Nacos (a
    /// server merges a service's changes for 500 ms before it pushes; rnacos
    /// measured up to ~1 s). The story's windows and the metadata
    /// service's healing wait it out, so the first fetch still fails.
    push_lag: Duration,
    _server: Option<RnacosServer>,
}

const USAGE: &str = "usage: self_heal [--registry etcd://host:port[,host:port...] | nacos[://host:port[,host:port...]]] [--print-metrics]";

async fn registry_from_args() -> Result<Args, String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let before = args.len();
    args.retain(|a| a != "--print-metrics");
    let print_metrics = args.len() != before;
    let mut out = Args {
        registry: Arc::new(MemoryRegistry::new()),
        etcd: None,
        nacos: None,
        name: "embedded registry".into(),
        print_metrics,
        push_lag: Duration::ZERO,
        _server: None,
    };
    match args.as_slice() {
        [] => {}
        [flag, url] if flag == "--registry" && url.starts_with("etcd://") => {
            let hostport = url.trim_start_matches("etcd://");
            let endpoints: Vec<String> =
                hostport.split(',').map(|h| format!("http://{h}")).collect();
            let prefix = format!("/steadfast-demo/{}", std::process::id());
            let config = EtcdConfig::new(endpoints).with_prefix(prefix);
            let registry = EtcdRegistry::new(config).map_err(|e| e.to_string())?;
            out.registry = Arc::new(registry.clone());
            out.etcd = Some(registry);
            out.name = format!("etcd at {hostport}");
        }
        [flag, url] if flag == "--registry" && (url == "nacos" || url.starts_with("nacos://")) => {
            let servers: Vec<String> = if url == "nacos" {
                let server = RnacosServer::start()
                    .await
                    .map_err(|e| format!("starting a throwaway rnacos failed: {e}"))?;
                let addr = server.http_addr();
                out._server = Some(server);
                vec![addr]
            } else {
                url.trim_start_matches("nacos://")
                    .split(',')
                    .map(str::to_string)
                    .collect()
            };
            let grpc: Vec<String> = servers
                .iter()
                .map(|s| grpc_address(s).ok_or(format!("{s} is not host:port")))
                .collect::<Result<_, _>>()?;
            let registry = NacosRegistry::new(NacosConfig::new(grpc));
            out.registry = Arc::new(registry.clone());
            out.nacos = Some(registry);
            out.push_lag = Duration::from_millis(1500);
            out.name = format!("nacos at {}", servers.join(","));
        }
        _ => return Err(USAGE.into()),
    }
    Ok(out)
}

#[actix_rt::main]
async fn main() -> ExitCode {
    steadfast_metrics::init_logging();
    let t0 = Instant::now();
    let at = |what: &str| println!("[{:>6} ms] {what}", t0.elapsed().as_millis());
    let backend = match registry_from_args().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let registry = backend.registry.clone();
    at(&format!("registry: {}", backend.name));
    let metadata_service = DemoMetadataService::default();
    let engine = match Engine::builder()
        .registry_arc(registry.clone())
        .fetcher(metadata_service.clone())
        .start()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("engine failed to start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = match engine.subscribe(Reference::new(IFACE, "tri", [APP])).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("subscribe failed: {e}");
            return ExitCode::FAILURE;
        }
    };

    let (v1, instance_v1) = provider_boot(1_000, "greet");
    metadata_service.publish(v1.clone(), Instant::now());
    if let Err(e) = registry.register(instance_v1.clone()).await {
        eprintln!("register failed: {e}");
        return ExitCode::FAILURE;
    }
    at(&format!("provider up, revision {}", short(&v1.revision)));
    let Some(ready) = wait(&dir, Duration::from_secs(5), |s| s.is_ready()).await else {
        eprintln!("directory never became ready");
        return ExitCode::FAILURE;
    };
    at(&format!("consumer: {}", describe(&ready)));

    // Restart: unregister, come back with a changed definition (a new
    // method, so a new revision) whose metadata service needs 300 ms before
    // it answers.
    if let Err(e) = registry.unregister(instance_v1).await {
        eprintln!("unregister failed: {e}");
        return ExitCode::FAILURE;
    }
    at("provider stopping: instance unregistered");
    let (v2, instance_v2) = provider_boot(2_000, "greet,farewell");
    let lag = backend.push_lag;
    let healed_at = Instant::now() + Duration::from_millis(300) + lag;
    metadata_service.publish(v2.clone(), healed_at);
    if let Err(e) = registry.register(instance_v2.clone()).await {
        eprintln!("register failed: {e}");
        return ExitCode::FAILURE;
    }
    at(&format!(
        "provider restarted with a new method, revision {}; metadata service not ready yet",
        short(&v2.revision)
    ));
    if let Some(s) = wait(&dir, Duration::from_secs(1) + lag, |s| !s.is_ready()).await {
        at(&format!("consumer: {}", describe(&s)));
    }
    tokio::time::sleep_until(healed_at.into()).await;
    at("metadata service healed (no new registry event will come)");

    let recovered = wait(&dir, Duration::from_secs(10), resolved).await;
    print_fetches(&metadata_service, t0);
    let Some(status) = recovered else {
        println!("did NOT recover within 10 s after the metadata service healed");
        engine.shutdown().await;
        return ExitCode::FAILURE;
    };
    at(&format!("consumer: {}", describe(&status)));
    let first_recovery = Instant::now().saturating_duration_since(healed_at);
    let metrics = backend.print_metrics.then(|| {
        let mut m = steadfast_metrics::Metrics::new()
            .engine(&engine)
            .directory(&dir);
        if let Some(etcd) = &backend.etcd {
            m = m.etcd(etcd);
        }
        if let Some(nacos) = &backend.nacos {
            m = m.nacos(nacos);
        }
        m
    });
    if let Some(m) = &metrics {
        // A first read while the directory is ready: the select probe
        // times its picks (the last read comes after the provider left).
        m.encode().await;
    }

    let ok = closing_story(
        &registry,
        &metadata_service,
        &dir,
        instance_v2,
        (t0, lag),
        &at,
    )
    .await;
    let s = engine.stats();
    println!(
        "           tombstones written {}, stale re-adds vetoed {}, cleared by the unregister {}, \
         by a restart {}",
        s.tombstones_written,
        s.closing_readds_vetoed,
        s.tombstones_cleared_by_removal,
        s.tombstones_cleared_by_restart
    );
    let exposition = match &metrics {
        Some(m) => Some(m.encode().await),
        None => None,
    };
    engine.shutdown().await;
    let code = match ok {
        Ok(healed) => {
            println!(
                "recovered in {} ms after the metadata service healed (restart after the \
                 closing: {} ms)",
                first_recovery.as_millis(),
                healed.as_millis()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("closing story failed: {e}");
            ExitCode::FAILURE
        }
    };
    if let Some(text) = exposition {
        print!("\n{text}");
    }
    code
}

/// `record` as its provider announces closing on graceful shutdown.
fn closing_record(record: &ServiceInstance) -> ServiceInstance {
    let mut c = record.clone();
    c.healthy = false;
    c.metadata.insert(CLOSING_KEY.into(), "true".into());
    c
}

fn print_fetches(metadata_service: &DemoMetadataService, t0: Instant) {
    let mut calls = metadata_service.calls.lock().expect("demo lock");
    for (when, rev, ok) in calls.drain(..) {
        println!(
            "           fetch of {} at {:>5} ms: {}",
            short(&rev),
            when.duration_since(t0).as_millis(),
            if ok { "ok" } else { "failed" }
        );
    }
}

/// Graceful shutdown of `boot` -> tombstone -> a stale write of that boot's
/// record is vetoed -> restart on the same address with a new revision whose
/// first fetch fails -> back after the retry. Returns how long after the
/// metadata service healed the endpoint was back.
/// Ready with every revision resolved (not served from last-known-good
/// metadata while a new revision is unresolved).
fn resolved(s: &DirectoryStatus) -> bool {
    matches!(s, DirectoryStatus::Ready { degraded, .. } if degraded.is_empty())
}

async fn closing_story(
    registry: &Arc<dyn Registry>,
    metadata_service: &DemoMetadataService,
    dir: &steadfast::Directory,
    boot: ServiceInstance,
    (t0, lag): (Instant, Duration),
    at: &impl Fn(&str),
) -> Result<Duration, String> {
    registry
        .register(closing_record(&boot))
        .await
        .map_err(|e| e.to_string())?;
    at("provider shutting down gracefully: its record announces closing");
    let Some(s) = wait(dir, Duration::from_secs(1) + lag, |s| !s.is_ready()).await else {
        return Err("the closing endpoint was still served".into());
    };
    at(&format!(
        "consumer: endpoint dropped, tombstone kept ({})",
        describe(&s)
    ));

    // A lagging write of the closed boot's record (same boot, same
    // registration): the tombstone vetoes it.
    registry
        .register(boot.clone())
        .await
        .map_err(|e| e.to_string())?;
    at("a stale write of the closed boot's serving record reaches the registry");
    if let Some(s) = wait(dir, Duration::from_millis(300) + lag, |s| s.is_ready()).await {
        return Err(format!(
            "the closed boot was served again: {}",
            describe(&s)
        ));
    }
    if let Ok(s) = dir.status().await {
        at(&format!("consumer: vetoed, still {}", describe(&s)));
    }
    registry.unregister(boot).await.map_err(|e| e.to_string())?;
    at("provider unregistered: the registry removal ends the tombstone");

    let (v3, instance_v3) = provider_boot(3_000, "greet,farewell,wave");
    let healed_at = Instant::now() + Duration::from_millis(300) + lag;
    metadata_service.publish(v3.clone(), healed_at);
    registry
        .register(instance_v3.clone())
        .await
        .map_err(|e| e.to_string())?;
    at(&format!(
        "provider restarted on the same address, revision {}; metadata service not ready yet",
        short(&v3.revision)
    ));
    if let Some(s) = wait(dir, Duration::from_millis(250) + lag, |s| {
        matches!(
            s,
            DirectoryStatus::Empty(steadfast::EmptyReason::Unresolved(_))
        )
    })
    .await
    {
        at(&format!("consumer: {}", describe(&s)));
    }
    let back = wait(dir, Duration::from_secs(10), resolved).await;
    print_fetches(metadata_service, t0);
    let _ = registry.unregister(instance_v3).await;
    let Some(s) = back else {
        return Err("the restarted provider never came back".into());
    };
    at(&format!(
        "consumer: {} (no further registry event)",
        describe(&s)
    ));
    Ok(Instant::now().saturating_duration_since(healed_at))
}

/// Polls the directory every 5 ms until `pred` holds, for at most `limit`.
async fn wait(
    dir: &steadfast::Directory,
    limit: Duration,
    pred: impl Fn(&DirectoryStatus) -> bool,
) -> Option<DirectoryStatus> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Ok(s) = dir.status().await {
            if pred(&s) {
                return Some(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}
