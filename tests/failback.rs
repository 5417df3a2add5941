//! Failback registration and subscription through the engine, in virtual
//! time: the registrar retries failed registers / unregisters (one pending
//! operation per key, latest intent wins), a failing subscribe is retried
//! with one pending retry per app and shows as `Pending` with its last
//! error, unsubscribe and shutdown stop every retry, and a registry session
//! loss restores every registration and subscription, spread with jitter.
//! The measured loads are printed (`--nocapture`) for the docs.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::future::BoxFuture;
use steadfast::core::{RegistrationState, SessionStream};
use steadfast::{
    DirectoryStatus, EmptyReason, EventStream, Listing, MemoryRegistry, Registry, RegistryError,
    ServiceInstance,
};
use tokio::time::Instant;

fn provider(port: u16) -> ServiceInstance {
    ServiceInstance::new(APP, "127.0.0.1", port)
}

#[actix_rt::test]
async fn register_fails_twice_then_lands_once_without_a_duplicate() {
    let fx = Fixture::start();
    fx.registry.fail_next_registers(2);
    fx.engine.register(provider(7001)).await.unwrap();
    settle().await;
    let regs = fx.engine.registrations().await.unwrap();
    assert!(
        matches!(
            regs[0].1,
            RegistrationState::Pending {
                registering: true,
                attempts: 1,
                last_error: Some(_)
            }
        ),
        "{regs:?}"
    );
    // 1 s, then 2 s (+0-25 %) later the third register lands.
    advance(Duration::from_secs(4)).await;
    assert_eq!(fx.registry.register_calls(), 3);
    assert_eq!(fx.registry.instances(APP).len(), 1);
    let regs = fx.engine.registrations().await.unwrap();
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].1, RegistrationState::Registered);
    let s = fx.engine.stats();
    assert_eq!((s.register_failures, s.registrar_retries), (2, 2));
    // Settled: nothing more is sent, and the same intent again costs no call.
    fx.engine.register(provider(7001)).await.unwrap();
    advance(Duration::from_secs(120)).await;
    assert_eq!(fx.registry.register_calls(), 3, "no duplicate register");
    assert_eq!(fx.engine.stats().timers_pending, 0);
}

#[actix_rt::test]
async fn an_unregister_during_a_pending_register_retry_ends_unregistered() {
    let fx = Fixture::start();
    fx.registry.set_down(true);
    fx.engine.register(provider(7002)).await.unwrap();
    advance(Duration::from_millis(500)).await;
    assert_eq!(fx.registry.register_calls(), 1, "the retry waits (1 s)");
    fx.engine.unregister(provider(7002)).await.unwrap();
    settle().await;
    assert_eq!(fx.registry.unregister_calls(), 1, "issued at once");
    fx.registry.set_down(false);
    advance(Duration::from_secs(10)).await;
    assert!(fx.registry.instances(APP).is_empty());
    assert_eq!(
        fx.registry.register_calls(),
        1,
        "the pending register was cancelled"
    );
    assert_eq!(
        fx.registry.unregister_calls(),
        2,
        "failed once, then landed"
    );
    assert!(
        fx.engine.registrations().await.unwrap().is_empty(),
        "forgotten"
    );
    advance(Duration::from_secs(120)).await;
    assert_eq!(
        (fx.registry.register_calls(), fx.registry.unregister_calls()),
        (1, 2)
    );
}

#[actix_rt::test]
async fn a_failing_subscribe_says_pending_retries_and_delivers_what_was_added_meanwhile() {
    let fx = Fixture::start();
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.registry.set_down(true);
    let dir = fx.subscribe().await;
    advance(Duration::from_millis(1500)).await;
    let v = dir.view().await.unwrap();
    let DirectoryStatus::Empty(EmptyReason::Pending(p)) = &v.status else {
        panic!("expected pending, got {:?}", v.status);
    };
    let f = p
        .subscribe
        .as_ref()
        .expect("the subscribe failure is named");
    assert!(f.attempts >= 1, "{f}");
    assert!(matches!(f.last_error, RegistryError::Unavailable(_)), "{f}");
    assert!(
        v.status.to_string().contains("subscribe failing"),
        "{}",
        v.status
    );
    // A second reference on the same app while the open fails: no extra
    // watch call.
    let watches = fx.registry.watch_calls();
    let other = steadfast::Reference::new("demo.Other", "tri", [APP]);
    let _dir2 = fx.engine.subscribe(other).await.unwrap();
    settle().await;
    assert_eq!(
        fx.registry.watch_calls(),
        watches,
        "one pending retry per app"
    );
    // Added while the registry refused the watch.
    fx.registry.put(instance(&m1, 8001));
    advance(Duration::from_secs(20)).await;
    let before = fx.registry.watch_calls();
    eprintln!(
        "subscribe outage: {before} watch calls and {} probe lists in 21.5 s for one app",
        fx.registry.list_calls()
    );
    fx.registry.set_down(false);
    let v = wait_for(&dir, "ready after recovery", Duration::from_secs(3), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(v.endpoints.len(), 1, "the instance added while down");
    advance(Duration::from_secs(60)).await;
    assert_eq!(
        fx.registry.watch_calls(),
        before + 1,
        "exactly one successful watch call after recovery, none duplicated"
    );
}

#[actix_rt::test]
async fn unsubscribe_and_shutdown_stop_every_retry() {
    let fx = Fixture::start();
    fx.registry.set_down(true);
    let _dir = fx.subscribe().await;
    fx.engine.register(provider(7003)).await.unwrap();
    advance(Duration::from_secs(3)).await;
    assert!(fx.registry.watch_calls() >= 2);
    assert!(fx.engine.unsubscribe(&reference()).await.unwrap());
    settle().await;
    let (w, l) = (fx.registry.watch_calls(), fx.registry.list_calls());
    advance(Duration::from_secs(120)).await;
    assert_eq!(
        (fx.registry.watch_calls(), fx.registry.list_calls()),
        (w, l),
        "no watch retry or probe after the last unsubscribe"
    );
    // The registrar still retries the register until shutdown.
    assert!(fx.registry.register_calls() >= 4);
    fx.engine.shutdown().await;
    settle().await;
    let r = fx.registry.register_calls();
    advance(Duration::from_secs(120)).await;
    assert_eq!(fx.registry.register_calls(), r, "no retry after shutdown");
    let s = fx.engine.stats();
    assert_eq!((s.timers_pending, s.actors_alive), (0, 0), "{s:?}");
}

#[actix_rt::test]
async fn a_failed_unregister_at_a_graceful_stop_is_retried_afterwards() {
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| b.metadata_publisher(f.clone()));
    let export = fx.engine.export(export_spec(9801)).await.unwrap();
    settle().await;
    assert!(export.is_registered().await.unwrap());
    fx.registry.set_down(true);
    let report = export.shutdown(Duration::ZERO).await.unwrap();
    assert!(!report.unregistered, "bounded wait, registry down");
    assert_eq!(fx.registry.instances(APP).len(), 1);
    fx.registry.set_down(false);
    advance(Duration::from_secs(40)).await;
    assert!(
        fx.registry.instances(APP).is_empty(),
        "the registrar unregistered it once the registry answered"
    );
    assert!(fx.engine.stats().unregister_failures >= 1);
}

#[actix_rt::test]
async fn after_a_session_loss_every_registration_and_subscription_is_restored() {
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| b.metadata_publisher(f.clone()));
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    let dir = fx.subscribe().await;
    let export = fx.engine.export(export_spec(9901)).await.unwrap();
    for port in 7100..7120 {
        fx.engine
            .register(instance(&m1, port))
            .await
            .expect("registered");
    }
    let v = wait_for(&dir, "all 21 served", Duration::from_secs(2), |v| {
        v.endpoints.len() == 21
    })
    .await;
    assert_eq!(v.endpoints.len(), 21);
    assert_eq!(fx.registry.register_calls(), 21);
    // Another client's record, put while this client's watch is gone,
    // reaches the directory only through the full re-read.
    assert_eq!(fx.registry.lose_session(), 21);
    fx.registry.put(instance(&m1, 8500));
    assert_eq!(fx.registry.instances(APP).len(), 1);
    advance(Duration::from_secs(6)).await;
    assert_eq!(fx.registry.instances(APP).len(), 22, "all re-registered");
    assert_eq!(
        fx.registry.register_calls(),
        42,
        "once each, no burst of retries"
    );
    assert_eq!(fx.registry.watcher_count(APP), 1, "the watch is back");
    // 21 restored plus the one only the full re-read can bring.
    wait_for(&dir, "22 served", Duration::from_secs(5), |v| {
        v.endpoints.len() == 22 && v.status.is_ready()
    })
    .await;
    assert!(export.is_registered().await.unwrap());
    assert_eq!(fx.engine.stats().session_losses, 1);
}

/// The embedded registry, recording when each register call was made.
#[derive(Clone)]
struct Recording {
    inner: MemoryRegistry,
    calls: Arc<Mutex<Vec<Instant>>>,
    /// When each watch call was made.
    watches: Arc<Mutex<Vec<Instant>>>,
}

impl Registry for Recording {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        self.inner.list(app)
    }
    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.watches.lock().unwrap().push(Instant::now());
        self.inner.watch(app)
    }
    fn register(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.calls.lock().unwrap().push(Instant::now());
        self.inner.register(i)
    }
    fn unregister(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.inner.unregister(i)
    }
    fn sessions(&self) -> Option<SessionStream> {
        self.inner.sessions()
    }
}

/// Call times (ms after `t0`) between `from` and `to`.
fn window(calls: &[Instant], t0: Instant, from: Duration, to: Duration) -> Vec<u128> {
    calls
        .iter()
        .map(|t| t.duration_since(t0))
        .filter(|d| *d >= from && *d < to)
        .map(|d| d.as_millis())
        .collect()
}

/// Most calls in any `bucket_ms` bucket.
fn peak(ms: &[u128], bucket_ms: u128) -> usize {
    let mut counts = std::collections::BTreeMap::new();
    for m in ms {
        *counts.entry(m / bucket_ms).or_insert(0usize) += 1;
    }
    counts.values().copied().max().unwrap_or(0)
}

fn recording_engine() -> (steadfast::Engine, Recording) {
    tokio::time::pause();
    let reg = Recording {
        inner: MemoryRegistry::new(),
        calls: Arc::default(),
        watches: Arc::default(),
    };
    let engine = steadfast::Engine::builder()
        .registry(reg.clone())
        .fetcher(steadfast_testkit::ScriptedFetcher::new())
        .seed(7)
        .start()
        .unwrap();
    (engine, reg)
}

#[actix_rt::test]
async fn a_thousand_keys_failing_at_once_retry_spread_over_the_jitter_window() {
    let (engine, reg) = recording_engine();
    reg.inner.set_down(true);
    let t0 = Instant::now();
    for port in 0..1000u16 {
        engine.register(provider(10_000 + port)).await.unwrap();
    }
    settle().await;
    advance(Duration::from_millis(1400)).await;
    let calls = reg.calls.lock().unwrap().clone();
    let first = window(&calls, t0, Duration::ZERO, Duration::from_millis(100));
    assert_eq!(first.len(), 1000, "every key tried once at once");
    let retries = window(
        &calls,
        t0,
        Duration::from_millis(100),
        Duration::from_secs(2),
    );
    assert_eq!(retries.len(), 1000, "one retry per key, never two");
    let (lo, hi) = (retries.iter().min().unwrap(), retries.iter().max().unwrap());
    let peak10 = peak(&retries, 10);
    eprintln!(
        "registrar: 1000 keys failing at once -> first retries from {lo} ms to {hi} ms \
         (spread {} ms), at most {peak10} calls in any 10 ms",
        hi - lo
    );
    assert!(*lo >= 1000 && *hi <= 1260, "1 s +0-25 %: {lo}..{hi}");
    assert!(hi - lo >= 200, "spread over the jitter window: {lo}..{hi}");
    assert!(peak10 <= 100, "not one burst: {peak10} in 10 ms");
    engine.shutdown().await;
}

#[actix_rt::test]
async fn a_session_loss_of_a_thousand_keys_reregisters_spread_over_the_window() {
    let (engine, reg) = recording_engine();
    for port in 0..1000u16 {
        engine.register(provider(10_000 + port)).await.unwrap();
    }
    settle().await;
    assert_eq!(reg.inner.instances(APP).len(), 1000);
    let t0 = Instant::now();
    let n0 = reg.calls.lock().unwrap().len();
    reg.inner.lose_session();
    advance(Duration::from_secs(6)).await;
    let calls = reg.calls.lock().unwrap()[n0..].to_vec();
    let again = window(&calls, t0, Duration::ZERO, Duration::from_secs(6));
    assert_eq!(again.len(), 1000, "each key once");
    assert_eq!(reg.inner.instances(APP).len(), 1000, "all restored");
    let per_second: Vec<usize> = (0..5)
        .map(|s| again.iter().filter(|m| **m / 1000 == s).count())
        .collect();
    let peak10 = peak(&again, 10);
    eprintln!(
        "session loss: 1000 re-registrations per second of the 5 s window {per_second:?}, \
         at most {peak10} in any 10 ms"
    );
    assert!(
        per_second.iter().all(|n| (150..=250).contains(n)),
        "{per_second:?}"
    );
    assert!(peak10 <= 15, "{peak10}");
    engine.shutdown().await;
}

#[actix_rt::test]
async fn under_a_persistent_outage_each_key_costs_about_two_calls_a_minute() {
    let (engine, reg) = recording_engine();
    reg.inner.set_down(true);
    for port in 0..10u16 {
        engine.register(provider(10_000 + port)).await.unwrap();
    }
    let t0 = Instant::now();
    // Coarse steps: every retry is at least 1 s after the previous one.
    for _ in 0..2400 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
    }
    let calls = reg.calls.lock().unwrap().clone();
    let steady = window(
        &calls,
        t0,
        Duration::from_secs(120),
        Duration::from_secs(600),
    );
    let per_key_min = steady.len() as f64 / 10.0 / 8.0;
    eprintln!(
        "registrar outage: {} register calls for 10 keys in 10 min; steady state \
         {per_key_min:.2} calls per key per minute",
        calls.len()
    );
    assert!((1.5..=2.1).contains(&per_key_min), "{per_key_min}");
    engine.shutdown().await;
}

/// The embedded registry, except that registering the instance on port
/// 7777 hangs (a slow registry call for one key).
#[derive(Clone)]
struct OneSlow(MemoryRegistry);

impl Registry for OneSlow {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        self.0.list(app)
    }
    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.0.watch(app)
    }
    fn register(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        if i.port == 7777 {
            return Box::pin(futures::future::pending());
        }
        self.0.register(i)
    }
    fn unregister(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.0.unregister(i)
    }
}

#[actix_rt::test]
async fn one_slow_registry_call_never_delays_the_others_and_concurrent_intents_cost_one_call() {
    tokio::time::pause();
    let reg = OneSlow(MemoryRegistry::new());
    let engine = steadfast::Engine::builder()
        .registry(reg.clone())
        .fetcher(steadfast_testkit::ScriptedFetcher::new())
        .seed(7)
        .start()
        .unwrap();
    engine.register(provider(7777)).await.unwrap();
    for port in 7001..7011 {
        engine.register(provider(port)).await.unwrap();
        // The same intent again while its call is in flight: no second call.
        engine.register(provider(port)).await.unwrap();
    }
    settle().await;
    assert_eq!(reg.0.instances(APP).len(), 10, "the others landed at once");
    assert_eq!(reg.0.register_calls(), 10, "one call per key");
    let regs = engine.registrations().await.unwrap();
    let slow = regs.iter().find(|(k, _)| k.id.ends_with(":7777")).unwrap();
    assert!(
        matches!(slow.1, RegistrationState::Pending { attempts: 0, .. }),
        "{slow:?}"
    );
    // The hung call times out at the 5 s deadline and is retried.
    advance(Duration::from_secs(6)).await;
    let regs = engine.registrations().await.unwrap();
    let slow = regs.iter().find(|(k, _)| k.id.ends_with(":7777")).unwrap();
    assert!(
        matches!(
            slow.1,
            RegistrationState::Pending {
                attempts: 1,
                last_error: Some(RegistryError::Timeout),
                ..
            }
        ),
        "{slow:?}"
    );
    engine.shutdown().await;
}

#[actix_rt::test]
async fn shutdown_unregisters_what_engine_register_registered() {
    let fx = Fixture::start();
    fx.engine.register(provider(7101)).await.unwrap();
    fx.engine.register(provider(7102)).await.unwrap();
    settle().await;
    assert_eq!(fx.registry.instances(APP).len(), 2);
    // The first unregister fails: it is retried within the shutdown's
    // bound (1 s later), and both records are gone when shutdown returns.
    fx.registry.fail_next_registers(1);
    let t0 = Instant::now();
    fx.engine.shutdown().await;
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(fx.registry.unregister_calls(), 3, "one per key, one retry");
    assert!(fx.registry.instances(APP).is_empty(), "both unregistered");
    let calls = (fx.registry.register_calls(), fx.registry.unregister_calls());
    advance(Duration::from_secs(120)).await;
    assert_eq!(
        (fx.registry.register_calls(), fx.registry.unregister_calls()),
        calls,
        "nothing after shutdown"
    );
}

#[actix_rt::test]
async fn a_session_loss_reopens_every_watch_spread_over_the_window_each_with_a_full_read() {
    let (engine, reg) = recording_engine();
    let apps: Vec<String> = (0..300).map(|i| format!("app-{i}")).collect();
    let mut dirs = Vec::new();
    for app in &apps {
        let r = steadfast::Reference::new("demo.Greeter", "tri", [app.clone()]);
        dirs.push(engine.subscribe(r).await.unwrap());
    }
    settle().await;
    assert_eq!(reg.watches.lock().unwrap().len(), 300, "one watch per app");
    let t0 = Instant::now();
    reg.inner.lose_session();
    // Put while the session is gone: only a full re-read brings it.
    reg.inner
        .put(ServiceInstance::new("app-7", "127.0.0.1", 9007));
    advance(Duration::from_secs(6)).await;
    let opens = window(
        &reg.watches.lock().unwrap()[300..],
        t0,
        Duration::ZERO,
        Duration::from_secs(6),
    );
    assert_eq!(opens.len(), 300, "each watch re-opened once");
    let per_second: Vec<usize> = (0..5)
        .map(|s| opens.iter().filter(|m| **m / 1000 == s).count())
        .collect();
    let peak10 = peak(&opens, 10);
    eprintln!(
        "session loss: 300 watches re-opened per second of the 5 s window {per_second:?}, \
         at most {peak10} in any 10 ms"
    );
    assert!(
        per_second.iter().all(|n| (30..=90).contains(n)),
        "{per_second:?}"
    );
    assert!(peak10 <= 8, "{peak10}");
    for app in &apps {
        assert_eq!(reg.inner.watcher_count(app), 1, "{app} watched again, once");
    }
    assert_eq!(
        engine.instances("app-7").await.unwrap().instances.len(),
        1,
        "the full re-read brought what changed while the session was gone"
    );
    drop(dirs);
    engine.shutdown().await;
}
