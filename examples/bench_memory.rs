//! Bytes held per instance by the engine plus the embedded registry, with a
//! counting allocator: N instances of one app (10 revisions, a boot id of
//! their own each, as exports stamp them), one subscribed reference, every
//! revision resolved and the directory ready with N endpoints. The figure
//! is the growth of live heap bytes from before the registry was filled to
//! then, divided by N (the input records are dropped before measuring).
//!
//! Run: `cargo run --release --example bench_memory [-- --sizes 100000]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use steadfast::{Engine, MemoryRegistry, MetadataInfo, Reference, ServiceInstance};
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

async fn measure(n: usize) -> f64 {
    let metas = metadata();
    let fetcher = ScriptedFetcher::new();
    for m in &metas {
        fetcher.serve(m.clone());
    }
    let before = LIVE.load(Ordering::Relaxed);
    let input = records(n, &metas);
    let registry = MemoryRegistry::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher)
        .seed(7)
        .start()
        .expect("engine");
    let dir = engine
        .subscribe(Reference::new("bench.Beta", "tri", [APP]))
        .await
        .expect("subscribe");
    registry.set_instances(APP, input);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let view = dir.view().await.expect("view");
        if view.endpoints.len() == n {
            break;
        }
        assert!(Instant::now() < deadline, "not ready: {}", view.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the actors go idle (graveyards reaped, queries answered).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = LIVE.load(Ordering::Relaxed);
    let held = after.saturating_sub(before) as f64 / n as f64;
    engine.shutdown().await;
    held
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip_while(|a| a != "--sizes")
        .nth(1)
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![100_000]);
    let sys = actix_rt::System::new();
    for n in sizes {
        let per = sys.block_on(measure(n));
        let verdict = if per <= BOUND { "PASS" } else { "MISS" };
        println!(
            "target memory engine+embedded registry at {n} = {per:.1} B/instance (<= {BOUND}) {verdict}"
        );
    }
}
