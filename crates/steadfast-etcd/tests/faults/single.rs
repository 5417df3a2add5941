//! Faults of a single-member etcd: a 20 s SIGSTOP, a 45 s SIGKILL outage
//! (both in one test, run concurrently), and a wiped store written past the
//! old revision before the watch reconnects.

use std::time::{Duration, Instant};

use steadfast_core::{Registry, ServiceInstance};
use steadfast_etcd::harness::{EtcdServer, TcpProxy};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};

use crate::common::*;

const WAIT: Duration = Duration::from_secs(15);
const FREEZE: Duration = Duration::from_secs(20);
const OUTAGE: Duration = Duration::from_secs(45);

/// Bound of the re-registrations after etcd expired their leases: the
/// shared keepalive probe's cadence (+ jitter) and deadline, the spread of
/// the retries and one request deadline, plus [`SLACK`]; not doubled, so it
/// stays below the keepalive backoff's cap.
fn reregister_bound(c: &EtcdConfig) -> Duration {
    c.keepalive_probe_interval.mul_f64(1.0 + c.backoff.jitter)
        + c.probe_timeout
        + c.reregister_spread
        + c.request_timeout
        + SLACK
}

/// Providers registered through their own registry (default config,
/// 10 s leases); a consumer registry with its own client watching them.
async fn provider_and_consumer(
    etcd: &EtcdServer,
    n: usize,
) -> (EtcdRegistry, EtcdRegistry, Vec<ServiceInstance>, Watch) {
    let provider = EtcdRegistry::new(default_config(vec![etcd.endpoint()])).unwrap();
    let consumer = EtcdRegistry::new(provider.config().clone()).unwrap();
    let insts: Vec<ServiceInstance> = (0..n)
        .map(|i| inst("web", &format!("10.0.0.{i}")))
        .collect();
    for i in &insts {
        provider.register(i.clone()).await.unwrap();
    }
    let mut w = watch(&consumer, "web").await;
    wait_snapshot(&mut w, WAIT, "every provider", |s| s.len() == n).await;
    (provider, consumer, insts, w)
}

/// SIGSTOP for 20 s: stale within the liveness deadline, a fresh snapshot
/// within the recovery probe's deadline of SIGCONT, and every registration
/// whose lease etcd expired on the thaw back within the keepalive probe's
/// (bounds in `common`, printed with what was measured).
async fn freeze_20s() {
    let mut etcd = EtcdServer::start().await.unwrap();
    let n = 20;
    let (provider, _consumer, insts, mut w) = provider_and_consumer(&etcd, n).await;
    let old: Vec<i64> = insts
        .iter()
        .map(|i| provider.lease_of(i).unwrap())
        .collect();
    let raw = client(vec![etcd.endpoint()]);
    let prefix = provider.layout().app_prefix("web");
    let cfg = provider.config().clone();
    let (stale_limit, resume_limit, back_limit) = (
        stale_bound(&cfg),
        resume_bound(&cfg),
        reregister_bound(&cfg),
    );
    assert!(stale_limit < FREEZE);
    assert!(resume_limit < cfg.backoff.max && back_limit < cfg.backoff.max);

    etcd.freeze().unwrap();
    let frozen = Instant::now();
    let stale = wait_stale(&mut w, frozen, stale_limit).await;
    tokio::time::sleep_until((frozen + FREEZE).into()).await;
    etcd.thaw().unwrap();
    let thawed = Instant::now();

    let back = async {
        loop {
            if let Ok(r) = raw.range_prefix(prefix.as_bytes()).await {
                let renewed = r.kvs.len() == n
                    && r.kvs
                        .iter()
                        .all(|kv| kv.lease != 0 && !old.contains(&kv.lease));
                if renewed {
                    return thawed.elapsed();
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let back = tokio::time::timeout(WAIT, back);
    let resumed = first_snapshot_after(&mut w, thawed, WAIT, |_| true);
    let (back, (_, resumed_at)) = tokio::join!(back, resumed);
    let back = back.expect("registrations never came back");
    let resumed = resumed_at.duration_since(thawed);
    let (s, _) = wait_snapshot_through_stale(&mut w, WAIT, "all back", |s| s.len() == n).await;
    assert_eq!(ids(&s), ids(&insts));
    println!(
        "freeze 20 s: stale reported {stale:?} after SIGSTOP; watch resumed {resumed:?} after \
         SIGCONT; {n} expired registrations back {back:?} after SIGCONT (bounds {stale_limit:?}, \
         {resume_limit:?}, {back_limit:?})"
    );
    assert!(stale <= stale_limit, "stale after {stale:?}");
    assert!(resumed <= resume_limit, "resumed after {resumed:?}");
    assert!(back <= back_limit, "registrations back after {back:?}");
    let st = provider.stats();
    assert!(st.reregistrations >= n as u64, "{st:?}");
    // One shared prober watched etcd for all 20 registrations: at most one
    // probe per 250 ms cadence plus its 1 s deadline, not one per key.
    println!(
        "freeze 20 s: {} shared health probes failed, {} keepalive rounds failed",
        st.health_probe_failures, st.keepalive_failures
    );
    assert!((1..=20).contains(&st.health_probe_failures), "{st:?}");
}

/// SIGKILL for 45 s: stale within the liveness deadline, a fresh snapshot
/// within the recovery probe's deadline of etcd being healthy again (the
/// backoff grew to its 10 s cap meanwhile). A second consumer client with
/// four watches shares one prober: its probes while etcd is down do not
/// grow with the watches, and every one of them resumes within that
/// deadline too.
async fn outage_45s() {
    let mut etcd = EtcdServer::start().await.unwrap();
    let (provider, consumer, insts, mut w) = provider_and_consumer(&etcd, 2).await;
    let many = EtcdRegistry::new(provider.config().clone()).unwrap();
    let mut ws = Vec::new();
    for _ in 0..4 {
        let mut x = watch(&many, "web").await;
        wait_snapshot(&mut x, WAIT, "every provider", |s| s.len() == 2).await;
        ws.push(x);
    }
    let cfg = provider.config().clone();
    let (stale_limit, resume_limit) = (stale_bound(&cfg), resume_bound(&cfg));
    assert!(resume_limit < cfg.backoff.max);
    etcd.kill().await.unwrap();
    let killed = Instant::now();
    let probes_at_kill = many.stats().probes_sent;
    let stale = wait_stale(&mut w, killed, stale_limit).await;
    for x in &mut ws {
        wait_stale(x, killed, stale_limit).await;
    }
    tokio::time::sleep_until((killed + OUTAGE).into()).await;
    let spawned = Instant::now();
    let outage_probes = many.stats().probes_sent - probes_at_kill;
    etcd.restart().await.unwrap();
    let healthy = Instant::now();
    let (s, at) = first_snapshot_after(&mut w, spawned, WAIT, |s| !s.is_empty()).await;
    let resumed = at.saturating_duration_since(healthy);
    let mut slowest = Duration::ZERO;
    for x in &mut ws {
        let (_, at) = first_snapshot_after(x, spawned, WAIT, |s| !s.is_empty()).await;
        slowest = slowest.max(at.saturating_duration_since(healthy));
    }
    println!(
        "outage 45 s: 4 watches on one client sent {outage_probes} probes while etcd was down \
         (one prober, ~1 s cadence); the slowest resumed {slowest:?} after etcd healthy \
         (bound {resume_limit:?})"
    );
    assert!(outage_probes <= 60, "{outage_probes} probes for 4 watches");
    assert!(slowest <= resume_limit, "resumed after {slowest:?}");
    assert_eq!(many.stats().unavailable_reports, 4, "one per watch");
    assert_eq!(ids(&s), ids(&insts), "leases survive a restart");
    println!(
        "outage 45 s: stale reported {stale:?} after SIGKILL; watch resumed {resumed:?} after \
         etcd healthy (restart took {:?}; bounds {stale_limit:?}, {resume_limit:?})",
        healthy - spawned
    );
    assert!(stale <= stale_limit, "stale after {stale:?}");
    assert!(resumed <= resume_limit, "resumed after {resumed:?}");
    let st = consumer.stats();
    assert_eq!(st.unavailable_reports, 1, "{st:?}");
    assert!(st.rereads >= 1, "{st:?}");
    drop(provider);
}

#[tokio::test]
async fn a_20s_freeze_and_a_45s_outage_are_reported_and_healed_in_bounded_time() {
    bounded_for(Duration::from_secs(120), async {
        tokio::join!(freeze_20s(), outage_45s());
    })
    .await;
}

#[tokio::test]
async fn a_wiped_store_written_past_the_old_revision_before_the_watch_reconnects_is_caught() {
    bounded(async {
        let mut etcd = EtcdServer::start().await.unwrap();
        let proxy = TcpProxy::start(etcd.client_addr()).await.unwrap();
        let consumer = EtcdRegistry::new(default_config(vec![proxy.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let l = consumer.layout().clone();
        let put =
            |i: &ServiceInstance| (l.instance_key("web", &i.id), serde_json::to_vec(i).unwrap());
        let [a, b, c] = ["a", "b", "c"].map(|h| inst("web", h));
        for i in [&a, &b] {
            let (k, v) = put(i);
            raw.put(k.as_bytes(), &v, 0).await.unwrap();
        }
        let filler = format!("{}/filler", l.prefix());
        for _ in 0..10 {
            raw.put(filler.as_bytes(), b"x", 0).await.unwrap();
        }
        let mut w = watch(&consumer, "web").await;
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;
        let old_rev = raw.get(b"/").await.unwrap().header.revision;

        proxy.cut().await;
        etcd.wipe_and_restart().await.unwrap();
        let (k, v) = put(&c);
        raw.put(k.as_bytes(), &v, 0).await.unwrap();
        let mut rev = 0;
        while rev <= old_rev + 5 {
            rev = raw
                .put(filler.as_bytes(), b"y", 0)
                .await
                .unwrap()
                .header
                .revision;
        }
        proxy.restore();
        let restored = Instant::now();
        let want = ids_of(&[&c]);
        let (s, _) = wait_snapshot_through_stale(&mut w, WAIT, "only c", |s| ids(s) == want).await;
        assert_eq!(s, vec![c]);
        let st = consumer.stats();
        println!(
            "wiped store (old revision {old_rev}, new {rev}): correct snapshot {:?} after the \
             watch could reconnect; missed_notifications {}",
            restored.elapsed(),
            st.missed_notifications
        );
        assert!(st.missed_notifications >= 3, "{st:?}");
        assert!(st.rereads + st.resyncs >= 1, "{st:?}");
    })
    .await;
}
