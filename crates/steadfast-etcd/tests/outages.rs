//! Watch resilience against a real etcd: SIGKILL and SIGTERM mid-watch with
//! a restart on the same data, a compaction past the watch revision while
//! the watch is cut off, a restart on a wiped data dir, and a silent
//! (black-holed) connection caught by the liveness probe or the
//! progress-notify idle timeout.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use steadfast_core::Registry;
use steadfast_etcd::harness::{EtcdServer, TcpProxy};
use steadfast_etcd::EtcdRegistry;

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test]
async fn kill_and_term_mid_watch_resume_without_lost_or_duplicated_instances() {
    bounded(async {
        let mut etcd = EtcdServer::start().await.unwrap();
        let mut cfg = config(vec![etcd.endpoint()]);
        cfg.lease_ttl = Duration::from_secs(10);
        let reg = EtcdRegistry::new(cfg).unwrap();
        let [a, b, c, d] = ["a", "b", "c", "d"].map(|h| inst("web", h));
        reg.register(a.clone()).await.unwrap();
        let mut w = watch(&reg, "web").await;
        // b arriving through the watch proves the stream is open.
        reg.register(b.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;

        // SIGKILL: the body breaks mid-chunk (a decode error).
        etcd.kill().await.unwrap();
        etcd.restart().await.unwrap();
        reg.register(c.clone()).await.unwrap();
        let want = ids_of(&[&a, &b, &c]);
        let s = wait_snapshot(&mut w, WAIT, "a+b+c", |s| ids(s) == want).await;
        assert_eq!(s, vec![a.clone(), b.clone(), c.clone()]);
        assert!(reg.stats().resumes >= 1);
        let resumes = reg.stats().resumes;

        // SIGTERM: an error object without newline, then a clean end. etcd
        // takes up to 1.3 s to exit with open watches and about 1.5 s to
        // start: when its probes fail for longer than the liveness threshold
        // the watch truthfully reports stale on the way (at most once).
        etcd.stop().await.unwrap();
        etcd.restart().await.unwrap();
        reg.register(d.clone()).await.unwrap();
        let want = ids_of(&[&a, &b, &c, &d]);
        let (_, stale) =
            wait_snapshot_through_stale(&mut w, WAIT, "a+b+c+d", |s| ids(s) == want).await;
        let st = reg.stats();
        assert!(st.resumes > resumes);
        assert_eq!(st.resyncs, 0, "no resync: the store is the same");
        assert!(stale <= 1 && st.unavailable_reports <= 1, "{st:?}");
    })
    .await;
}

#[tokio::test]
async fn compaction_past_the_watch_revision_forces_a_full_resync() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let proxy = TcpProxy::start(etcd.client_addr()).await.unwrap();
        // The watcher goes through the proxy; the writer talks to etcd.
        // The cut breaks the stream, and a broken stream owes a full re-read
        // (it may hide a wiped store), so the resume reads the app whole and
        // follows the compacted store without ever watching from the
        // compacted revision; the compaction-cancel path of a plain
        // reconnect is covered by `compaction_cancel_demands_a_full_resync`
        // in the watch machine's tests.
        let mut cfg = config(vec![proxy.endpoint()]);
        cfg.backoff.initial = Duration::from_millis(1500);
        cfg.backoff.max = Duration::from_millis(1500);
        cfg.recover_probe_interval = Duration::from_secs(5);
        let reg = EtcdRegistry::new(cfg).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let l = reg.layout().clone();
        let put = |i: &steadfast_core::ServiceInstance| {
            (l.instance_key("web", &i.id), serde_json::to_vec(i).unwrap())
        };
        let [a, b, c, d] = ["a", "b", "c", "d"].map(|h| inst("web", h));
        let (k, v) = put(&a);
        raw.put(k.as_bytes(), &v, 0).await.unwrap();
        let mut w = watch(&reg, "web").await;
        // b arriving through the watch proves the stream is open.
        let (k, v) = put(&b);
        raw.put(k.as_bytes(), &v, 0).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;

        proxy.cut().await;
        raw.delete(put(&a).0.as_bytes()).await.unwrap();
        let mut b2 = b.clone();
        b2.weight = 7;
        let mut rev = 0;
        for i in [&c, &d, &b2] {
            let (k, v) = put(i);
            rev = raw.put(k.as_bytes(), &v, 0).await.unwrap().header.revision;
        }
        raw.compact(rev).await.unwrap();
        proxy.restore();

        let s = wait_snapshot(&mut w, WAIT, "b2+c+d", |s| ids(s) == ids_of(&[&b, &c, &d])).await;
        assert_eq!(s, vec![b2, c, d]);
        let st = reg.stats();
        assert!(st.rereads + st.resyncs >= 1, "a full read: {st:?}");
        assert!(st.resumes >= 1, "{st:?}");
    })
    .await;
}

#[tokio::test]
async fn a_wiped_data_dir_is_detected_and_the_snapshot_follows_the_new_store() {
    bounded(async {
        let mut etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        // Push the old store's revision well past what the new one reaches.
        for n in 0..30 {
            let k = format!("{}/filler/{n}", reg.layout().prefix());
            raw.put(k.as_bytes(), b"x", 0).await.unwrap();
        }
        let [a, b, c] = ["a", "b", "c"].map(|h| inst("web", h));
        reg.register(a.clone()).await.unwrap();
        let mut w = watch(&reg, "web").await;
        reg.register(b.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;

        etcd.wipe_and_restart().await.unwrap();
        let k = reg.layout().instance_key("web", &c.id);
        raw.put(k.as_bytes(), &serde_json::to_vec(&c).unwrap(), 0)
            .await
            .unwrap();
        // The keepalive tasks find their leases gone and register again.
        let want = ids_of(&[&a, &b, &c]);
        let s = wait_snapshot(&mut w, WAIT, "a+b+c", |s| ids(s) == want).await;
        assert_eq!(s, vec![a, b, c]);
        let st = reg.stats();
        assert!(st.rereads + st.resyncs >= 1, "a full read: {st:?}");
        assert!(st.resumes >= 1, "{st:?}");
        // Each task counts right after its put, which the watch may beat.
        eventually(WAIT, "2 re-registrations", || async {
            reg.stats().reregistrations >= 2
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn progress_notifications_keep_an_idle_watch_and_silence_trips_the_idle_timeout() {
    bounded(async {
        let etcd =
            EtcdServer::start_with_args(&["--experimental-watch-progress-notify-interval=1s"])
                .await
                .unwrap();
        let proxy = TcpProxy::start(etcd.client_addr()).await.unwrap();
        let mut cfg = config(vec![proxy.endpoint()]);
        cfg.progress_notify = true;
        cfg.watch_idle_timeout = Some(Duration::from_millis(3500));
        cfg.watch_open_timeout = Duration::from_secs(1);
        // Only the idle timeout may notice the black hole here (the
        // liveness probe has its own tests).
        cfg.liveness_probe_interval = None;
        let reg = EtcdRegistry::new(cfg).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let l = reg.layout().clone();
        let [a, b] = ["a", "b"].map(|h| inst("web", h));
        let mut w = watch(&reg, "web").await;
        let (k, v) = (
            l.instance_key("web", &a.id),
            serde_json::to_vec(&a).unwrap(),
        );
        raw.put(k.as_bytes(), &v, 0).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a", |s| s.len() == 1).await;

        // Wait on etcd itself: three progress messages on a raw watch of the
        // same idle prefix (about 3-4 s), during which the registry's watch
        // is idle too but kept by its own progress messages.
        let mut progress = raw
            .watch(l.app_prefix("web").as_bytes(), 0, true)
            .await
            .unwrap();
        let mut seen = 0;
        while seen < 3 {
            let m = tokio::time::timeout(WAIT, progress.next()).await.unwrap();
            if m.unwrap().unwrap().is_progress() {
                seen += 1;
            }
        }
        assert_eq!(reg.stats().resumes, 0, "no idle resume while notified");

        // Black-hole the connection: only the idle timeout can notice.
        proxy.freeze();
        let (k, v) = (
            l.instance_key("web", &b.id),
            serde_json::to_vec(&b).unwrap(),
        );
        raw.put(k.as_bytes(), &v, 0).await.unwrap();
        eventually(WAIT, "an idle resume", || async {
            reg.stats().resumes >= 1
        })
        .await;
        proxy.restore();
        // The black hole is reported stale once (an idle timeout is a
        // liveness loss), then healed.
        let (s, stale) = wait_snapshot_through_stale(&mut w, WAIT, "a+b", |s| s.len() == 2).await;
        assert_eq!(s, vec![a, b]);
        assert_eq!(stale, 1);
        assert_eq!(reg.stats().resyncs, 0);
    })
    .await;
}
