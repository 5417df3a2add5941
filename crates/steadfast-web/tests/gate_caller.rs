//! The gate's closing answer as the Caller sees it, over loopback sockets:
//! a provider whose export closes while the consumer still lists it (its
//! closing announcement has not reached that consumer's registry) answers
//! the closing 503; the Caller retries the call on the other provider, and
//! no call fails.

use std::net::TcpListener;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpServer};
use steadfast_actors::{Engine, ExportHandle, ExportSpec, InFlight};
use steadfast_core::{Reference, ServiceInfo, Strategy};
use steadfast_http::{metadata_scope, MetadataStore, DEFAULT_BASE_PATH};
use steadfast_memory::MemoryRegistry;
use steadfast_web::{Caller, InFlightGate};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";

struct Provider {
    engine: Engine,
    export: ExportHandle,
    gate: InFlightGate,
    server: ServerHandle,
}

/// A provider on its own registry (so its closing announcement never
/// reaches the consumer's).
async fn provider(name: &'static str) -> Provider {
    let (store, in_flight) = (MetadataStore::new(), InFlight::new());
    let gate = InFlightGate::new(in_flight.clone());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (s, g) = (store.clone(), gate.clone());
    let server = HttpServer::new(move || {
        App::new()
            .wrap(g.clone())
            .service(metadata_scope(DEFAULT_BASE_PATH, s.clone()))
            .route("/hello", web::get().to(move || async move { name }))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let engine = Engine::builder()
        .registry(MemoryRegistry::new())
        .metadata_publisher(store)
        .start()
        .unwrap();
    let export = engine
        .export(
            ExportSpec::new(APP, "127.0.0.1", port)
                .in_flight(in_flight)
                .service(ServiceInfo::http(IFACE, port)),
        )
        .await
        .unwrap();
    Provider {
        engine,
        export,
        gate,
        server: handle,
    }
}

#[actix_rt::test]
async fn a_closing_providers_503_is_retried_on_the_other_endpoint() {
    let (a, b) = (provider("a").await, provider("b").await);
    // The consumer's registry lists both records as exported.
    let registry = MemoryRegistry::new();
    registry.put(a.export.instance().clone());
    registry.put(b.export.instance().clone());
    let consumer = Engine::builder().registry(registry).start().unwrap();
    let dir = consumer
        .subscribe(Reference::new(IFACE, "http", [APP]))
        .await
        .unwrap();
    // A generous failure bound (real time on a machine shared with other
    // work).
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while dir.snapshot().map(|s| s.len()).unwrap_or(0) < 2 {
        assert!(tokio::time::Instant::now() < end, "both endpoints resolved");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Round-robin, so the calls do reach a.
    dir.set_strategy(Some(Strategy::RoundRobin));
    let caller = Caller::new(dir.clone());
    let mut seen = Vec::new();
    for _ in 0..4 {
        let answer = caller.get("hello").await.expect("no call fails");
        seen.push(answer.response.text().await.unwrap());
    }
    assert!(
        seen.iter().any(|s| s == "a") && seen.iter().any(|s| s == "b"),
        "{seen:?}"
    );

    // a closes: its gate refuses from now on; the consumer does not know.
    let report = a.export.shutdown(Duration::from_secs(1)).await.unwrap();
    assert!(report.drained);
    let mut retried = 0;
    for _ in 0..20 {
        let answer = caller.get("hello").await.expect("no call fails");
        assert!(answer.attempts <= 2, "at most one retry");
        assert_eq!(answer.response.text().await.unwrap(), "b");
        if answer.attempts == 2 {
            retried += 1;
        }
    }
    assert!(a.gate.refused() >= 1, "a answered the closing 503");
    assert_eq!(
        retried,
        a.gate.refused(),
        "each closing answer was retried once"
    );
    assert_eq!(caller.stats().failed, 0);

    consumer.shutdown().await;
    for p in [a, b] {
        p.engine.shutdown().await;
        p.server.stop(false).await;
    }
}
