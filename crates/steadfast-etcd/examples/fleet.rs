//! Fleet figures against a real etcd (started by the harness): `N` apps
//! watched through one [`EtcdRegistry`] with `watch_events`, the time until
//! every initial Reset arrived, and etcd's own view from `/metrics` (watch
//! streams, watchers, goroutines, RSS, ranges) plus this process's TCP
//! connections to its client port (`/proc/self/fd` + `/proc/net/tcp{,6}`).
//! Prints one `target` line per bound of issue 7 item 5.
//!
//! `cargo run --release -p steadfast-etcd --features harness --example fleet -- 1000`

use std::time::{Duration, Instant};

use futures::StreamExt;
use steadfast_etcd::harness::metrics::{connections_to, etcd_metric};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};

const METRICS: [&str; 5] = [
    "etcd_debugging_mvcc_watch_stream_total",
    "etcd_debugging_mvcc_watcher_total",
    "etcd_debugging_mvcc_range_total",
    "go_goroutines",
    "process_resident_memory_bytes",
];

async fn metrics(endpoint: &str) -> Vec<f64> {
    let mut v = Vec::new();
    for m in METRICS {
        v.push(etcd_metric(endpoint, m).await.unwrap_or(f64::NAN));
    }
    v
}

fn target(what: &str, figure: f64, unit: &str, bound: f64) {
    let verdict = if figure <= bound { "PASS" } else { "MISS" };
    println!("target {what} = {figure}{unit} (<= {bound}{unit}) {verdict}");
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
    let conns = connections_to(etcd.client_addr().port());
    println!("apps {n}: all initial Resets in {} ms", ready.as_millis());
    for (name, (b, a)) in METRICS.iter().zip(before.iter().zip(&after)) {
        println!("  {name}: {b} -> {a}");
    }
    let st = reg.stats();
    println!(
        "  this process's TCP connections to the client port: {conns}; stream opens {}, range txns {}",
        st.stream_opens, st.range_batches
    );
    let streams = after[0] - before[0];
    target(&format!("fleet-{n} watch streams"), streams, "", 2.0);
    target(&format!("fleet-{n} tcp connections"), conns as f64, "", 4.0);
    target(
        &format!("fleet-{n} all ready"),
        ready.as_millis() as f64,
        " ms",
        200.0,
    );
    for t in tasks {
        t.abort();
    }
}
