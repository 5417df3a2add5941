//! `Engine::inspect()` and the inspection scope, on the embedded registry
//! with a scripted fetcher under virtual time: a ready and an unresolved
//! reference, ejection and tombstone marks, the JSON and HTML answers, the
//! registry watch going down, and a shut-down engine.

use std::time::Duration;

use actix_web::{test as atest, App};
use steadfast_actors::{Directory, Engine, EngineError, EngineReport};
use steadfast_core::{FailureClass, MetadataInfo, Reference};
use steadfast_memory::MemoryRegistry;
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};
use steadfast_web::inspect_scope;

const READY_APP: &str = "ready-app";
const STUCK_APP: &str = "stuck-app";

struct Fixture {
    engine: Engine,
    registry: MemoryRegistry,
    ready: Directory,
    stuck: Directory,
    ready_meta: MetadataInfo,
}

fn metadata(app: &str, iface: &str) -> MetadataInfo {
    MetadataBuilder::new(app)
        .service(iface, "tri", 20000)
        .build()
}

/// Polls `f` every 50 ms of virtual time, at most 60 s.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never happened: {what}");
}

/// `demo.Ready` served by four instances of `ready-app`; `demo.Stuck`
/// whose only revision never resolves.
async fn start() -> Fixture {
    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let fetcher = ScriptedFetcher::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(11)
        .start()
        .expect("engine starts");
    let ready_meta = metadata(READY_APP, "demo.Ready");
    let stuck_meta = metadata(STUCK_APP, "demo.Stuck");
    fetcher.serve(ready_meta.clone());
    fetcher.serve(stuck_meta.clone());
    fetcher.fail_always(&stuck_meta.revision);
    let ready = engine
        .subscribe(Reference::new("demo.Ready", "tri", [READY_APP]))
        .await
        .expect("subscribe");
    let stuck = engine
        .subscribe(Reference::new("demo.Stuck", "tri", [STUCK_APP]))
        .await
        .expect("subscribe");
    // Endpoint addresses take the service's port: the hosts tell them apart.
    for n in 1..=4u16 {
        registry.put(instance_for(&ready_meta, format!("127.0.0.{n}"), 8000 + n));
    }
    registry.put(instance_for(&stuck_meta, "127.0.0.1", 9001));
    eventually("ready with 4 endpoints", || {
        ready.snapshot().is_ok_and(|s| s.len() == 4)
    })
    .await;
    eventually("stuck unresolved", || {
        stuck
            .snapshot()
            .is_ok_and(|s| s.status().to_string().contains("unresolved"))
    })
    .await;
    Fixture {
        engine,
        registry,
        ready,
        stuck,
        ready_meta,
    }
}

fn reference<'r>(report: &'r EngineReport, key: &str) -> &'r steadfast_actors::ReferenceReport {
    report
        .references
        .iter()
        .find(|r| r.reference.starts_with(key))
        .unwrap_or_else(|| panic!("no reference {key} in {report:#?}"))
}

/// Leases the endpoint on `host` and reports `class` on it.
fn fail_on(dir: &Directory, host: &str, class: FailureClass) {
    let lease = (0..100)
        .find_map(|_| dir.select_other(|u| u.host() != host).ok())
        .expect("endpoint on port leased");
    let _ = lease.failure(class);
}

#[actix_rt::test]
async fn inspect_shows_a_ready_and_an_unresolved_reference_with_their_apps() {
    let f = start().await;
    // Let the stuck revision fail a few times.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let report = f.engine.inspect().await.expect("inspect");
    assert!(report.missing.is_empty(), "{:?}", report.missing);
    assert!(report.taken_at_ms > 0);

    let ready = reference(&report, "demo.Ready");
    assert_eq!(ready.state, "ready");
    assert_eq!(ready.apps, vec![READY_APP.to_string()]);
    let mut ports: Vec<&str> = ready.endpoints.iter().map(|e| e.address.as_str()).collect();
    ports.sort();
    assert_eq!(
        ports,
        [
            "127.0.0.1:20000",
            "127.0.0.2:20000",
            "127.0.0.3:20000",
            "127.0.0.4:20000"
        ]
    );
    assert!(ready
        .endpoints
        .iter()
        .all(|e| !e.ejected && e.url.starts_with("http://")));

    let stuck = reference(&report, "demo.Stuck");
    assert_eq!(stuck.state, "empty:unresolved");
    assert!(stuck.endpoints.is_empty());
    assert!(stuck.status.contains("unresolved"), "{}", stuck.status);

    let app = report
        .apps
        .iter()
        .find(|a| a.app == STUCK_APP)
        .expect("stuck app");
    assert_eq!(app.instances.len(), 1);
    assert_eq!(app.instances[0].port, 9001);
    let rev = &app.revisions[0];
    assert!(!rev.resolved);
    assert!(rev.attempts >= 2, "{rev:?}");
    assert!(rev.last_error.is_some(), "{rev:?}");
    assert!(
        rev.unresolved_for_ms.is_some_and(|ms| ms >= 4_000),
        "{rev:?}"
    );
    assert!(
        rev.next_retry_in_ms.is_some() || rev.phase == "fetching",
        "a retry is scheduled: {rev:?}"
    );
    let app = report
        .apps
        .iter()
        .find(|a| a.app == READY_APP)
        .expect("ready app");
    assert_eq!(app.instances.len(), 4);
    assert_eq!(app.revisions.len(), 1);
    assert!(app.revisions[0].resolved);
    assert_eq!(app.revisions[0].instances, 4);
    assert_eq!(app.revisions[0].revision, f.ready_meta.revision);

    assert!(report.registry.connected);
    assert!(report.registry.stale_for_ms.is_none());
    assert!(report.registry.last_event_ago_ms.is_some());
    assert_eq!(report.registry.watches.len(), 2);
    for w in &report.registry.watches {
        assert!(w.version.is_some(), "a version held: {w:?}");
        assert_eq!((w.resets_asked, w.gap_for_ms), (0, None), "{w:?}");
    }
    assert!(!app.version.is_empty());
    assert_eq!((app.resets_asked, app.gap_for_ms), (0, None));
    let r = reference(&report, "demo.Ready");
    assert_eq!((r.resets_asked, r.gap_for_ms), (0, None));

    // Serializable both ways.
    let json = serde_json::to_string(&report).expect("serialize");
    let back: EngineReport = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(back, report);
    drop(f.stuck);
}

#[actix_rt::test]
async fn inspect_marks_ejected_and_tombstoned_endpoints() {
    let f = start().await;
    // A refused connection ejects .1; then a closing answer tombstones .4
    // (the registry still lists it).
    fail_on(&f.ready, "127.0.0.1", FailureClass::ConnectionRefused);
    assert_eq!(f.ready.ejected(), 1);
    fail_on(&f.ready, "127.0.0.4", FailureClass::Closing);
    eventually(".4 tombstoned", || {
        f.ready.snapshot().is_ok_and(|s| s.len() == 3)
    })
    .await;
    let report = f.engine.inspect().await.expect("inspect");
    let ready = reference(&report, "demo.Ready");
    assert_eq!(ready.tombstoned, vec!["127.0.0.4:20000".to_string()]);
    let ejected: Vec<&str> = ready
        .endpoints
        .iter()
        .filter(|e| e.ejected)
        .map(|e| e.address.as_str())
        .collect();
    assert_eq!(ejected, ["127.0.0.1:20000"]);
    assert!(ready
        .endpoints
        .iter()
        .all(|e| e.latency_ms.is_some() || e.address != "127.0.0.1:20000"));
}

#[actix_rt::test]
async fn a_lost_notification_shows_as_a_re_read_asked_and_heals() {
    let f = start().await;
    // The registry swallows one change (.5 joins unseen); the next notified
    // change (.6) names it as its base, so the watch sees the gap, re-reads
    // the app, and both instances arrive.
    f.registry.drop_next_pushes(READY_APP, 1);
    f.registry
        .put(instance_for(&f.ready_meta, "127.0.0.5", 8005));
    f.registry
        .put(instance_for(&f.ready_meta, "127.0.0.6", 8006));
    eventually("both new instances", || {
        f.ready.snapshot().is_ok_and(|s| s.len() == 6)
    })
    .await;
    let report = f.engine.inspect().await.expect("inspect");
    let watch = report
        .registry
        .watches
        .iter()
        .find(|w| w.app == READY_APP)
        .expect("watch");
    assert_eq!(watch.resets_asked, 1, "{watch:?}");
    assert_eq!(watch.gap_for_ms, None, "answered: {watch:?}");
}

#[actix_rt::test]
async fn the_registry_going_down_shows_as_disconnected_and_stale() {
    let f = start().await;
    f.registry.set_down(true);
    f.registry.error_watches(READY_APP);
    f.registry.error_watches(STUCK_APP);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let report = f.engine.inspect().await.expect("inspect");
    assert!(!report.registry.connected, "{:?}", report.registry);
    assert!(
        report.registry.stale_for_ms.is_some_and(|ms| ms >= 2_000),
        "{:?}",
        report.registry
    );
    assert_eq!(reference(&report, "demo.Ready").state, "stale");
}

#[actix_rt::test]
async fn the_scope_serves_the_report_as_json_and_a_refreshing_status_page() {
    let f = start().await;
    let app =
        atest::init_service(App::new().service(inspect_scope("/ops/", f.engine.clone()))).await;

    let resp = atest::call_service(
        &app,
        atest::TestRequest::get().uri("/ops/inspect").to_request(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .starts_with("application/json"));
    let report: EngineReport = atest::read_body_json(resp).await;
    assert_eq!(reference(&report, "demo.Ready").state, "ready");
    assert_eq!(reference(&report, "demo.Stuck").state, "empty:unresolved");

    let resp = atest::call_service(
        &app,
        atest::TestRequest::get().uri("/ops/status").to_request(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .starts_with("text/html"));
    let body = atest::read_body(resp).await;
    let html = std::str::from_utf8(&body).expect("utf-8");
    assert!(
        html.contains("<meta http-equiv=\"refresh\" content=\"5\">"),
        "{html}"
    );
    assert!(!html.contains("<script"), "no script");
    for text in [
        "demo.Ready",
        "demo.Stuck",
        ">ready<",
        ">empty:unresolved<",
        "127.0.0.2:20000",
        STUCK_APP,
    ] {
        assert!(html.contains(text), "{text} missing from {html}");
    }

    f.engine.shutdown().await;
    let resp = atest::call_service(
        &app,
        atest::TestRequest::get().uri("/ops/status").to_request(),
    )
    .await;
    assert_eq!(resp.status(), 503);
}

#[actix_rt::test]
async fn a_shut_down_engine_answers_inspect_at_once() {
    let f = start().await;
    f.engine.shutdown().await;
    // Virtual time (the fixture paused the clock): the bound below is the
    // inspection's own deadline, exact whatever else shares the machine.
    let started = tokio::time::Instant::now();
    let r = f.engine.inspect().await;
    assert!(
        matches!(r, Err(EngineError::ShutDown) | Err(EngineError::Timeout)),
        "{r:?}"
    );
    let took = started.elapsed();
    println!("a shut-down engine answered inspect after {took:?} (virtual time)");
    assert!(
        took <= steadfast_actors::DEFAULT_INSPECT_TIMEOUT,
        "{took:?}"
    );
}

#[actix_rt::test]
async fn a_directory_that_does_not_answer_is_named_missing_and_the_rest_reported() {
    let f = start().await;
    // Seven contained panics of the directory's update handler quarantine
    // it (100 ms doubling): after the seventh its mailbox waits 3.2 s.
    let target = Reference::new("demo.Ready", "tri", [READY_APP]);
    for n in 0..7u16 {
        f.engine
            .drill_panic(steadfast_actors::RestartTarget::Directory(target.clone()))
            .await
            .expect("drill armed");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let extra = instance_for(&f.ready_meta, format!("127.0.1.{n}"), 8100 + n);
        f.registry.put(extra);
        let want = u64::from(n) + 1;
        eventually("the directory panicked", || {
            f.engine.stats().handler_panics >= want
        })
        .await;
    }
    let started = tokio::time::Instant::now();
    let report = f.engine.inspect().await.expect("inspect answers");
    let took = started.elapsed();
    assert_eq!(report.missing, vec!["directory:demo.Ready:tri".to_string()]);
    assert!(
        took >= steadfast_actors::INSPECT_PART_TIMEOUT
            && took < steadfast_actors::DEFAULT_INSPECT_TIMEOUT,
        "{took:?}"
    );
    // Its endpoints come from the published snapshot all the same, and
    // every other part answered.
    assert!(!reference(&report, "demo.Ready").endpoints.is_empty());
    assert_eq!(reference(&report, "demo.Stuck").state, "empty:unresolved");
    assert_eq!(report.apps.len(), 2);
}

#[actix_rt::test]
async fn inspect_is_bounded_when_the_coordinator_does_not_answer() {
    let f = start().await;
    // Repeated contained panics quarantine the coordinator (its mailbox
    // waits 100 ms doubling): after seven, it answers nothing for 3.2 s.
    let reference = Reference::new("demo.Ready", "tri", [READY_APP]);
    for _ in 0..7 {
        f.engine
            .drill_panic(steadfast_actors::RestartTarget::Coordinator)
            .await
            .expect("drill armed");
        let r = f.engine.subscribe(reference.clone()).await;
        assert_eq!(r.err(), Some(EngineError::Panicked));
    }
    let started = tokio::time::Instant::now();
    let r = f.engine.inspect().await;
    assert_eq!(r.err(), Some(EngineError::Timeout));
    let took = started.elapsed();
    assert!(
        took >= steadfast_actors::DEFAULT_INSPECT_TIMEOUT
            && took < steadfast_actors::DEFAULT_INSPECT_TIMEOUT + Duration::from_millis(100),
        "{took:?}"
    );
    // Once the quarantine is over the engine answers again.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(f.engine.inspect().await.is_ok());
}
