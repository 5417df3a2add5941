//! One engine, one watch stream: many apps watched through one
//! [`EtcdRegistry`] share at most two etcd watch streams and four TCP
//! connections (etcd's own `/metrics`, this process's sockets), every app
//! still gets its own changes, resyncs alone, resumes from its own revision
//! after the shared stream breaks, and can come and go while the stream is
//! open.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use steadfast_core::EventStream;
use steadfast_core::{InstanceMap, RegistryEvent, ServiceInstance};
use steadfast_etcd::harness::metrics::{connections_to, etcd_metric, watch_streams};
use steadfast_etcd::harness::{EtcdServer, TcpProxy};
use steadfast_etcd::{EtcdClient, EtcdConfig, EtcdRegistry};

const WAIT: Duration = Duration::from_secs(15);

struct App {
    name: String,
    stream: EventStream,
    map: InstanceMap,
    resets: usize,
}

async fn subscribe(reg: &EtcdRegistry, names: impl Iterator<Item = String>) -> Vec<App> {
    let names: Vec<String> = names.collect();
    let opens = names.iter().map(|n| reg.watch_events(n));
    let streams = futures::future::join_all(opens).await;
    let mut apps = Vec::new();
    for (name, s) in names.into_iter().zip(streams) {
        let mut app = App {
            name,
            stream: s.expect("watch"),
            map: InstanceMap::default(),
            resets: 0,
        };
        app.next_until(|m| m.version().is_some()).await;
        apps.push(app);
    }
    apps
}

impl App {
    /// Applies events until `pred` holds; every Delta must be newer than
    /// the state held (no change delivered twice).
    async fn next_until(&mut self, pred: impl Fn(&InstanceMap) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !pred(&self.map) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.next()).await {
                Ok(Some(Ok(ev))) => {
                    if let RegistryEvent::Delta { version, .. } = &ev {
                        assert!(
                            self.map.version() < Some(*version),
                            "{}: duplicate {ev:?}",
                            self.name
                        );
                    } else {
                        self.resets += 1;
                    }
                    let applied = self.map.apply(ev, usize::MAX);
                    assert!(
                        !matches!(applied, steadfast_core::MapApplied::Gap),
                        "{}: a delta that does not follow",
                        self.name
                    );
                }
                Ok(Some(Err(_))) => {}
                other => panic!("{}: no state in time: {other:?}", self.name),
            }
        }
    }

    fn hosts(&self) -> Vec<String> {
        let mut h: Vec<String> = self.map.iter().map(|i| i.host().to_string()).collect();
        h.sort();
        h
    }
}

async fn put(raw: &EtcdClient, reg: &EtcdRegistry, i: &ServiceInstance) -> i64 {
    let k = reg.layout().instance_key(&i.app, &i.id);
    let v = serde_json::to_vec(i).unwrap();
    raw.put(k.as_bytes(), &v, 0).await.unwrap().header.revision
}

fn names(prefix: &str, n: usize) -> impl Iterator<Item = String> + '_ {
    (0..n).map(move |i| format!("{prefix}{i}"))
}

#[tokio::test]
async fn a_hundred_and_twenty_apps_share_two_streams_and_four_connections_at_most() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let before = watch_streams(&etcd.endpoint()).await.unwrap();
        let mut apps = subscribe(&reg, names("app", 120)).await;
        // Every app's own change arrives through the shared stream.
        for a in &apps {
            put(&raw, &reg, &inst(&a.name, "h1")).await;
        }
        for a in &mut apps {
            a.next_until(|m| m.len() == 1).await;
            assert_eq!(a.hosts(), vec!["h1"]);
        }
        let streams = watch_streams(&etcd.endpoint()).await.unwrap() - before;
        assert!((1.0..=2.0).contains(&streams), "{streams} watch streams");
        let watchers = etcd_metric(&etcd.endpoint(), "etcd_debugging_mvcc_watcher_total").await;
        assert!(
            watchers >= Some(120.0),
            "every create honoured: {watchers:?}"
        );
        let conns = connections_to(etcd.client_addr().port());
        assert!((1..=4).contains(&conns), "{conns} connections");
        assert!(reg.stats().range_batches <= 4, "{:?}", reg.stats());
    })
    .await;
}

#[tokio::test]
async fn apps_subscribe_and_unsubscribe_while_the_shared_stream_is_open() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let mut first = subscribe(&reg, names("a", 40)).await;
        put(&raw, &reg, &inst("a0", "h1")).await;
        first[0].next_until(|m| m.len() == 1).await;
        // Newcomers while the stream is open, then a few leave.
        let mut late = subscribe(&reg, names("b", 10)).await;
        let gone: Vec<App> = first.drain(30..).collect();
        drop(gone);
        for a in first.iter().chain(&late) {
            put(&raw, &reg, &inst(&a.name, "h2")).await;
        }
        for i in 30..40 {
            put(&raw, &reg, &inst(&format!("a{i}"), "h2")).await;
        }
        for a in first.iter_mut().chain(late.iter_mut()) {
            let id = inst(&a.name, "h2").id;
            a.next_until(|m| m.get(&id).is_some()).await;
        }
        let streams = watch_streams(&etcd.endpoint()).await.unwrap();
        assert!(streams <= 2.0, "{streams} watch streams");
        // A left app subscribes again and starts from its current state.
        let mut back = subscribe(&reg, std::iter::once("a35".to_string())).await;
        assert_eq!(back[0].hosts(), vec!["h2"]);
        put(&raw, &reg, &inst("a35", "h3")).await;
        back[0].next_until(|m| m.len() == 2).await;
    })
    .await;
}

#[tokio::test]
async fn one_apps_compaction_resync_re_reads_that_app_alone() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let mut cfg: EtcdConfig = config(vec![etcd.endpoint()]);
        // No probes: etcd's range counter then counts the watches' reads.
        cfg.liveness_probe_interval = None;
        // The default deadlines: on a loaded machine the test config's 1 s
        // call / 2 s watch-open deadlines can expire and re-open the main
        // stream, whose re-reads would then be counted as x's.
        cfg.request_timeout = Duration::from_secs(3);
        cfg.watch_open_timeout = Duration::from_secs(5);
        let reg = EtcdRegistry::new(cfg).unwrap();
        let mut main = subscribe(&reg, names("m", 100)).await;
        // An event through each watch proves it created and caught up. (etcd
        // creates the watches of one stream one after the other; on a loaded
        // machine some are still being created when the store moves on, and
        // a watch created below a later compaction is cancelled by etcd: its
        // app's history is gone and it is rightly re-read. That is etcd
        // cancelling those apps' own watches, not x's compaction.)
        for (i, app) in main.iter_mut().enumerate() {
            put(&raw, &reg, &inst(&format!("m{i}"), "h1")).await;
            app.next_until(|m| m.len() == 1).await;
        }
        // x joins while main is open: it goes to the side stream, its watch
        // from its range revision.
        let mut x = subscribe(&reg, std::iter::once("x".to_string()))
            .await
            .remove(0);
        // etcd moves a watch that caught up to its synced group within its
        // 100 ms sync loop; only a watch still behind is cancelled by a
        // compaction. Headroom for a loaded machine (not a bound).
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The store moves on and is compacted past x's revision.
        put(&raw, &reg, &inst("m1", "h2")).await;
        let rev = put(&raw, &reg, &inst("m2", "h2")).await;
        raw.compact(rev).await.unwrap();
        let endpoint = etcd.endpoint();
        let ranges = || etcd_metric(&endpoint, "etcd_debugging_mvcc_range_total");
        let before = ranges().await.unwrap();
        let (resyncs, opens) = (reg.stats().resyncs, reg.stats().stream_opens);
        // y joins: the side stream is opened again with x's watch from x's
        // own (compacted) revision: etcd cancels x's watch alone.
        let mut y = subscribe(&reg, std::iter::once("y".to_string()))
            .await
            .remove(0);
        put(&raw, &reg, &inst("x", "hx")).await;
        put(&raw, &reg, &inst("y", "hy")).await;
        x.next_until(|m| m.len() == 1).await;
        y.next_until(|m| m.len() == 1).await;
        let after = ranges().await.unwrap();
        // x's re-created watch starts below the compaction, so etcd cancels
        // it and x is re-read, unless etcd had told x's watch of a later
        // revision meanwhile (then nothing of x is lost and nothing re-read).
        // Either way: y's first read and at most x's, nothing else.
        let s = reg.stats();
        let x_reads = x.resets - 1;
        println!(
            "ranges {}, x re-read {x_reads} time(s), {s:?}",
            after - before
        );
        assert!(x_reads <= 1, "x re-read at most once: {}", x.resets);
        assert_eq!(s.resyncs - resyncs, x_reads as u64, "{s:?}");
        assert_eq!(
            after - before,
            1.0 + x_reads as f64,
            "y's read and x's alone"
        );
        assert_eq!(
            s.stream_opens - opens,
            1 + x_reads as u64,
            "the side stream alone (for y, and for x back from its re-read): {s:?}"
        );
        // The main stream was not re-opened: its apps were not re-read and
        // still get their changes.
        put(&raw, &reg, &inst("m5", "h2")).await;
        main[5].next_until(|m| m.len() == 2).await;
        for a in &main {
            assert_eq!(a.resets, 1, "{}: only its initial Reset", a.name);
        }
    })
    .await;
}

#[tokio::test]
async fn a_broken_shared_stream_resumes_every_app_with_no_change_lost_or_repeated() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let proxy = TcpProxy::start(etcd.client_addr()).await.unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let reg = EtcdRegistry::new(config(vec![proxy.endpoint()])).unwrap();
        let mut apps = subscribe(&reg, names("app", 100)).await;
        for a in &apps {
            put(&raw, &reg, &inst(&a.name, "h1")).await;
        }
        for a in &mut apps {
            a.next_until(|m| m.len() == 1).await;
        }
        // Cut the watcher's connections; every app changes meanwhile.
        proxy.cut().await;
        for (i, a) in apps.iter().enumerate() {
            let mut changed = inst(&a.name, "h1");
            changed.weight = 5;
            put(&raw, &reg, &changed).await;
            if i % 2 == 0 {
                put(&raw, &reg, &inst(&a.name, "h2")).await;
            }
        }
        proxy.restore();
        for (i, a) in apps.iter_mut().enumerate() {
            let want = if i % 2 == 0 { 2 } else { 1 };
            a.next_until(|m| {
                m.len() == want && m.iter().any(|x| x.host() == "h1" && x.weight() == 5)
            })
            .await;
        }
        // And the resumed stream delivers new changes to everyone.
        for a in &apps {
            put(&raw, &reg, &inst(&a.name, "h3")).await;
        }
        for (i, a) in apps.iter_mut().enumerate() {
            let want = if i % 2 == 0 { 3 } else { 2 };
            a.next_until(|m| m.len() == want).await;
        }
        assert!(reg.stats().resumes >= 100, "{:?}", reg.stats());
        let streams = watch_streams(&etcd.endpoint()).await.unwrap();
        assert!(streams <= 2.0, "{streams} watch streams");
    })
    .await;
}
