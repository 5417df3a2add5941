//! Registry faults on virtual time: a registry that panics (in `watch`, in
//! its stream, in `list`), a watch that reports unhealthy and heals (or goes
//! silent and is re-opened), a lost notification corrected by the periodic
//! resync, the probe that brings the watch back promptly after a long
//! outage, and a backend that re-reads on resume by itself.

mod common;

use std::time::Duration;

use common::*;
use futures::future::BoxFuture;
use steadfast::{
    EventStream, Listing, MemoryRegistry, Reference, Registry, RegistryError, ServiceInstance,
};

/// One backoff step of the default registry schedule: 1 s + 25 % jitter.
const ONE_STEP: Duration = Duration::from_millis(1250);

/// Two apps, one directory each, both ready.
async fn two_apps(fx: &Fixture) -> Vec<steadfast::Directory> {
    let mut dirs = Vec::new();
    for (i, app) in [APP, "other"].into_iter().enumerate() {
        let m = metadata(app, 20000, "t1");
        fx.fetcher.serve(m.clone());
        let dir = fx
            .engine
            .subscribe(Reference::new(IFACE, "tri", [app]))
            .await
            .unwrap();
        fx.registry.put(instance(&m, 8001 + i as u16));
        dirs.push(dir);
    }
    for dir in &dirs {
        wait_for(dir, "ready", Duration::from_millis(50), |v| {
            v.status.is_ready()
        })
        .await;
    }
    dirs
}

#[actix_rt::test]
async fn a_registry_watch_that_panics_once_recovers_within_one_backoff_step() {
    let fx = Fixture::start();
    // The very first watch panics: the directories start Pending.
    fx.registry.panic_next_watches(1);
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    fx.registry.put(instance(&m, 8001));
    let dir = fx.subscribe().await;
    settle().await;
    assert!(!dir.view().await.unwrap().status.is_ready());
    assert_eq!(fx.engine.stats().registry_panics, 1, "counted");
    wait_for(&dir, "ready after the panic", ONE_STEP, |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(fx.engine.stats().restarts, 0, "contained: no actor crashed");
}

#[actix_rt::test]
async fn a_watch_stream_that_panics_keeps_serving_and_every_directory_recovers() {
    let fx = Fixture::start();
    let dirs = two_apps(&fx).await;
    let watches = fx.registry.watch_calls();
    for app in [APP, "other"] {
        fx.registry.panic_watch_streams(app);
    }
    settle().await;
    for dir in &dirs {
        let v = dir.view().await.unwrap();
        assert!(stale(&v), "served, marked stale: {:?}", v.status);
        assert_eq!(v.endpoints.len(), 1, "a panic never empties a directory");
    }
    assert_eq!(fx.engine.stats().registry_panics, 2);
    for dir in &dirs {
        wait_for(dir, "fresh after the panic", ONE_STEP, |v| {
            v.status.is_ready() && !stale(v)
        })
        .await;
    }
    assert_eq!(fx.registry.watch_calls(), watches + 2, "re-established");
    assert_eq!(fx.engine.stats().restarts, 0, "contained: no actor crashed");
    assert_eq!(fx.engine.stats().watches_active, 2);
    // And the new watches carry changes again.
    let m = metadata(APP, 20000, "t1");
    fx.registry.put(instance(&m, 8009));
    wait_for(&dirs[0], "new instance", Duration::from_millis(50), |v| {
        v.endpoints.len() == 2
    })
    .await;
}

#[actix_rt::test]
async fn a_list_that_panics_is_contained_and_the_resync_retried() {
    let fx = Fixture::start_with(|b| b.reconcile_interval(Duration::from_secs(10)));
    let (_m1, m2, dir) = fx.ready_on_r1().await;
    fx.registry.panic_next_lists(1);
    fx.registry
        .set_instances_silently(APP, vec![instance(&m2, 8002)]);
    advance(Duration::from_secs(12)).await;
    assert_eq!(
        fx.engine.stats().registry_panics,
        1,
        "the resync's list panicked"
    );
    // The failed resync is retried after one backoff step.
    wait_for(&dir, "corrected after the retry", ONE_STEP, |v| {
        ports(v) == vec![20001]
    })
    .await;
    // One per instance that differed: 8001 removed, 8002 added.
    assert_eq!(fx.engine.stats().missed_notifications, 2);
}

#[actix_rt::test]
async fn an_unhealthy_watch_is_marked_stale_and_kept_until_it_heals() {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    let (watches, lists) = (fx.registry.watch_calls(), fx.registry.list_calls());
    fx.registry.report_watch_errors(APP);
    settle().await;
    let v = dir.view().await.unwrap();
    assert!(stale(&v), "{:?}", v.status);
    assert!(v.status.to_string().contains("registry unreachable"));
    // Kept while it may heal: at least the backoff cap (30 s).
    advance(Duration::from_secs(25)).await;
    assert_eq!(fx.registry.watch_calls(), watches, "the stream is kept");
    assert_eq!(fx.registry.watcher_count(APP), 1);
    assert!(
        stale(&dir.view().await.unwrap()),
        "still stale while silent"
    );

    // The stream heals with its next item; the resume re-reads the app.
    fx.registry.put(instance(&m1, 8002));
    let v = wait_for(&dir, "healed", Duration::from_millis(50), |v| !stale(v)).await;
    assert_eq!(v.endpoints.len(), 2);
    assert_eq!(fx.registry.watch_calls(), watches, "no re-subscribe");
    assert_eq!(fx.registry.list_calls(), lists + 1, "one resync on resume");
}

#[actix_rt::test]
async fn an_unhealthy_watch_that_goes_silent_is_re_opened_after_the_backoff_cap() {
    let fx = Fixture::start();
    let (m1, _m2, dir) = fx.ready_on_r1().await;
    let watches = fx.registry.watch_calls();
    fx.registry.report_watch_errors(APP);
    settle().await;
    assert!(stale(&dir.view().await.unwrap()));
    // The registry changes, but the unhealthy stream never says so again.
    fx.registry
        .set_instances_silently(APP, vec![instance(&m1, 8001), instance(&m1, 8002)]);
    advance(Duration::from_secs(29)).await;
    assert_eq!(fx.registry.watch_calls(), watches, "kept while it may heal");
    assert!(stale(&dir.view().await.unwrap()), "silent: still stale");
    let t = tokio::time::Instant::now();
    let v = wait_for(&dir, "re-opened and fresh", Duration::from_secs(2), |v| {
        !stale(v) && v.endpoints.len() == 2
    })
    .await;
    eprintln!(
        "silent unhealthy watch re-opened {:?} after the first Err item",
        Duration::from_secs(29) + t.elapsed()
    );
    assert_eq!(fx.registry.watch_calls(), watches + 1, "one re-open");
    assert_eq!(fx.registry.watcher_count(APP), 1, "the old stream dropped");
    assert_eq!(common::instance_ids(&v).len(), 2);
}

#[actix_rt::test]
async fn a_lost_notification_is_corrected_within_one_resync() {
    let fx = Fixture::start();
    let (_m1, m2, dir) = fx.ready_on_r1().await;
    let lists = fx.registry.list_calls();
    // The provider moves to another instance and the watch never hears.
    fx.registry
        .set_instances_silently(APP, vec![instance(&m2, 8002)]);
    advance(Duration::from_secs(230)).await;
    assert_eq!(
        ports(&dir.view().await.unwrap()),
        vec![20000],
        "the watch missed it"
    );
    assert_eq!(fx.engine.stats().missed_notifications, 0);
    // reconcile_interval 5 min, jittered to 4-6 min.
    let v = wait_for(&dir, "corrected", Duration::from_secs(140), |v| {
        ports(v) == vec![20001]
    })
    .await;
    assert_eq!(common::instance_ids(&v), vec!["127.0.0.1:8002".to_string()]);
    assert_eq!(
        fx.engine.stats().missed_notifications,
        2,
        "counted per instance that differed: 8001 removed, 8002 added"
    );
    assert_eq!(fx.registry.list_calls(), lists + 1, "one resync");
    assert_eq!(fx.engine.stats().resyncs_scheduled, 1, "the next one armed");
    // A resync that finds nothing new changes nothing.
    advance(Duration::from_secs(400)).await;
    assert_eq!(fx.engine.stats().missed_notifications, 2);
    fx.engine.shutdown().await;
    settle().await;
    assert_eq!(
        fx.engine.stats().resyncs_scheduled,
        0,
        "no resync after shutdown"
    );
    assert_eq!(fx.engine.stats().timers_pending, 0);
}

#[actix_rt::test]
async fn after_a_long_outage_the_watch_resumes_promptly_once_the_registry_answers() {
    let fx = Fixture::start();
    let (_m1, m2, dir) = fx.ready_on_r1().await;
    // Down for 45 s: every watch and every probe fails meanwhile.
    fx.registry.fail_next_watches(usize::MAX);
    fx.registry.fail_next_lists(usize::MAX);
    fx.registry.error_watches(APP);
    fx.registry.set_instances(APP, vec![instance(&m2, 8002)]);
    advance(Duration::from_secs(45)).await;
    assert!(stale(&dir.view().await.unwrap()));
    let (watches, lists) = (fx.registry.watch_calls(), fx.registry.list_calls());
    assert!(watches <= 8, "re-subscribes back off: {watches}");
    assert!(lists <= 46, "at most one cheap probe a second: {lists}");
    // The registry answers again; the backoff had grown to 30 s.
    fx.registry.fail_next_watches(0);
    fx.registry.fail_next_lists(0);
    let t = tokio::time::Instant::now();
    wait_for(&dir, "resumed", Duration::from_secs(2), |v| {
        !stale(v) && ports(v) == vec![20001]
    })
    .await;
    let took = t.elapsed();
    eprintln!(
        "resumed {took:?} after a 45 s outage ended ({watches} opens, {lists} probes while down)"
    );
    assert!(took <= Duration::from_millis(1300), "{took:?}");
}

/// The embedded registry, saying that its watches re-read in full on every
/// resume by themselves (as `EtcdRegistry` does).
#[derive(Clone)]
struct Rereads(MemoryRegistry);

impl Registry for Rereads {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        self.0.list(app)
    }
    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.0.watch(app)
    }
    fn register(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.0.register(i)
    }
    fn unregister(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.0.unregister(i)
    }
    fn rereads_on_resume(&self) -> bool {
        true
    }
}

#[actix_rt::test]
async fn a_backend_that_rereads_on_resume_gets_no_second_full_read() {
    let reg = MemoryRegistry::new();
    let r = reg.clone();
    let fx = Fixture::start_with(move |b| b.registry(Rereads(r)));
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    reg.put(instance(&m, 8001));
    wait_for(&dir, "ready", Duration::from_millis(50), |v| {
        v.status.is_ready()
    })
    .await;
    let lists = reg.list_calls();
    // An unhealthy stream that heals, then a stream that ends and is re-opened.
    reg.report_watch_errors(APP);
    settle().await;
    assert!(stale(&dir.view().await.unwrap()));
    reg.put(instance(&m, 8002));
    wait_for(&dir, "healed", Duration::from_millis(50), |v| {
        !stale(v) && v.endpoints.len() == 2
    })
    .await;
    reg.end_watches(APP);
    settle().await;
    assert!(stale(&dir.view().await.unwrap()));
    wait_for(&dir, "re-opened", ONE_STEP, |v| !stale(v)).await;
    settle().await;
    assert_eq!(
        reg.list_calls(),
        lists,
        "no resume resync after either outage"
    );
    // The periodic resync stays (5 min, jittered to 4-6 min).
    advance(Duration::from_secs(370)).await;
    assert_eq!(reg.list_calls(), lists + 1, "one periodic resync");
}
