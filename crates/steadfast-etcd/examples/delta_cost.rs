//! Cost of one watch event in a large app, in the sans-IO watch machine
//! alone (no IO): a range of `N` instances, then 1000 messages of one put
//! each, timed; every message yields a Delta of one instance (before
//! versioned events each yielded a copy of the whole set).
//!
//! `cargo run --release -p steadfast-etcd --example delta_cost -- 100000`

use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use steadfast_core::{RegistryEvent, ServiceInstance};
use steadfast_etcd::wire::{
    Event, EventType, KeyValue, RangeResponse, ResponseHeader, WatchResponse,
};
use steadfast_etcd::{EtcdConfig, EtcdStats, KeyLayout, WatchMachine, WatchTiming};

fn kv(layout: &KeyLayout, i: &ServiceInstance, rev: i64) -> KeyValue {
    KeyValue {
        key: layout.instance_key("web", &i.id).into_bytes(),
        value: serde_json::to_vec(i).unwrap(),
        mod_revision: rev,
        create_revision: rev,
        version: 1,
        lease: 0,
    }
}

fn header(rev: i64) -> ResponseHeader {
    ResponseHeader {
        cluster_id: 1,
        member_id: 1,
        revision: rev,
        raft_term: 2,
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let layout = KeyLayout::new("/p");
    let timing = WatchTiming::from_config(&EtcdConfig::new(["http://e:1"]));
    let stats = Arc::new(EtcdStats::default());
    let mut m = WatchMachine::new(
        layout.clone(),
        "web",
        timing,
        stats,
        rand::rngs::StdRng::seed_from_u64(1),
    );
    let insts: Vec<ServiceInstance> = (0..n)
        .map(|i| {
            let mut s = ServiceInstance::new(
                "web",
                format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
                20880,
            );
            s.set_revision(format!("rev{}", i % 4));
            s
        })
        .collect();
    let kvs = insts.iter().map(|i| kv(&layout, i, 2)).collect();
    let t = Instant::now();
    m.start();
    let s = m.on_range(
        &RangeResponse {
            header: header(10),
            kvs,
            more: false,
            count: n as i64,
        },
        t,
    );
    println!(
        "range of {n}: {:?} (Reset: {})",
        t.elapsed(),
        matches!(s.event, Some(RegistryEvent::Reset { .. }))
    );
    m.on_opened(t);
    m.on_message(
        &WatchResponse {
            header: header(10),
            created: true,
            ..WatchResponse::default()
        },
        t,
    );
    let msgs: Vec<WatchResponse> = (0..1000)
        .map(|k| {
            let mut i = insts[k * 97 % n].clone();
            i.set_revision("restarted");
            let rev = 11 + k as i64;
            WatchResponse {
                header: header(rev),
                events: vec![Event {
                    kind: EventType::Put,
                    kv: kv(&layout, &i, rev),
                    prev_kv: None,
                }],
                ..WatchResponse::default()
            }
        })
        .collect();
    let t0 = Instant::now();
    let mut upserts = 0;
    for msg in &msgs {
        if let Some(RegistryEvent::Delta { upserts: u, .. }) = m.on_message(msg, t).event {
            upserts += u.len();
        }
    }
    let per = t0.elapsed() / 1000;
    println!("one put at {n}: {per:?} per event ({upserts} upserts in 1000 Deltas)");
}
