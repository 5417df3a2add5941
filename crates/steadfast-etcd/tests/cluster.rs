//! A 3-member etcd cluster whose leader is SIGKILLed mid-watch: the watch
//! keeps delivering through another member, and writes go through too.

mod common;

use std::time::{Duration, Instant};

use common::*;
use steadfast_core::Registry;
use steadfast_etcd::harness::EtcdCluster;
use steadfast_etcd::EtcdRegistry;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn killing_the_leader_keeps_the_watch_delivering_through_another_member() {
    bounded(async {
        let mut cluster = EtcdCluster::start(3).await.unwrap();
        let leader = cluster.leader_index().await.unwrap();
        // The leader first, so the watch and the writes start there.
        let mut endpoints = vec![cluster.endpoint(leader)];
        endpoints.extend(
            (0..cluster.len())
                .filter(|&i| i != leader)
                .map(|i| cluster.endpoint(i)),
        );
        let mut cfg = config(endpoints);
        cfg.lease_ttl = Duration::from_secs(10);
        let reg = EtcdRegistry::new(cfg).unwrap();
        let [a, b, c] = ["a", "b", "c"].map(|h| inst("web", h));
        reg.register(a.clone()).await.unwrap();
        let mut w = watch(&reg, "web").await;
        reg.register(b.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;
        assert_eq!(reg.client().current_endpoint(), cluster.endpoint(leader));

        cluster.kill(leader).await.unwrap();
        // Writes fail while the others elect a leader; retry, bounded.
        let start = Instant::now();
        while let Err(e) = reg.register(c.clone()).await {
            assert!(start.elapsed() < WAIT, "register never succeeded: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let want = ids_of(&[&a, &b, &c]);
        let s = wait_snapshot(&mut w, WAIT, "a+b+c", |s| ids(s) == want).await;
        assert_eq!(s, vec![a, b, c]);
        assert_ne!(reg.client().current_endpoint(), cluster.endpoint(leader));
        assert!(reg.stats().resumes >= 1);
        let new_leader = cluster.leader_index().await.unwrap();
        assert_ne!(new_leader, leader);
    })
    .await;
}
