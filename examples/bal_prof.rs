//! Temporary profiling harness (not committed).
use std::sync::Arc;
use std::hint::black_box;
use steadfast::core::{thread_random, DirectoryBalance, DirectorySnapshot, EndpointSet, Instance, RevisionInterner, ServiceEndpoint, BalanceConfig, Strategy};
use steadfast::{ServiceInstance, ServiceUrl, DirectoryStatus, EmptyReason};
fn main() {
    let svc = Arc::new(ServiceEndpoint { protocol: "tri".into(), port: 1, path: "S".into(), params: Default::default() });
    let eps: Vec<_> = (0..1000).map(|i| {
        let mut inst = ServiceInstance::new("a", format!("10.0.{}.{}", i >> 8, i & 255), 1);
        inst.weight = 1 + (i as u32 * 37) % 100;
        let inst = Arc::new(Instance::decode(&inst, &mut RevisionInterner::default()));
        Arc::new(ServiceUrl::new(&inst, &svc))
    }).collect();
    let snap = DirectorySnapshot::new(1, DirectoryStatus::Empty(EmptyReason::Pending), vec![EndpointSet::from_vec(eps)]);
    let bal = Arc::new(DirectoryBalance::new());
    let cfg = BalanceConfig::default();
    let s = match std::env::args().nth(1).as_deref() { Some("wr") => Strategy::WeightedRandom, _ => Strategy::PeakEwma };
    let t = std::time::Instant::now();
    let n = 20_000_000;
    let mode = std::env::args().nth(2).unwrap_or_default();
    for _ in 0..n {
        if mode == "plain" {
            black_box(snap.pick(thread_random()).cloned());
        } else if mode == "pick" {
            let now = std::time::Instant::now();
            black_box(bal.pick(&snap, s, &cfg, now, &mut thread_random).is_ok());
        } else if mode == "noclock" {
            black_box(bal.lease(&snap, s, &cfg, t, &mut thread_random).is_ok());
        } else {
            let now = std::time::Instant::now();
            black_box(bal.lease(&snap, s, &cfg, now, &mut thread_random).is_ok());
        }
    }
    println!("{:.1} ns", t.elapsed().as_nanos() as f64 / n as f64);
}
