//! The provider integration over real loopback sockets: the in-flight gate
//! counts requests (until the body is sent) and answers the closing 503 once
//! the export closes; the export uses the tracker the server was built with;
//! the graceful shutdown runs its steps in order, each bounded.

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer};
use steadfast_actors::{Engine, EngineError, ExportHandle, ExportSpec, InFlight};
use steadfast_core::ServiceInfo;
use steadfast_memory::MemoryRegistry;
use steadfast_web::{GracefulShutdown, InFlightGate, ShutdownCause, CLOSING_HEADER};
use tokio::sync::watch;

const APP: &str = "greeter";

/// A provider's server: `/hello` answers at once, `/slow` waits until the
/// test releases it, `/stream` sends two chunks with the release in between;
/// `ran` counts handler runs.
struct Server {
    port: u16,
    handle: ServerHandle,
    in_flight: InFlight,
    gate: InFlightGate,
    release: watch::Sender<bool>,
    ran: Arc<AtomicUsize>,
}

fn serve() -> Server {
    let in_flight = InFlight::new();
    let gate = InFlightGate::new(in_flight.clone());
    let (release, rx) = watch::channel(false);
    let ran = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (g, r) = (gate.clone(), ran.clone());
    let server = HttpServer::new(move || {
        let (rx, rx2, ran, ran2, ran3) = (rx.clone(), rx.clone(), r.clone(), r.clone(), r.clone());
        App::new()
            .wrap(g.clone())
            .route(
                "/hello",
                web::get().to(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                    async { "hello" }
                }),
            )
            .route(
                "/slow",
                web::get().to(move || {
                    ran2.fetch_add(1, Ordering::SeqCst);
                    let mut rx = rx.clone();
                    async move {
                        let _ = rx.wait_for(|r| *r).await;
                        "slow done"
                    }
                }),
            )
            .route(
                "/stream",
                web::get().to(move || {
                    ran3.fetch_add(1, Ordering::SeqCst);
                    let rx = rx2.clone();
                    let body = futures::stream::unfold((0, rx), |(i, mut rx)| async move {
                        match i {
                            0 => Some((Ok::<_, actix_web::Error>(web::Bytes::from("a")), (1, rx))),
                            1 => {
                                let _ = rx.wait_for(|r| *r).await;
                                Some((Ok(web::Bytes::from("b")), (2, rx)))
                            }
                            _ => None,
                        }
                    });
                    async move { HttpResponse::Ok().streaming(body) }
                }),
            )
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    Server {
        port,
        handle,
        in_flight,
        gate,
        release,
        ran,
    }
}

fn spec(s: &Server) -> ExportSpec {
    ExportSpec::new(APP, "127.0.0.1", s.port)
        .in_flight(s.in_flight.clone())
        .service(ServiceInfo {
            name: "demo.Greeter".into(),
            group: None,
            version: None,
            protocol: "http".into(),
            port: s.port,
            path: "demo.Greeter".into(),
            params: Default::default(),
        })
}

async fn provider(s: &Server) -> (MemoryRegistry, Engine, ExportHandle) {
    let registry = MemoryRegistry::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .registry_call_timeout(Duration::from_secs(1))
        .start()
        .unwrap();
    let export = engine.export(spec(s)).await.unwrap();
    let ok = until(WAIT, || !registry.instances(APP).is_empty()).await;
    assert!(ok, "export registered");
    (registry, engine, export)
}

/// Longest a wait of these tests polls (real time): it only bounds a
/// failure, so it is generous (the tests share two cores with other work).
const WAIT: Duration = Duration::from_secs(10);

/// Polls `f` every 10 ms for at most `limit`.
async fn until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

fn url(s: &Server, path: &str) -> String {
    format!("http://127.0.0.1:{}/{path}", s.port)
}

#[actix_rt::test]
async fn the_gate_counts_each_request_until_its_body_is_sent() {
    let s = serve();
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(url(&s, "hello"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "hello"
    );
    assert_eq!(s.in_flight.count(), 0);

    let slow = actix_rt::spawn(http.get(url(&s, "slow")).send());
    assert!(
        until(WAIT, || s.in_flight.count() == 1).await,
        "counted while the handler runs"
    );

    // The stream's handler is done after its first chunk; the request is
    // still in flight until the body ends.
    let mut stream = http.get(url(&s, "stream")).send().await.unwrap();
    assert_eq!(stream.chunk().await.unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(
        s.in_flight.count(),
        2,
        "a streaming body counts until it ends"
    );

    s.release.send_replace(true);
    assert_eq!(
        slow.await.unwrap().unwrap().text().await.unwrap(),
        "slow done"
    );
    assert_eq!(stream.chunk().await.unwrap().as_deref(), Some(&b"b"[..]));
    assert!(until(WAIT, || s.in_flight.count() == 0).await);
    assert_eq!(s.gate.refused(), 0);
    s.handle.stop(false).await;
}

#[actix_rt::test]
async fn the_export_closes_the_servers_tracker_and_the_gate_answers_the_closing_503() {
    let s = serve();
    let (registry, engine, export) = provider(&s).await;
    // The export drains the very tracker the server was built with.
    let http = reqwest::Client::new();
    let slow = actix_rt::spawn(http.get(url(&s, "slow")).send());
    assert!(until(WAIT, || export.in_flight().count() == 1).await);
    let e = export.clone();
    let stop = actix_rt::spawn(async move { e.shutdown(Duration::from_secs(5)).await });
    assert!(until(WAIT, || s.in_flight.is_closing()).await);

    let before = s.ran.load(Ordering::SeqCst);
    let refused = http.get(url(&s, "hello")).send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(refused.headers()[CLOSING_HEADER], "true");
    assert_eq!(
        s.ran.load(Ordering::SeqCst),
        before,
        "the handler did not run"
    );
    assert_eq!(s.gate.refused(), 1);

    // Unregistered while the request still runs; the stop waits for it.
    assert!(until(WAIT, || registry.instances(APP).is_empty()).await);
    assert!(!stop.is_finished());
    s.release.send_replace(true);
    assert_eq!(slow.await.unwrap().unwrap().status(), 200);
    let report = stop.await.unwrap().unwrap();
    assert!(report.unregistered && report.drained, "{report:?}");

    // A tracker closed by a shutdown cannot serve another export.
    let again = engine.export(spec(&s)).await;
    assert_eq!(again.err(), Some(EngineError::TrackerClosing(APP.into())));
    engine.shutdown().await;
    s.handle.stop(false).await;
}

#[actix_rt::test]
async fn graceful_shutdown_unregisters_drains_then_stops_the_server_and_the_engine() {
    let s = serve();
    let (registry, engine, export) = provider(&s).await;
    let http = reqwest::Client::new();
    let slow = actix_rt::spawn(http.get(url(&s, "slow")).send());
    assert!(until(WAIT, || s.in_flight.count() == 1).await);

    let shutdown = GracefulShutdown::new(engine.clone())
        .export(export)
        .server(s.handle.clone())
        .drain_timeout(Duration::from_secs(5))
        .step_timeout(Duration::from_secs(3));
    let trigger = shutdown.trigger();
    let run = actix_rt::spawn(shutdown.run_on_signal());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !s.in_flight.is_closing(),
        "nothing happens before the trigger"
    );
    trigger.fire();

    // 1. closing and unregistered while the request runs; the server still
    //    answers (the closing 503) until the drain is over.
    assert!(until(WAIT, || registry.instances(APP).is_empty()).await);
    let refused = http.get(url(&s, "hello")).send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(
        !run.is_finished(),
        "the request in flight holds the sequence"
    );
    // 2. the request finishes, then the server and the engine stop.
    s.release.send_replace(true);
    assert_eq!(
        slow.await.unwrap().unwrap().text().await.unwrap(),
        "slow done"
    );
    let report = run.await.unwrap();
    assert_eq!(report.cause, ShutdownCause::Trigger);
    assert!(report.is_clean(), "{report:?}");
    assert!(
        http.get(url(&s, "hello")).send().await.is_err(),
        "server stopped"
    );
    assert_eq!(
        engine.export(spec(&s)).await.err(),
        Some(EngineError::ShutDown)
    );
}

#[actix_rt::test]
async fn every_step_of_the_graceful_shutdown_is_bounded() {
    let s = serve();
    let (_registry, engine, export) = provider(&s).await;
    let http = reqwest::Client::new();
    // A request that never ends.
    let _stuck = actix_rt::spawn(http.get(url(&s, "slow")).send());
    assert!(until(WAIT, || s.in_flight.count() == 1).await);
    let (drain, step) = (Duration::from_millis(200), Duration::from_millis(300));
    let start = Instant::now();
    let report = GracefulShutdown::new(engine)
        .export(export)
        .server(s.handle.clone())
        .drain_timeout(drain)
        .step_timeout(step)
        .run_now()
        .await;
    let took = start.elapsed();
    let export = report.exports[0].as_ref().unwrap();
    assert!(export.unregistered && !export.drained, "{report:?}");
    assert!(!report.is_clean());
    // drain 0.2 s + server 0.3 s (graceful) + 0.3 s (forced) + engine 0.3 s:
    // twice those deadlines, plus 1 s of slack for a loaded machine.
    let bound = (drain + step * 3) * 2 + Duration::from_secs(1);
    eprintln!("bounded shutdown with a stuck request took {took:?} (bound {bound:?}): {report:?}");
    assert!(took < bound, "took {took:?}");
    assert!(report.engine_stopped, "{report:?}");
}
