//! Interface -> app mappings on a real etcd: one persistent key per app
//! (concurrent providers never overwrite each other), interface names with
//! `/` and odd UTF-8 kept apart, the watch session's whole sets, and a
//! frozen (SIGSTOP) or killed etcd ending the session with one `Err` within
//! sub-second deadlines (each wall-clock bound derived from them with
//! headroom and printed: the tests share two cores with other work).

mod common;

use std::time::{Duration, Instant};

use common::{bounded, config, stale_bound, SLACK};
use futures::StreamExt;
use steadfast_core::{MappingStream, Registry, RegistryError};
use steadfast_etcd::harness::EtcdServer;
use steadfast_etcd::{EtcdConfig, EtcdRegistry};

/// Sub-second deadlines everywhere, a probe every 200 ms.
fn fast(endpoint: String) -> EtcdConfig {
    let mut c = config(vec![endpoint]);
    c.request_timeout = Duration::from_millis(400);
    c.watch_open_timeout = Duration::from_millis(400);
    c.operation_timeout = Duration::from_millis(800);
    c.liveness_probe_interval = Some(Duration::from_millis(200));
    c.probe_timeout = Duration::from_millis(200);
    c
}

/// Longest a wait for a mapping item polls: it only bounds a failure.
const WAIT: Duration = Duration::from_secs(10);

/// The next whole set of `w`, within [`WAIT`].
async fn next_set(w: &mut MappingStream) -> Vec<String> {
    let item = tokio::time::timeout(WAIT, w.next())
        .await
        .expect("a mapping item in time")
        .expect("the stream is open");
    item.expect("a set, not an error").apps
}

#[tokio::test]
async fn one_key_per_app_whole_sets_and_names_kept_apart() {
    bounded(async {
        let etcd = EtcdServer::start().await.expect("etcd starts");
        let c = fast(etcd.endpoint());
        let a = EtcdRegistry::new(c.clone()).unwrap();
        let b = EtcdRegistry::new(c.clone()).unwrap();
        let odd = "Grüße/服务.💥 a%2F";
        let mut w = a.watch_mapping(odd).await.unwrap();
        assert!(next_set(&mut w).await.is_empty(), "the whole set first");
        // Two providers at once: neither overwrites the other.
        let (ra, rb) = tokio::join!(
            a.register_mapping(odd, "app-a"),
            b.register_mapping(odd, "app/b")
        );
        ra.unwrap();
        rb.unwrap();
        let mut seen = next_set(&mut w).await;
        if seen.len() < 2 {
            seen = next_set(&mut w).await;
        }
        assert_eq!(seen, vec!["app-a", "app/b"]);
        // The keys: one per app, persistent (no lease), names encoded.
        let prefix = a.layout().mapping_prefix(odd);
        assert!(prefix.is_ascii() && !prefix.contains("/x"), "{prefix}");
        let r = a.client().range_prefix(prefix.as_bytes()).await.unwrap();
        assert_eq!(r.kvs.len(), 2);
        assert!(r.kvs.iter().all(|kv| kv.lease == 0), "persistent keys");
        // A neighbour whose name is a prefix (or a `/` path) of it is apart.
        a.register_mapping("Grüße", "other").await.unwrap();
        a.register_mapping("Grüße/服务.💥 a%2F/x", "nested")
            .await
            .unwrap();
        a.unregister_mapping(odd, "app-a").await.unwrap();
        assert_eq!(next_set(&mut w).await, vec!["app/b"]);
        let mut fresh = b.watch_mapping("Grüße").await.unwrap();
        assert_eq!(next_set(&mut fresh).await, vec!["other"]);
        assert!(matches!(
            a.register_mapping("", "x").await,
            Err(RegistryError::Rejected(_))
        ));
    })
    .await;
}

#[tokio::test]
async fn a_frozen_etcd_ends_the_session_with_one_err_and_a_rewatch_fails_fast() {
    bounded(async {
        let mut etcd = EtcdServer::start().await.expect("etcd starts");
        let c = fast(etcd.endpoint());
        // Noticed through the liveness probe; a new session on a frozen
        // etcd fails within its range's and watch open's deadlines.
        let notice_limit = stale_bound(&c);
        let rewatch_limit = (c.request_timeout + c.watch_open_timeout) * 2 + SLACK;
        let r = EtcdRegistry::new(c).unwrap();
        r.register_mapping("demo.Greeter", "greeter").await.unwrap();
        let mut w = r.watch_mapping("demo.Greeter").await.unwrap();
        assert_eq!(next_set(&mut w).await, vec!["greeter"]);

        etcd.freeze().unwrap();
        let t0 = Instant::now();
        let item = tokio::time::timeout(notice_limit, w.next())
            .await
            .expect("noticed within the liveness bound");
        assert!(matches!(item, Some(Err(_))), "{item:?}");
        let noticed = t0.elapsed();
        eprintln!("frozen etcd: the mapping session's Err after {noticed:?} (bound {notice_limit:?})");
        assert!(noticed < notice_limit, "took {noticed:?}");
        assert!(w.next().await.is_none(), "the session ends after its Err");
        let t1 = Instant::now();
        assert!(r.watch_mapping("demo.Greeter").await.is_err());
        let refused = t1.elapsed();
        eprintln!("frozen etcd: a new mapping session refused after {refused:?} (bound {rewatch_limit:?})");
        assert!(refused < rewatch_limit, "under the deadline: {refused:?}");

        etcd.thaw().unwrap();
        let mut w = r.watch_mapping("demo.Greeter").await.unwrap();
        assert_eq!(next_set(&mut w).await, vec!["greeter"]);

        // Killed: the open watch breaks, and a change made after the
        // restart is in the next session's first set.
        etcd.kill().await.unwrap();
        let t2 = Instant::now();
        let item = tokio::time::timeout(notice_limit, w.next())
            .await
            .expect("noticed within the liveness bound");
        eprintln!("killed etcd: the mapping session's Err after {:?}", t2.elapsed());
        assert!(matches!(item, Some(Err(_))), "{item:?}");
        etcd.restart().await.unwrap();
        r.register_mapping("demo.Greeter", "late").await.unwrap();
        let mut w = r.watch_mapping("demo.Greeter").await.unwrap();
        assert_eq!(next_set(&mut w).await, vec!["greeter", "late"]);
    })
    .await;
}
