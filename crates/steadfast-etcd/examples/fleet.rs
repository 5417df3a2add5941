//! Fleet figures against a real etcd (started by the harness): `N` apps
//! watched through one [`EtcdRegistry`] with `watch_events`, the time until
//! every initial Reset arrived, and etcd's own view from `/metrics` (watch
//! streams, watchers, goroutines, RSS) plus the TCP connections to its
//! client port from `/proc/net/tcp`.
//!
//! `cargo run --release -p steadfast-etcd --features harness --example fleet -- 1000`

use std::time::{Duration, Instant};

use futures::StreamExt;
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};

async fn metrics(endpoint: &str) -> Vec<(String, f64)> {
    let text = reqwest::get(format!("{endpoint}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let names = [
        "etcd_debugging_mvcc_watch_stream_total",
        "etcd_debugging_mvcc_watcher_total",
        "go_goroutines",
        "process_resident_memory_bytes",
    ];
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            names
                .contains(&name)
                .then(|| (name.to_string(), value.parse().unwrap_or(f64::NAN)))
        })
        .collect()
}

/// Established TCP connections whose remote port is `port` (client side).
fn connections_to(port: u16) -> usize {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let want = format!(":{port:04X}");
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[2].ends_with(&want) && f[3] == "01"
        })
        .count()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let etcd = EtcdServer::start().await.unwrap();
    let endpoint = etcd.endpoint();
    let before = metrics(&endpoint).await;
    let reg = EtcdRegistry::new(EtcdConfig::new([endpoint.clone()]).with_prefix(unique_prefix()))
        .unwrap();
    let started = Instant::now();
    let opens = (0..n).map(|i| reg.watch_events(&format!("app{i}")));
    let streams = futures::future::join_all(opens).await;
    let mut tasks = Vec::new();
    for s in streams {
        let mut s = s.expect("watch");
        let first = s.next().await.expect("a Reset").expect("ok");
        let _ = first;
        tasks.push(tokio::spawn(
            async move { while s.next().await.is_some() {} },
        ));
    }
    let ready = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = metrics(&endpoint).await;
    println!("apps {n}: all initial Resets in {} ms", ready.as_millis());
    for ((name, b), (_, a)) in before.iter().zip(&after) {
        println!("  {name}: {b} -> {a}");
    }
    println!(
        "  TCP connections to the client port: {}",
        connections_to(etcd.client_addr().port())
    );
    for t in tasks {
        t.abort();
    }
}
