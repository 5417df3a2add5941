//! A registry that stops answering or panics can never hold a graceful stop or
//! `Engine::shutdown` for ever: every registry call of a stop has its own
//! deadline, and the whole shutdown has one.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::future::{BoxFuture, FutureExt};
use steadfast::{
    Engine, EventStream, Listing, MemoryRegistry, Registry, RegistryError, ServiceInstance,
};
use tokio::time::Instant;

/// The embedded registry, except that once `hang` is set its register and
/// unregister calls never answer (a frozen registry).
#[derive(Clone)]
struct Freezable {
    inner: MemoryRegistry,
    hang: Arc<AtomicBool>,
}

impl Registry for Freezable {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        self.inner.list(app)
    }
    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.inner.watch(app)
    }
    fn register(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        if self.hang.load(Ordering::SeqCst) {
            return futures::future::pending().boxed();
        }
        self.inner.register(i)
    }
    fn unregister(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        if self.hang.load(Ordering::SeqCst) {
            return futures::future::pending().boxed();
        }
        self.inner.unregister(i)
    }
}

async fn registered_engine(
    reg: &Freezable,
    ports: &[u16],
    call_timeout: Duration,
) -> (Engine, Vec<steadfast::ExportHandle>) {
    let engine = Engine::builder()
        .registry(reg.clone())
        .fetcher(steadfast_testkit::ScriptedFetcher::new())
        .registry_call_timeout(call_timeout)
        .shutdown_timeout(Duration::from_secs(5))
        .seed(7)
        .start()
        .unwrap();
    let mut exports = Vec::new();
    for p in ports {
        exports.push(engine.export(export_spec(*p)).await.unwrap());
    }
    settle().await;
    for e in &exports {
        assert!(e.is_registered().await.unwrap());
    }
    (engine, exports)
}

#[actix_rt::test]
async fn a_graceful_stop_on_a_frozen_registry_ends_within_its_deadlines() {
    tokio::time::pause();
    let reg = Freezable {
        inner: MemoryRegistry::new(),
        hang: Arc::default(),
    };
    let (engine, exports) = registered_engine(&reg, &[9501], Duration::from_secs(2)).await;
    reg.hang.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    let report = exports[0].shutdown(Duration::ZERO).await.unwrap();
    let took = t0.elapsed();
    assert!(!report.unregistered, "the unregister timed out and says so");
    assert!(
        took >= Duration::from_secs(4) && took <= Duration::from_secs(5),
        "closing announcement + unregister, 2 s each: {took:?}"
    );
    engine.shutdown().await;
}

#[actix_rt::test]
async fn engine_shutdown_on_a_frozen_registry_is_bounded() {
    tokio::time::pause();
    let reg = Freezable {
        inner: MemoryRegistry::new(),
        hang: Arc::default(),
    };
    // Each stop alone would take 2 x 10 s; the whole shutdown has 5 s.
    let (engine, _exports) =
        registered_engine(&reg, &[9601, 9602, 9603], Duration::from_secs(10)).await;
    reg.hang.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    engine.shutdown().await;
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_millis(5_100),
        "bounded by shutdown_timeout: {took:?}"
    );
    settle().await;
    assert_eq!(engine.stats().actors_alive, 0, "everything stopped anyway");
    assert!(engine.subscribe(reference()).await.is_err());
}

/// The embedded registry, except that its first `panics` register calls
/// panic (user code gone wrong) — half of them while making the future, half
/// while it is polled.
#[derive(Clone)]
struct Panicky {
    inner: MemoryRegistry,
    panics: Arc<std::sync::atomic::AtomicUsize>,
}

impl Registry for Panicky {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        self.inner.list(app)
    }
    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.inner.watch(app)
    }
    fn register(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        let left = self.panics.load(Ordering::SeqCst);
        if left > 0 {
            self.panics.store(left - 1, Ordering::SeqCst);
            if left.is_multiple_of(2) {
                panic!("register panicked while called");
            }
            return async { panic!("register panicked while polled") }.boxed();
        }
        self.inner.register(i)
    }
    fn unregister(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.inner.unregister(i)
    }
}

#[actix_rt::test]
async fn a_registry_that_panics_on_register_is_contained_and_the_export_lands() {
    tokio::time::pause();
    let reg = Panicky {
        inner: MemoryRegistry::new(),
        panics: Arc::new(2.into()),
    };
    let engine = Engine::builder()
        .registry(reg.clone())
        .fetcher(steadfast_testkit::ScriptedFetcher::new())
        .seed(7)
        .start()
        .unwrap();
    let export = engine.export(export_spec(9701)).await.unwrap();
    settle().await;
    assert!(
        !export.is_registered().await.unwrap(),
        "both panics contained"
    );
    assert_eq!(engine.stats().register_failures, 1);
    // 1 s, then 2 s (+jitter) later the third attempt lands.
    let t0 = Instant::now();
    while !export.is_registered().await.unwrap() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the export never landed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(engine.stats().register_failures, 2);
    assert_eq!(reg.inner.instances(APP).len(), 1);
    assert_eq!(engine.stats().handler_panics, 0, "contained at the call");
    engine.shutdown().await;
}
