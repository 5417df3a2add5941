//! Faults of a 3-member cluster: quorum loss under a watch that stays on a
//! leaderless member, and a frozen member the watch must leave.

use std::time::{Duration, Instant};

use steadfast_core::ServiceInstance;
use steadfast_etcd::harness::EtcdCluster;
use steadfast_etcd::{EtcdClient, EtcdRegistry, KeyLayout};

use crate::common::*;

const WAIT: Duration = Duration::from_secs(20);

async fn put_until_ok(raw: &EtcdClient, l: &KeyLayout, i: &ServiceInstance) {
    let (k, v) = (l.instance_key("web", &i.id), serde_json::to_vec(i).unwrap());
    let start = Instant::now();
    while let Err(e) = raw.put(k.as_bytes(), &v, 0).await {
        assert!(start.elapsed() < WAIT, "put never succeeded: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A consumer (default config, every endpoint) watching `web` with `a`
/// registered; returns it, its watch, and the index of the member its
/// watch lives on.
async fn watching(
    cluster: &EtcdCluster,
    a: &ServiceInstance,
) -> (EtcdRegistry, EtcdClient, Watch, usize) {
    let consumer = EtcdRegistry::new(default_config(cluster.endpoints())).unwrap();
    let raw = client(cluster.endpoints());
    put_until_ok(&raw, consumer.layout(), a).await;
    let mut w = watch(&consumer, "web").await;
    wait_snapshot(&mut w, WAIT, "a", |s| s.len() == 1).await;
    // The first snapshot comes from the initial range: an update of `a`
    // arriving through the watch proves the stream is open (a fault before
    // that would hit the open, which simply rotates to another member).
    let mut updated = a.clone();
    updated.weight = a.weight.saturating_add(1);
    put_until_ok(&raw, consumer.layout(), &updated).await;
    wait_snapshot(&mut w, WAIT, "a updated", |s| s == [updated.clone()]).await;
    let on = consumer.client().current_endpoint().to_string();
    let idx = cluster.endpoints().iter().position(|e| *e == on).unwrap();
    (consumer, raw, w, idx)
}

#[tokio::test]
async fn quorum_loss_under_the_watch_is_reported_within_its_stale_bound_and_heals_when_quorum_returns(
) {
    bounded(async {
        let mut cluster = EtcdCluster::start(3).await.unwrap();
        let [a, b] = ["a", "b"].map(|h| inst("web", h));
        let (consumer, _raw, mut w, on) = watching(&cluster, &a).await;
        let cfg = consumer.config().clone();
        let (stale_limit, resume_limit) = (stale_bound(&cfg), resume_bound(&cfg));
        // Kill the two other members: the watch's member stays up without
        // a leader, which is what used to hold a watch silently.
        let others: Vec<usize> = (0..3).filter(|&i| i != on).collect();
        for &i in &others {
            cluster.kill(i).await.unwrap();
        }
        let lost = Instant::now();
        let stale = wait_stale(&mut w, lost, stale_limit).await;

        let spawned = Instant::now();
        cluster.restart(others[0]).await.unwrap();
        let healthy = Instant::now();
        let live = vec![cluster.endpoint(on), cluster.endpoint(others[0])];
        put_until_ok(&client(live), consumer.layout(), &b).await;
        // The test's own write waits for the new leader; the watch then
        // owes one resume.
        let written = healthy.elapsed();
        let want = ids_of(&[&a, &b]);
        let (_, at) = first_snapshot_after(&mut w, spawned, WAIT, |s| ids(s) == want).await;
        let resumed = at.saturating_duration_since(healthy);
        let resumed_limit = written + resume_limit;
        println!(
            "quorum loss: stale reported {stale:?} after losing 2 of 3 members (bound \
             {stale_limit:?}); b written {written:?} and a+b delivered {resumed:?} after quorum \
             returned (bound {resumed_limit:?})"
        );
        assert!(stale <= stale_limit, "stale after {stale:?}");
        assert!(resumed <= resumed_limit, "resumed after {resumed:?}");
        let st = consumer.stats();
        assert!(st.unavailable_reports >= 1, "{st:?}");
    })
    .await;
}

#[tokio::test]
async fn a_frozen_member_is_left_for_a_healthy_one() {
    bounded(async {
        let mut cluster = EtcdCluster::start(3).await.unwrap();
        let [a, b] = ["a", "b"].map(|h| inst("web", h));
        let (consumer, _raw, mut w, on) = watching(&cluster, &a).await;
        let stale_limit = stale_bound(consumer.config());
        cluster.freeze(on).unwrap();
        let frozen = Instant::now();
        let stale = wait_stale(&mut w, frozen, stale_limit).await;
        let live: Vec<String> = (0..3)
            .filter(|&i| i != on)
            .map(|i| cluster.endpoint(i))
            .collect();
        put_until_ok(&client(live), consumer.layout(), &b).await;
        let want = ids_of(&[&a, &b]);
        let (_, at) = first_snapshot_after(&mut w, frozen, WAIT, |s| ids(s) == want).await;
        let moved = at.duration_since(frozen);
        assert_ne!(consumer.client().current_endpoint(), cluster.endpoint(on));
        cluster.thaw(on).unwrap();
        println!(
            "frozen member: stale reported {stale:?} after SIGSTOP; a write through another \
             member delivered {moved:?} after SIGSTOP (stale bound {stale_limit:?})"
        );
        assert!(stale <= stale_limit, "stale after {stale:?}");
        assert!(consumer.stats().liveness_failures >= 1);
    })
    .await;
}
