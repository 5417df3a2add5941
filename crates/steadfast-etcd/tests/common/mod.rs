//! Helpers shared by the integration tests: a fast config, bounded waits on
//! snapshot streams and on conditions.
#![allow(dead_code)]

pub mod slow_http;

use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use steadfast_core::{
    BackoffPolicy, EventStream, InstanceMap, Registry, RegistryError, ServiceInstance,
};
use steadfast_etcd::harness::unique_prefix;
use steadfast_etcd::{EtcdClient, EtcdConfig};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Upper bound of one whole test.
pub const TEST_LIMIT: Duration = Duration::from_secs(60);

/// Runs a test body under [`TEST_LIMIT`].
pub async fn bounded<F: Future<Output = ()>>(body: F) {
    bounded_for(TEST_LIMIT, body).await
}

/// Runs a test body under `limit`.
pub async fn bounded_for<F: Future<Output = ()>>(limit: Duration, body: F) {
    tokio::time::timeout(limit, body)
        .await
        .expect("test exceeded its time limit");
}

/// Scheduling slack every wall-clock bound keeps on top of the deadlines
/// it is derived from: the tests share two cores with other CPU-heavy work.
pub const SLACK: Duration = Duration::from_secs(1);

/// A probe cadence of `c` with its largest jitter.
fn jittered(c: &EtcdConfig, every: Duration) -> Duration {
    every.mul_f64(1.0 + c.backoff.jitter.clamp(0.0, 1.0))
}

/// Longest a client on `c` takes to declare an unresponsive etcd (frozen,
/// leaderless or gone) dead when every step runs to its configured
/// deadline: the first probe after its cadence (+ jitter), then
/// `probe_failures` probes at their deadline, each retried within a
/// cadence. Without probes, `stale_after` and one failed re-read.
pub fn liveness_deadline(c: &EtcdConfig) -> Duration {
    match c.liveness_probe_interval {
        Some(every) => jittered(c, every) + (c.probe_timeout + every) * c.probe_failures,
        None => c.stale_after + c.request_timeout,
    }
}

/// Bound of a stale report on `c`: twice its liveness deadline plus
/// [`SLACK`].
pub fn stale_bound(c: &EtcdConfig) -> Duration {
    liveness_deadline(c) * 2 + SLACK
}

/// Longest a reported watch on `c` takes to deliver again once etcd
/// answers, every step at its deadline: one recovery probe (cadence +
/// jitter, its deadline) and the re-read (one request deadline).
pub fn resume_deadline(c: &EtcdConfig) -> Duration {
    jittered(c, c.recover_probe_interval) + c.probe_timeout + c.request_timeout
}

/// Bound of a resume on `c`: its deadline plus [`SLACK`], not doubled, so
/// it stays below the backoff's cap and still tells the probe (not the
/// backoff) resumed the watch.
pub fn resume_bound(c: &EtcdConfig) -> Duration {
    resume_deadline(c) + SLACK
}

/// A config for tests: unique prefix, 2 s leases, short timeouts, fast
/// backoff without jitter, and a stale report only after 10 s (so a plain
/// restart of etcd is never reported).
pub fn config(endpoints: Vec<String>) -> EtcdConfig {
    let mut c = EtcdConfig::new(endpoints)
        .with_prefix(unique_prefix())
        .with_lease_ttl(Duration::from_secs(2))
        .with_backoff(BackoffPolicy {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(400),
            multiplier: 2.0,
            jitter: 0.0,
        });
    c.request_timeout = Duration::from_secs(1);
    c.watch_open_timeout = Duration::from_secs(2);
    c.stale_after = Duration::from_secs(10);
    c
}

/// The default config (what a user gets), on a unique prefix.
pub fn default_config(endpoints: Vec<String>) -> EtcdConfig {
    EtcdConfig::new(endpoints).with_prefix(unique_prefix())
}

/// A raw client on `endpoints`.
pub fn client(endpoints: Vec<String>) -> EtcdClient {
    EtcdClient::new(endpoints, Duration::from_secs(2), Duration::from_secs(2)).unwrap()
}

/// An instance of `app` on `host`.
pub fn inst(app: &str, host: &str) -> ServiceInstance {
    ServiceInstance::new(app, host, 8080)
}

/// Sorted instance ids.
pub fn ids(v: &[ServiceInstance]) -> Vec<String> {
    let mut ids: Vec<String> = v.iter().map(|i| i.id.clone()).collect();
    ids.sort();
    ids
}

/// Sorted ids of `insts`.
pub fn ids_of(insts: &[&ServiceInstance]) -> Vec<String> {
    let mut ids: Vec<String> = insts.iter().map(|i| i.id.clone()).collect();
    ids.sort();
    ids
}

type Item = Result<Vec<ServiceInstance>, RegistryError>;

/// An event stream polled continuously by a task (as the engine does), so
/// the watch stays open between reads; each `Ok` item is the whole state a
/// subscriber holds after the event. Dropping it drops the stream.
pub struct Watch {
    rx: mpsc::UnboundedReceiver<(Instant, Item)>,
    task: JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// The next item, however long it takes (`None`: the stream ended).
    pub async fn rx_next(&mut self) -> Option<Item> {
        self.rx.recv().await.map(|(_, item)| item)
    }

    /// The next item with the instant it arrived, within `limit`.
    pub async fn next_timed(&mut self, limit: Duration) -> (Instant, Item) {
        tokio::time::timeout(limit, self.rx.recv())
            .await
            .expect("no watch item in time")
            .expect("the watch ended")
    }
}

/// Pumps the events of `app`'s `stream` into a [`Watch`], applying each
/// to the state held as the engine does (one not newer changes nothing).
pub fn pump(app: &str, mut stream: EventStream) -> Watch {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = app.to_string();
    let task = tokio::spawn(async move {
        let mut state = InstanceMap::default();
        while let Some(item) = stream.next().await {
            let item = item.map(|event| {
                let applied = state.apply(event, usize::MAX);
                assert!(
                    !matches!(applied, steadfast_core::MapApplied::Gap),
                    "an etcd delta always follows the event before it"
                );
                let mut all: Vec<ServiceInstance> =
                    state.iter().map(|i| i.to_record(&app)).collect();
                all.sort_by(|a, b| a.id.cmp(&b.id));
                all
            });
            if tx.send((Instant::now(), item)).is_err() {
                return;
            }
        }
    });
    Watch { rx, task }
}

/// The instances `reg` lists for `app`, as records sorted by id.
pub async fn listed(reg: &impl Registry, app: &str) -> Vec<ServiceInstance> {
    let listing = reg.list(app).await.expect("list");
    let mut all: Vec<ServiceInstance> =
        listing.instances.iter().map(|i| i.to_record(app)).collect();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    all
}

/// Watches `app` on `reg` and pumps the stream.
pub async fn watch(reg: &impl Registry, app: &str) -> Watch {
    pump(app, reg.watch(app).await.expect("watch"))
}

/// The next item of `w` (`None` = the stream ended), within `limit`.
pub async fn next_item(w: &mut Watch, limit: Duration) -> Option<Item> {
    tokio::time::timeout(limit, w.rx_next())
        .await
        .expect("no watch item in time")
}

/// Reads snapshots until one satisfies `pred`, within `limit`; panics on an
/// error item, the end of the stream, a snapshot with a duplicated id, or
/// the deadline. Returns that snapshot.
pub async fn wait_snapshot(
    w: &mut Watch,
    limit: Duration,
    what: &str,
    pred: impl Fn(&[ServiceInstance]) -> bool,
) -> Vec<ServiceInstance> {
    let deadline = Instant::now() + limit;
    let mut last = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, w.rx_next()).await {
            Err(_) => panic!("timed out waiting for {what}; last snapshot {last:?}"),
            Ok(None) => panic!("watch ended while waiting for {what}"),
            Ok(Some(Err(e))) => panic!("watch error while waiting for {what}: {e}"),
            Ok(Some(Ok(s))) => {
                let mut unique = ids(&s);
                unique.dedup();
                assert_eq!(unique.len(), s.len(), "duplicated instance in {s:?}");
                if pred(&s) {
                    return s;
                }
                last = Some(ids(&s));
            }
        }
    }
}

/// Like [`wait_snapshot`], but an error item (the source reported stale)
/// is counted instead of failing the test. Returns the snapshot and the
/// number of error items seen before it.
pub async fn wait_snapshot_through_stale(
    w: &mut Watch,
    limit: Duration,
    what: &str,
    pred: impl Fn(&[ServiceInstance]) -> bool,
) -> (Vec<ServiceInstance>, usize) {
    let deadline = Instant::now() + limit;
    let mut errors = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, w.rx_next()).await {
            Err(_) => panic!("timed out waiting for {what}"),
            Ok(None) => panic!("watch ended while waiting for {what}"),
            Ok(Some(Err(_))) => errors += 1,
            Ok(Some(Ok(s))) if pred(&s) => return (s, errors),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// Waits for the next error item (the source reported stale) within
/// `limit` of `since`, skipping snapshots; returns when it arrived, as the
/// time since `since`.
pub async fn wait_stale(w: &mut Watch, since: Instant, limit: Duration) -> Duration {
    loop {
        let left = (since + limit).saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, w.rx.recv()).await {
            Err(_) => panic!("no stale report within {limit:?}"),
            Ok(None) => panic!("watch ended instead of reporting stale"),
            Ok(Some((at, Err(_)))) => return at.saturating_duration_since(since),
            Ok(Some((_, Ok(_)))) => {}
        }
    }
}

/// Waits for the first snapshot that arrived at or after `since` and
/// satisfies `pred` (items that arrived earlier, and error items, are
/// skipped), within `limit` of `since`; returns it and when it arrived.
pub async fn first_snapshot_after(
    w: &mut Watch,
    since: Instant,
    limit: Duration,
    pred: impl Fn(&[ServiceInstance]) -> bool,
) -> (Vec<ServiceInstance>, Instant) {
    loop {
        let left = (since + limit).saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, w.rx.recv()).await {
            Err(_) => panic!("no matching snapshot within {limit:?}"),
            Ok(None) => panic!("watch ended"),
            Ok(Some((at, Ok(s)))) if at >= since && pred(&s) => {
                return (s, at);
            }
            Ok(Some(_)) => {}
        }
    }
}

/// Polls `cond` every 50 ms until it holds, within `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// MetadataInfo of `app` exporting `org.example.Greeter` 1.0 over `tri` on
/// `port`.
pub fn info(app: &str, port: u16) -> steadfast_core::MetadataInfo {
    steadfast_core::MetadataInfo::new(
        app,
        [steadfast_core::ServiceInfo {
            name: "org.example.Greeter".into(),
            group: None,
            version: Some("1.0".into()),
            protocol: "tri".into(),
            port,
            path: "org.example.Greeter".into(),
            params: Default::default(),
        }],
    )
}
