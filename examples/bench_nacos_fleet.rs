//! Benchmark: 1000 provider apps subscribed by one engine on Nacos.
//!
//! A throwaway rnacos is started by the harness; a provider client (another
//! connection, kept open: Nacos instances live with their connection)
//! registers `--instances` instances of each of `--apps` apps, each app with
//! a revision the scripted fetcher answers at once. One engine on a
//! [`NacosRegistry`] then subscribes one reference per app, all at once.
//! Printed: the time from the first subscribe until every directory is
//! ready, and the gRPC connections the engine's client made.
//!
//! Run: `cargo run --release --example bench_nacos_fleet [-- --apps 1000 --instances 3]`

use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use steadfast::{Directory, DirectoryStatus, Engine, Reference, Registry};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

type BoxError = Box<dyn std::error::Error>;

const IFACE: &str = "bench.NacosFleet";
const READY_DEADLINE: Duration = Duration::from_secs(60);

fn num(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn ready(dir: &Directory, n: usize) -> bool {
    matches!(dir.status().await, Ok(DirectoryStatus::Ready { endpoints, ref degraded, .. })
        if endpoints == n && degraded.is_empty())
}

#[actix_rt::main]
async fn main() -> Result<(), BoxError> {
    let (apps, per) = (num("--apps", 1000).max(1), num("--instances", 3).max(1));
    let server = RnacosServer::start().await?;
    let config = NacosConfig::new([server.grpc_addr()]);
    let provider = NacosRegistry::new(config.clone());
    let fetcher = ScriptedFetcher::new();
    let mut records = Vec::new();
    for a in 0..apps {
        let info = MetadataBuilder::new(format!("fleet-{a}").as_str())
            .service(IFACE, "tri", 20000)
            .build();
        fetcher.serve(info.clone());
        for i in 0..per {
            records.push(instance_for(&info, "127.0.0.1", 30000 + i as u16));
        }
    }
    let t = Instant::now();
    let written: Vec<_> = stream::iter(records)
        .map(|r| provider.register(r))
        .buffer_unordered(64)
        .collect()
        .await;
    written.into_iter().collect::<Result<Vec<()>, _>>()?;
    println!(
        "bench_nacos_fleet: {apps} apps x {per} instances registered in {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );

    let consumer = NacosRegistry::new(config);
    let engine = Engine::builder()
        .registry(consumer.clone())
        .fetcher(fetcher)
        .start()?;
    let t = Instant::now();
    let dirs: Vec<Directory> = stream::iter(0..apps)
        .map(|a| {
            let engine = engine.clone();
            async move {
                engine
                    .subscribe(Reference::new(IFACE, "tri", [format!("fleet-{a}")]))
                    .await
            }
        })
        .buffer_unordered(apps)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let mut pending: Vec<&Directory> = dirs.iter().collect();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for d in pending {
            if !ready(d, per).await {
                still.push(d);
            }
        }
        pending = still;
        if t.elapsed() > READY_DEADLINE {
            return Err(format!("{} directories not ready after 60 s", pending.len()).into());
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let all_ready = t.elapsed().as_secs_f64() * 1e3;
    let s = consumer.stats();
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    println!(
        "target nacos {apps} services all ready = {all_ready:.1} ms (<= 500 ms) {}",
        verdict(all_ready <= 500.0)
    );
    println!(
        "target nacos {apps} services gRPC connections = {} (== 1) {}",
        s.connects,
        verdict(s.connects == 1)
    );
    println!(
        "  pushes {}, invalid records {}, connection losses {}",
        s.pushes, s.invalid_records, s.connection_losses
    );
    engine.shutdown().await;
    Ok(())
}
