//! Benchmark: etcd put -> directory update latency on loopback.
//!
//! Starts a throwaway etcd (the test harness, free loopback ports), a
//! consumer engine watching it, with the provider's metadata already
//! resolvable, then writes 200 instance records one at a time straight to
//! etcd and measures, for each, the time from the put until the directory
//! lists the new endpoint. Prints the median, p90 and max (target: median
//! <= 10 ms).
//!
//! Run: `cargo run --release --example bench_etcd_latency [-- --puts N]`

use std::time::{Duration, Instant};

use steadfast::{Engine, Reference};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry, KeyLayout};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "bench-app";
const IFACE: &str = "bench.Service";

fn puts_from_args() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--puts")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
        // At least one sample to take percentiles of.
        .max(1)
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let puts = puts_from_args();
    let etcd = EtcdServer::start().await?;
    let prefix = unique_prefix();
    let config = EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix);
    let registry = EtcdRegistry::new(config)?;
    let client = registry.client().clone();
    let layout = KeyLayout::new(&prefix);

    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
    let engine = Engine::builder()
        .registry(registry)
        .fetcher(fetcher)
        .start()?;
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await?;

    let mut samples = Vec::with_capacity(puts);
    for i in 0..puts {
        let instance = instance_for(&info, "127.0.0.1", 30000 + i as u16);
        let key = layout.instance_key(APP, &instance.id);
        let value = serde_json::to_vec(&instance)?;
        let start = Instant::now();
        client.put(key.as_bytes(), &value, 0).await?;
        let deadline = start + Duration::from_secs(5);
        loop {
            if dir.view().await?.endpoints.len() == i + 1 {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("put {i} never reached the directory").into());
            }
            tokio::task::yield_now().await;
        }
        samples.push(start.elapsed());
    }
    engine.shutdown().await;
    drop(etcd);

    samples.sort();
    let pct = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "etcd put -> directory update latency over {puts} puts (loopback, etcd 3.4 JSON gateway)"
    );
    println!("  median {:>7.2} ms", ms(pct(0.5)));
    println!("  p90    {:>7.2} ms", ms(pct(0.9)));
    println!(
        "  max    {:>7.2} ms",
        ms(*samples.last().unwrap_or(&Duration::ZERO))
    );
    let verdict = if pct(0.5) <= Duration::from_millis(10) {
        "PASS"
    } else {
        "MISS"
    };
    println!(
        "target etcd put -> directory update median = {:.2} ms (<= 10 ms) {verdict}",
        pct(0.5).as_secs_f64() * 1e3
    );
    Ok(())
}
