//! Failback registration and subscription through the engine, in virtual
//! time: the registrar retries failed registers / unregisters (one pending
//! operation per key, latest intent wins), a failing subscribe is retried
//! with one pending retry per app and shows as `Pending` with its last
//! error, unsubscribe and shutdown stop every retry, and a registry session
//! loss restores every registration and subscription, spread with jitter.
//! Registrations waiting out a long outage are made within 2 s of the
//! registry answering again (the registrar's probe). The load figures are
//! in `failback_load.rs`.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::future::BoxFuture;
use steadfast::{
    DirectoryStatus, EmptyReason, EventStream, Listing, MemoryRegistry, Registry, RegistryError,
    ServiceInstance,
};
use steadfast_core::{RegistrationState, SessionStream};
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

/// The embedded registry, counting `list` calls per app (the subscription
/// probes with a `list` of a watched app, the registrar with one of a
/// pending registration's app).
#[derive(Clone, Default)]
struct ListsPerApp {
    inner: MemoryRegistry,
    lists: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl ListsPerApp {
    fn lists(&self, app: &str) -> usize {
        self.lists.lock().unwrap().get(app).copied().unwrap_or(0)
    }
}

impl Registry for ListsPerApp {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        *self
            .lists
            .lock()
            .unwrap()
            .entry(app.to_string())
            .or_default() += 1;
        self.inner.list(app)
    }
    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.inner.watch(app)
    }
    fn register(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.inner.register(i)
    }
    fn unregister(&self, i: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.inner.unregister(i)
    }
    fn sessions(&self) -> Option<SessionStream> {
        self.inner.sessions()
    }
}

#[actix_rt::test]
async fn unsubscribe_and_shutdown_stop_every_retry() {
    tokio::time::pause();
    let reg = ListsPerApp::default();
    let engine = steadfast::Engine::builder()
        .registry(reg.clone())
        .fetcher(steadfast_testkit::ScriptedFetcher::new())
        .seed(7)
        .start()
        .unwrap();
    reg.inner.set_down(true);
    let _dir = engine.subscribe(reference()).await.unwrap();
    // A registration of another app: the registrar probes for it (a `list`
    // of its app) until it lands or the engine stops.
    const OTHER: &str = "registrar-only";
    engine
        .register(ServiceInstance::new(OTHER, "127.0.0.1", 7003))
        .await
        .unwrap();
    advance(Duration::from_secs(3)).await;
    assert!(reg.inner.watch_calls() >= 2);
    assert!(engine.unsubscribe(&reference()).await.unwrap());
    settle().await;
    let (w, l, p) = (reg.inner.watch_calls(), reg.lists(APP), reg.lists(OTHER));
    advance(Duration::from_secs(120)).await;
    assert_eq!(
        (reg.inner.watch_calls(), reg.lists(APP)),
        (w, l),
        "no watch retry or probe of the app after the last unsubscribe"
    );
    // The registrar still retries the register until shutdown, and probes
    // for it about once a second (1 s + 0-25 %).
    assert!(reg.inner.register_calls() >= 4);
    let probes = reg.lists(OTHER) - p;
    assert!((90..=120).contains(&probes), "{probes} probes in 120 s");
    engine.shutdown().await;
    settle().await;
    let (r, p) = (reg.inner.register_calls(), reg.lists(OTHER));
    advance(Duration::from_secs(120)).await;
    assert_eq!(
        (reg.inner.register_calls(), reg.lists(OTHER)),
        (r, p),
        "no retry or probe after shutdown"
    );
    let s = engine.stats();
    assert_eq!((s.timers_pending, s.actors_alive), (0, 0), "{s:?}");
}

#[actix_rt::test]
async fn registrations_made_during_a_ten_minute_outage_land_within_two_seconds_of_its_end() {
    let fx = Fixture::start();
    fx.registry.set_down(true);
    // Registered at the start, in the middle and near the end of the
    // outage: their backoffs grew to the cap (30 s +0-25 %).
    fx.engine.register(provider(7201)).await.unwrap();
    advance(Duration::from_secs(300)).await;
    fx.engine.register(provider(7202)).await.unwrap();
    advance(Duration::from_secs(200)).await;
    fx.engine.register(provider(7203)).await.unwrap();
    advance(Duration::from_secs(100)).await;
    assert!(fx.registry.instances(APP).is_empty());
    // Nothing subscribed: every `list` is the registrar's probe.
    let (probes, writes) = (fx.registry.list_calls(), fx.registry.register_calls());
    fx.registry.set_down(false);
    let back = Instant::now();
    while fx.registry.instances(APP).len() < 3 {
        assert!(
            back.elapsed() <= Duration::from_secs(2),
            "{} of 3 registered 2 s after the registry answered: {:?}",
            fx.registry.instances(APP).len(),
            fx.engine.registrations().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let landed = back.elapsed();
    eprintln!(
        "registrar, 10 min outage: 3 registrations made meanwhile in the registry {:.2} s \
         after it answered again; {probes} probes and {writes} register calls during the outage",
        landed.as_secs_f64()
    );
    // About one probe per second during the outage, never more; the
    // registers themselves stayed on their backoff.
    assert!((400..=600).contains(&probes), "{probes} probes in 600 s");
    assert!(writes <= 3 * 25, "{writes} register calls");
    settle().await;
    let regs = fx.engine.registrations().await.unwrap();
    assert!(
        regs.iter()
            .all(|(_, s)| *s == RegistrationState::Registered),
        "{regs:?}"
    );
    // Nothing pending: no more probes.
    let lists = fx.registry.list_calls();
    advance(Duration::from_secs(60)).await;
    assert_eq!(fx.registry.list_calls(), lists, "no probe once all landed");
    assert_eq!(fx.registry.register_calls(), writes + 3, "one call each");
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
async fn a_registrar_that_panicked_is_re_created_and_drives_every_intent_again_spread() {
    let fx = Fixture::start();
    // 7001 keeps failing: its retry schedule grows (1, 2, 4, 8 s...).
    fx.registry.fail_next_registers(5);
    fx.engine.register(provider(7001)).await.unwrap();
    advance(Duration::from_secs(14)).await;
    assert_eq!(fx.registry.register_calls(), 4, "still backing off");
    fx.engine.register(provider(7002)).await.unwrap();
    settle().await;
    assert_eq!(
        fx.registry.instances(APP).len(),
        0,
        "7002's first call failed too"
    );
    let calls = fx.registry.register_calls();
    // The registrar's next handler panics: 7003's intent is recorded, then
    // the panic hits before anything is sent.
    fx.engine
        .drill_panic(steadfast_actors::RestartTarget::Registrar)
        .await
        .unwrap();
    fx.engine.register(provider(7003)).await.unwrap();
    settle().await;
    let s = fx.engine.stats();
    assert_eq!((s.handler_panics, s.restarts), (1, 1), "{s:?}");
    // Re-created from its intents: every key issues again within the
    // session window, on a clean schedule (7001 no longer waits out its
    // grown backoff), 7003's lost intent included.
    advance(steadfast_core::DEFAULT_SESSION_SPREAD + Duration::from_secs(1)).await;
    let mut ports: Vec<u16> = fx.registry.instances(APP).iter().map(|i| i.port).collect();
    ports.sort_unstable();
    assert_eq!(ports, [7001, 7002, 7003]);
    assert!(
        fx.registry.register_calls() - calls <= 4,
        "one call per key, about"
    );
    let regs = fx.engine.registrations().await.unwrap();
    assert!(
        regs.iter()
            .all(|(_, s)| *s == RegistrationState::Registered),
        "{regs:?}"
    );
}
