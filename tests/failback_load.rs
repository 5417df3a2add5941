//! Failback load through the engine, in virtual time: how registry calls
//! are spread when many keys fail or a session is lost, what a persistent
//! outage costs per key, and that one slow call never delays another. The
//! measured loads are printed (`--nocapture`) for the docs.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::future::BoxFuture;
use steadfast::{EventStream, Listing, MemoryRegistry, Registry, RegistryError, ServiceInstance};
use steadfast_core::{RegistrationState, SessionStream};
use tokio::time::Instant;

fn provider(port: u16) -> ServiceInstance {
    ServiceInstance::new(APP, "127.0.0.1", port)
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
    let calls: Vec<Instant> = reg.calls.lock().unwrap().iter().skip(n0).copied().collect();
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
        &reg.watches
            .lock()
            .unwrap()
            .iter()
            .skip(300)
            .copied()
            .collect::<Vec<_>>(),
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
