//! A real SIGTERM to this test process starts the graceful shutdown (its own
//! test binary: the handler is process-wide).

#![cfg(unix)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpServer};
use steadfast_actors::{Engine, ExportSpec, InFlight};
use steadfast_core::ServiceInfo;
use steadfast_memory::MemoryRegistry;
use steadfast_web::{GracefulShutdown, InFlightGate, ShutdownCause};

#[actix_rt::test]
async fn sigterm_runs_the_graceful_shutdown() {
    let in_flight = InFlight::new();
    let gate = InFlightGate::new(in_flight.clone());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = HttpServer::new(move || {
        App::new()
            .wrap(gate.clone())
            .route("/hello", web::get().to(|| async { "hello" }))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let registry = MemoryRegistry::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .start()
        .unwrap();
    let export = engine
        .export(
            ExportSpec::new("greeter", "127.0.0.1", port)
                .in_flight(in_flight.clone())
                .service(ServiceInfo {
                    name: "demo.Greeter".into(),
                    group: None,
                    version: None,
                    protocol: "http".into(),
                    port,
                    path: "demo.Greeter".into(),
                    params: Default::default(),
                }),
        )
        .await
        .unwrap();
    let run = actix_rt::spawn(
        GracefulShutdown::new(engine)
            .export(export)
            .server(handle)
            .step_timeout(Duration::from_secs(2))
            .run_on_signal(),
    );
    // The listeners are installed by `run_on_signal()` itself. A generous
    // wait for the registration (real time on a shared machine).
    let end = Instant::now() + Duration::from_secs(10);
    while registry.instances("greeter").is_empty() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let report = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("shutdown bounded")
        .unwrap();
    assert_eq!(report.cause, ShutdownCause::Terminate);
    assert!(report.is_clean(), "{report:?}");
    assert!(in_flight.is_closing());
    assert!(registry.instances("greeter").is_empty());
}
