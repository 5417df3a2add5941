//! Bytes per instance held by the embedded registry at 100k instances,
//! measured with a counting global allocator (this test binary only).
//!
//! Records carry what exported instances carry: a revision (one of ten,
//! 32 hex digits) and an incarnation (export time and a 16-hex-digit boot
//! id of their own). Printed: the total the registry holds, the share of the
//! decoded [`Instance`]s (shared by `Arc` with every consumer: an engine
//! holds the same allocations, not copies) and the registry's own share
//! (its maps, interner and bookkeeping). Run with
//! `cargo test -p steadfast-memory --test memory_footprint -- --nocapture`.

// A global allocator cannot be written without `unsafe`; this binary's
// only unsafe code is the delegation to `System` below.
#![deny(unsafe_op_in_unsafe_fn)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use futures::executor::block_on;
use steadfast_core::{Incarnation, Instance, ServiceInstance};
use steadfast_memory::MemoryRegistry;

/// Counts the bytes currently allocated, then delegates to [`System`].
struct Counting;

/// Live heap bytes of this process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

fn size(layout: Layout) -> isize {
    isize::try_from(layout.size()).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards its arguments unchanged to `System`, which
// upholds the `GlobalAlloc` contract; the counting touches no memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(size(layout), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(size(layout), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(size(layout), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grow = isize::try_from(new_size).unwrap_or(isize::MAX) - size(layout);
        LIVE.fetch_add(grow, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::SeqCst)
}

const N: usize = 100_000;

/// Instance `n` of `app`, as an exporter registers it.
fn record(n: usize) -> ServiceInstance {
    let host = format!("10.{}.{}.{}", n >> 16 & 255, n >> 8 & 255, n & 255);
    let mut r = ServiceInstance::new("app", host, 20880);
    r.set_revision(format!("{:032x}", n % 10));
    Incarnation {
        export_ms: 1_700_000_000_000 + n as u64,
        boot_id: steadfast_core::BootId::parse(&format!(
            "{:016x}",
            n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        )),
        created: None,
    }
    .stamp(&mut r.metadata);
    r
}

#[test]
fn registry_bytes_per_instance_at_100k() {
    let before = live();
    let reg = MemoryRegistry::new();
    for n in 0..N {
        reg.put(record(n));
    }
    let total = live() - before;

    // The decoded instances alone: what is left once the registry is gone
    // and only the listing holds them (less the listing's own vector).
    let listing = block_on(reg.list_events("app")).expect("list");
    assert_eq!(listing.instances.len(), N);
    let vec_bytes =
        isize::try_from(listing.instances.capacity() * size_of::<Arc<Instance>>()).expect("fits");
    drop(reg);
    let instances = live() - before - vec_bytes;
    drop(listing);
    let own = total - instances;

    let per = |b: isize| b as f64 / N as f64;
    println!(
        "registry at {N} instances: total {:.1} B/instance = decoded instances (shared) {:.1} + registry's own {:.1}",
        per(total),
        per(instances),
        per(own)
    );
    println!(
        "Instance struct: {} B (+16 B Arc header)",
        size_of::<Instance>()
    );
    assert!(
        per(own) <= 60.0,
        "registry's own share {:.1} B/instance",
        per(own)
    );
    assert!(per(total) <= 300.0, "total {:.1} B/instance", per(total));
    assert!(live() - before < 4096, "everything freed again");
}
