//! Benchmark: what a fleet of subscribed apps costs one etcd, measured on
//! etcd's own `/metrics`.
//!
//! For each fleet size (default 1, 100 and 1000 apps) a fresh etcd is started
//! by the test harness on free loopback ports, every app gets a few instance
//! records (written by a separate client that is dropped before measuring)
//! and a metadata revision the scripted fetcher answers at once. One engine
//! on an [`EtcdRegistry`] then subscribes one reference per app, all at once
//! (concurrently, as a service starting up would). Printed,
//! before the first subscribe and once every directory is ready (and again
//! after a 1 s settle):
//! - watch streams (`etcd_debugging_mvcc_watch_stream_total`) and watchers
//!   (`etcd_debugging_mvcc_watcher_total`) open on etcd;
//! - ranges served (`etcd_debugging_mvcc_range_total`, and the gRPC handled
//!   counter for `Range`), as the increase since before subscribing;
//! - etcd's `go_goroutines` and `process_resident_memory_bytes`;
//! - ESTABLISHED TCP connections from THIS process to etcd's client port
//!   (sockets of `/proc/self/fd` matched in `/proc/net/tcp` and `tcp6`);
//! - the time from the first subscribe until every directory is ready.
//!
//! Targets (for the 1000-app fleet) print as `target ... PASS|MISS`.
//!
//! Run: `cargo run --release --example bench_fleet [-- --apps 1,100,1000 --instances 3]`

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use steadfast::{Directory, DirectoryStatus, Engine, Reference};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdClient, EtcdConfig, EtcdRegistry, KeyLayout};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const IFACE: &str = "bench.Fleet";
/// Deadline for every directory of one fleet to become ready.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// Puts in flight while writing the fleet's records.
const PUT_CONCURRENCY: usize = 32;

type BoxError = Box<dyn std::error::Error>;

/// `--name a,b,c` as numbers, or `default`.
fn list_arg(name: &str, default: &[usize]) -> Vec<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| default.to_vec())
}

/// One scrape of etcd plus the local connection count.
#[derive(Clone, Debug, Default)]
struct Sample {
    watch_streams: f64,
    watchers: f64,
    mvcc_ranges: f64,
    grpc_ranges: f64,
    goroutines: f64,
    etcd_rss: f64,
    tcp: usize,
    own_rss_kb: u64,
}

/// Sum of every series of metric `name` whose labels contain `label` (all
/// series when `label` is empty).
fn metric(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let base = series.split('{').next()?;
            (base == name && series.contains(label)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Socket inodes held open by this process.
fn own_socket_inodes() -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return HashSet::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|p| {
            let s = p.to_string_lossy().into_owned();
            s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// ESTABLISHED TCP connections of this process whose remote port is `port`.
fn tcp_connections_to(port: u16) -> usize {
    let inodes = own_socket_inodes();
    let mut count = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(rem), Some(st), Some(inode)) = (f.get(2), f.get(3), f.get(9)) else {
                continue;
            };
            let rport = rem
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            let inode = inode.parse::<u64>().ok();
            if *st == "01" && rport == Some(port) && inode.is_some_and(|i| inodes.contains(&i)) {
                count += 1;
            }
        }
    }
    count
}

/// VmRSS of this process, in kB.
fn own_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Counts connections first, then scrapes `/metrics` on a client that keeps
/// no idle connection (so the scrape is never counted).
async fn sample(etcd: &EtcdServer) -> Result<Sample, BoxError> {
    let tcp = tcp_connections_to(etcd.client_addr().port());
    let own_rss_kb = own_rss_kb();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()?;
    let text = http
        .get(format!("{}/metrics", etcd.endpoint()))
        .send()
        .await?
        .text()
        .await?;
    Ok(Sample {
        watch_streams: metric(&text, "etcd_debugging_mvcc_watch_stream_total", ""),
        watchers: metric(&text, "etcd_debugging_mvcc_watcher_total", ""),
        mvcc_ranges: metric(&text, "etcd_debugging_mvcc_range_total", ""),
        grpc_ranges: metric(&text, "grpc_server_handled_total", "grpc_method=\"Range\""),
        goroutines: metric(&text, "go_goroutines", ""),
        etcd_rss: metric(&text, "process_resident_memory_bytes", ""),
        tcp,
        own_rss_kb,
    })
}

/// Writes `instances` records for each app with a client dropped afterwards.
async fn populate(
    etcd: &EtcdServer,
    layout: &KeyLayout,
    apps: &[String],
    instances: usize,
    fetcher: &ScriptedFetcher,
) -> Result<(), BoxError> {
    let client = EtcdClient::new(
        vec![etcd.endpoint()],
        Duration::from_secs(10),
        Duration::from_secs(10),
    )?;
    let mut records = Vec::new();
    for (a, app) in apps.iter().enumerate() {
        let info = MetadataBuilder::new(app.as_str())
            .service(IFACE, "tri", 20000)
            .param("app-index", a.to_string())
            .build();
        fetcher.serve(info.clone());
        for k in 0..instances {
            let port = 30000u16.saturating_add(u16::try_from(k).unwrap_or(u16::MAX));
            let inst = instance_for(&info, format!("127.0.{}.{}", a / 250, a % 250 + 1), port);
            records.push((
                layout.instance_key(app, &inst.id),
                serde_json::to_vec(&inst)?,
            ));
        }
    }
    let client = &client;
    let results: Vec<_> = stream::iter(records)
        .map(|(k, v)| async move { client.put(k.as_bytes(), &v, 0).await })
        .buffer_unordered(PUT_CONCURRENCY)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(())
}

/// Whether `dir` is ready with `n` endpoints and nothing degraded.
async fn is_ready(dir: &Directory, n: usize) -> Result<bool, BoxError> {
    Ok(matches!(dir.status().await?,
        DirectoryStatus::Ready { endpoints, degraded, .. } if endpoints == n && degraded.is_empty()))
}

/// One fleet: its samples (before, at all-ready, settled) and timings.
struct Row {
    apps: usize,
    before: Sample,
    ready: Sample,
    settled: Sample,
    subscribe_ms: f64,
    ready_ms: f64,
}

async fn run_fleet(apps: usize, instances: usize) -> Result<Row, BoxError> {
    let etcd = EtcdServer::start().await?;
    let prefix = unique_prefix();
    let layout = KeyLayout::new(&prefix);
    let names: Vec<String> = (0..apps).map(|a| format!("fleet-app-{a:04}")).collect();
    let fetcher = ScriptedFetcher::new();
    populate(&etcd, &layout, &names, instances, &fetcher).await?;

    let registry = EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix))?;
    let engine = Engine::builder()
        .registry(registry)
        .fetcher(fetcher)
        .start()?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = sample(&etcd).await?;

    let t0 = Instant::now();
    let subscribes = names
        .iter()
        .map(|app| engine.subscribe(Reference::new(IFACE, "tri", [app.as_str()])));
    let dirs = futures::future::try_join_all(subscribes).await?;
    let subscribe_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut pending: Vec<&Directory> = dirs.iter().collect();
    while !pending.is_empty() {
        let mut still = Vec::with_capacity(pending.len());
        for d in pending {
            if !is_ready(d, instances).await? {
                still.push(d);
            }
        }
        pending = still;
        if t0.elapsed() > READY_DEADLINE {
            return Err(format!("{} of {apps} directories not ready", pending.len()).into());
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let ready_ms = t0.elapsed().as_secs_f64() * 1e3;
    let ready = sample(&etcd).await?;
    // Settled: a stream rebuild waits at most 100 ms for more subscribes
    // (`watch_rebuild_max_delay`), so 3x that catches any late stream.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = sample(&etcd).await?;
    engine.shutdown().await;
    drop(etcd);
    Ok(Row {
        apps,
        before,
        ready,
        settled,
        subscribe_ms,
        ready_ms,
    })
}

fn verdict(ok: bool) -> &'static str {
    ["MISS", "PASS"][usize::from(ok)]
}

fn print_rows(rows: &[Row]) {
    println!(
        "\n{:>5} | {:>13} | {:>13} | {:>9} | {:>9} | {:>17} | {:>21} | {:>9} | {:>11} | {:>9}",
        "apps",
        "watch streams",
        "watchers",
        "mvcc rng+",
        "grpc rng+",
        "goroutines",
        "etcd RSS MB",
        "tcp conns",
        "own RSS MB",
        "ready ms"
    );
    println!("{}", "-".repeat(146));
    for r in rows {
        let (b, s) = (&r.before, &r.settled);
        let hi = |f: fn(&Sample) -> f64| f(&r.ready).max(f(s));
        println!(
            "{:>5} | {:>5} -> {:>5} | {:>5} -> {:>5} | {:>9} | {:>9} | {:>6} -> {:>7} | {:>8.1} -> {:>8.1} | {:>3} -> {:>4} | {:>4.0} -> {:>4.0} | {:>9.1}",
            r.apps,
            b.watch_streams,
            hi(|x| x.watch_streams),
            b.watchers,
            hi(|x| x.watchers),
            s.mvcc_ranges - b.mvcc_ranges,
            s.grpc_ranges - b.grpc_ranges,
            b.goroutines,
            hi(|x| x.goroutines),
            b.etcd_rss / 1e6,
            hi(|x| x.etcd_rss) / 1e6,
            b.tcp,
            r.ready.tcp.max(s.tcp),
            b.own_rss_kb as f64 / 1024.0,
            s.own_rss_kb as f64 / 1024.0,
            r.ready_ms,
        );
    }
    println!(
        "  before -> max(at all ready, 300 ms later); rng+: ranges served from before subscribing to\n  \
         300 ms after all ready; tcp conns: ESTABLISHED from this process to etcd's client port;\n  \
         ready ms: first subscribe -> every directory Ready (subscribes alone took {}).",
        rows.iter()
            .map(|r| format!("{:.1} ms @{}", r.subscribe_ms, r.apps))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[actix_rt::main]
async fn main() -> Result<(), BoxError> {
    let sizes = list_arg("--apps", &[1, 100, 1000]);
    let instances = list_arg("--instances", &[3])[0].max(1);
    println!(
        "bench_fleet: {sizes:?} apps x {instances} instances, one reference per app, one engine, \
         fresh etcd per fleet (loopback, JSON gateway)"
    );
    let mut rows = Vec::new();
    for apps in sizes {
        rows.push(run_fleet(apps, instances).await?);
    }
    print_rows(&rows);

    let by_size: HashMap<usize, &Row> = rows.iter().map(|r| (r.apps, r)).collect();
    if let Some(r) = by_size.get(&1000) {
        let streams = r.ready.watch_streams.max(r.settled.watch_streams);
        let tcp = r.ready.tcp.max(r.settled.tcp);
        println!("\ntargets:");
        println!(
            "target fleet-1000 watch streams = {streams} (<= 2) {}",
            verdict(streams <= 2.0)
        );
        println!(
            "target fleet-1000 tcp connections = {tcp} (<= 4) {}",
            verdict(tcp <= 4)
        );
        println!(
            "target fleet-1000 all ready = {:.1} ms (<= 200 ms) {}",
            r.ready_ms,
            verdict(r.ready_ms <= 200.0)
        );
    }
    Ok(())
}
