//! Bytes held per instance by the engine plus the embedded registry, with a
//! counting allocator: N instances of one app (10 revisions, a boot id of
//! their own each, as exports stamp them), one subscribed reference, every
//! revision resolved and the directory ready with N endpoints. The figure
//! is the growth of live heap bytes from before the registry was filled to
//! then, divided by N (the input records are dropped before measuring).
//!
//! Then each endpoint is leased once (`select()`, round-robin), which
//! creates its balancing statistics: the target applies to that warm
//! figure (a directory in service has leased its endpoints); the cold one
//! is printed beside it.
//!
//! With `--etcd`, the same through a real etcd started by the harness: the
//! records are written by a separate client (dropped) before the baseline,
//! and the figure is what the engine plus its `EtcdRegistry` hold.
//!
//! Run: `cargo run --release --example bench_memory [-- --sizes 100000] [--etcd]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use steadfast::etcd::{EtcdClient, EtcdConfig, EtcdRegistry, KeyLayout};
use steadfast::{Engine, MemoryRegistry, MetadataInfo, Reference, Registry, ServiceInstance};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_testkit::{InstanceBuilder, MetadataBuilder, ScriptedFetcher};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to the system allocator with the caller's own
// arguments; the counter is a plain atomic on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const APP: &str = "mem-provider";
const REVISIONS: usize = 10;
const BOUND: f64 = 300.0;
const ETCD_BOUND: f64 = 500.0;

fn metadata() -> Vec<MetadataInfo> {
    (0..REVISIONS)
        .map(|r| {
            MetadataBuilder::new(APP)
                .service("bench.Alpha", "tri", 50051)
                .param("timestamp", format!("{}", 1_700_000_000 + r))
                .service("bench.Beta", "tri", 50052)
                .build()
        })
        .collect()
}

fn records(n: usize, metas: &[MetadataInfo]) -> Vec<ServiceInstance> {
    (0..n)
        .map(|i| {
            let host = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            let boot = format!("{:016x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            InstanceBuilder::new(APP, host, 20880)
                .revision(metas[i % REVISIONS].revision.clone())
                .incarnation(1_700_000_000_000 + i as u64, boot)
                .build()
        })
        .collect()
}

/// Writes `records` into a fresh etcd with a client of its own (dropped
/// before returning); returns the server and the key prefix.
async fn etcd_with(records: Vec<ServiceInstance>) -> (EtcdServer, String) {
    let etcd = EtcdServer::start_with_args(&["--quota-backend-bytes=8589934592"])
        .await
        .expect("etcd starts");
    let prefix = unique_prefix();
    let client = EtcdClient::new(
        vec![etcd.endpoint()],
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .expect("client");
    let layout = KeyLayout::new(&prefix);
    let puts = futures::stream::iter(records).map(|r| {
        let (client, key) = (&client, layout.instance_key(APP, &r.id));
        async move {
            let value = serde_json::to_vec(&r).expect("json");
            client.put(key.as_bytes(), &value, 0).await.expect("put");
        }
    });
    puts.buffer_unordered(64).collect::<Vec<()>>().await;
    (etcd, prefix)
}

async fn measure(n: usize, etcd: bool) -> (f64, f64) {
    let metas = metadata();
    let fetcher = ScriptedFetcher::new();
    for m in &metas {
        fetcher.serve(m.clone());
    }
    let mut server = None;
    let mut memory = None;
    let mut before = LIVE.load(Ordering::Relaxed);
    let registry: std::sync::Arc<dyn Registry> = if etcd {
        let (s, prefix) = etcd_with(records(n, &metas)).await;
        let config = EtcdConfig::new([s.endpoint()]).with_prefix(&prefix);
        server = Some(s);
        before = LIVE.load(Ordering::Relaxed);
        std::sync::Arc::new(EtcdRegistry::new(config).expect("registry"))
    } else {
        let r = MemoryRegistry::new();
        memory = Some(r.clone());
        std::sync::Arc::new(r)
    };
    let engine = Engine::builder()
        .registry_arc(registry)
        .fetcher(fetcher)
        .seed(7)
        .start()
        .expect("engine");
    let dir = engine
        .subscribe(Reference::new("bench.Beta", "tri", [APP]))
        .await
        .expect("subscribe");
    if let Some(r) = &memory {
        r.set_instances(APP, records(n, &metas));
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let view = dir.view().await.expect("view");
        if view.endpoints.len() == n {
            break;
        }
        assert!(Instant::now() < deadline, "not ready: {}", view.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the actors go idle (replaced state freed, queries answered).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = LIVE.load(Ordering::Relaxed);
    let held = after.saturating_sub(before) as f64 / n as f64;
    // Warm: one lease per endpoint (round-robin visits each slot once in
    // n picks), so every endpoint carries its balancing statistics.
    dir.set_strategy(Some(steadfast::Strategy::RoundRobin));
    for _ in 0..n {
        drop(dir.select().expect("a pick"));
    }
    let warm = LIVE.load(Ordering::Relaxed).saturating_sub(before) as f64 / n as f64;
    engine.shutdown().await;
    drop(server);
    (held, warm)
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip_while(|a| a != "--sizes")
        .nth(1)
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![100_000]);
    let etcd = std::env::args().any(|a| a == "--etcd");
    let sys = actix_rt::System::new();
    for n in sizes {
        let (per, warm) = sys.block_on(measure(n, etcd));
        let (what, bound) = if etcd {
            ("engine+etcd registry", ETCD_BOUND)
        } else {
            ("engine+embedded registry", BOUND)
        };
        // The target is the warm figure: a serving directory has leased its
        // endpoints, so their balancing statistics exist.
        let verdict = if warm <= bound { "PASS" } else { "MISS" };
        println!("  cold, before any lease: {per:.1} B/instance (no target)");
        println!(
            "target memory {what} at {n}, every endpoint leased once = {warm:.1} B/instance \
             (<= {bound}) {verdict}"
        );
    }
}
