//! Full lists diffed into events: whatever the lists, folding the events a
//! watcher receives gives exactly the last list's valid records.

use std::collections::BTreeMap;

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use steadfast_core::{event_stream, EventQueue, Leavers};

use super::*;

fn list(hosts: &[String]) -> ServiceInfo {
    let json = format!("{{\"hosts\":[{}]}}", hosts.join(","));
    serde_json::from_str(&json).unwrap()
}

fn host(port: u16, revision: u32) -> String {
    format!(
        r#"{{"ip":"10.0.0.1","port":{port},"weight":1.0,"healthy":true,"enabled":true,"ephemeral":true,"metadata":{{"dubbo.metadata.revision":"r{revision}"}}}}"#
    )
}

#[tokio::test]
async fn folded_events_always_equal_the_last_list() {
    let mut rng = StdRng::seed_from_u64(0x11575);
    let stats = NacosStats::default();
    let mut subs = Subscriptions::new(1);
    let queue = EventQueue::new(1 << 20);
    let leavers = Arc::new(Leavers::<u64>::default());
    let (key, new) = subs.watch("app", queue.clone());
    assert!(new);
    let mut stream = event_stream(queue, key, leavers);
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut last_version = None;
    for round in 0..2_000 {
        let mut hosts = Vec::new();
        let mut want: BTreeMap<String, String> = BTreeMap::new();
        for _ in 0..rng.gen_range(0..12) {
            let port = rng.gen_range(1..16u16);
            let rev = rng.gen_range(0..3u32);
            if rng.gen_bool(0.05) {
                hosts.push(r#"{"ip":"","port":1,"weight":1.0}"#.to_string());
                continue;
            }
            hosts.push(host(port, rev));
            want.insert(format!("10.0.0.1:{port}"), format!("r{rev}"));
        }
        if rng.gen_bool(0.02) {
            subs.report_stale("test", &stats);
        }
        let kind = if round % 7 == 0 {
            ListKind::Resync
        } else {
            ListKind::Pushed
        };
        subs.apply("app", list(&hosts), kind, &stats);
        while let Ok(Some(item)) =
            tokio::time::timeout(std::time::Duration::from_millis(1), stream.next()).await
        {
            let Ok(event) = item else { continue };
            assert!(Some(event.version()) > last_version, "versions grow");
            last_version = Some(event.version());
            match event {
                RegistryEvent::Reset { items, .. } => {
                    model = items
                        .iter()
                        .map(|i| (i.id().to_string(), i.revision().unwrap_or("").to_string()))
                        .collect();
                }
                RegistryEvent::Delta {
                    upserts, removals, ..
                } => {
                    for r in removals {
                        model.remove(&*r);
                    }
                    for i in upserts {
                        model.insert(i.id().to_string(), i.revision().unwrap_or("").to_string());
                    }
                }
            }
        }
        assert_eq!(model, want, "round {round}");
    }
    assert!(stats.snapshot().invalid_records > 0);
}

/// A list older than the one applied (a push queued behind a fresher
/// resync answer) is dropped; after an outage any list applies.
#[tokio::test]
async fn an_older_list_is_dropped_until_the_connection_changes() {
    let stats = NacosStats::default();
    let mut subs = Subscriptions::new(1);
    let queue = EventQueue::new(64);
    let (key, _) = subs.watch("app", queue.clone());
    let mut stream = event_stream(queue, key, Arc::new(Leavers::<u64>::default()));
    let at = |t: i64, hosts: &[String]| {
        let mut l = list(hosts);
        l.last_ref_time = t;
        l
    };
    subs.apply("app", at(200, &[host(1, 2)]), ListKind::Resync, &stats);
    subs.apply("app", at(100, &[host(1, 1)]), ListKind::Pushed, &stats);
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.is_reset());
    let none = tokio::time::timeout(std::time::Duration::from_millis(5), stream.next()).await;
    assert!(none.is_err(), "the older push was dropped: {none:?}");
    subs.report_stale("gone", &stats);
    subs.apply("app", at(50, &[host(1, 1)]), ListKind::Pushed, &stats);
    let mut revision = None;
    while let Ok(Some(item)) =
        tokio::time::timeout(std::time::Duration::from_millis(5), stream.next()).await
    {
        if let Ok(RegistryEvent::Reset { items, .. }) = item {
            revision = items.first().and_then(|i| i.revision().map(str::to_string));
        }
    }
    assert_eq!(
        revision.as_deref(),
        Some("r1"),
        "another server's clock: applied"
    );
}
