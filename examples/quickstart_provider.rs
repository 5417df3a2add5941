//! The README's provider, as a program: an actix-web app serving
//! `GET /greet/{name}` and its MetadataService, exported as `greeter-app`
//! (service `demo.Greeter`, protocol `http`) into the registry named by the
//! environment, shut down gracefully on SIGTERM / ctrl-c.
//!
//! ```sh
//! STEADFAST_REGISTRY=etcd://127.0.0.1:2379 STEADFAST_EXPORT_HOST=127.0.0.1 \
//!     cargo run --example quickstart_provider -- --port 8080
//! ```
//!
//! `--port N` binds `0.0.0.0:N` (default 8080; `0` picks a free port).
//! `--once` exports, then shuts down gracefully at once and exits (non-zero
//! if a step of the shutdown did not finish): a smoke run, e.g. with
//! `STEADFAST_REGISTRY=memory`. Logs on stderr, filtered by `RUST_LOG`
//! (default: warnings).

use std::process::ExitCode;

use actix_web::{web, App, HttpServer};
use steadfast::http::{metadata_scope, MetadataStore, DEFAULT_BASE_PATH};
use steadfast::web::{GracefulShutdown, InFlightGate};
use steadfast::{ExportSpec, InFlight};

type BoxError = Box<dyn std::error::Error>;

async fn greet(name: web::Path<String>) -> String {
    format!("hello {name}")
}

struct Args {
    port: u16,
    once: bool,
}

fn args() -> Result<Args, BoxError> {
    let mut parsed = Args {
        port: 8080,
        once: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--port" => parsed.port = it.next().ok_or("--port needs a value")?.parse()?,
            "--once" => parsed.once = true,
            other => return Err(format!("unknown argument {other:?} (--port N, --once)").into()),
        }
    }
    Ok(parsed)
}

#[actix_rt::main]
async fn main() -> ExitCode {
    // In your service: steadfast::metrics::init_logging() (feature `metrics`).
    steadfast_metrics::init_logging();
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("quickstart_provider: {e}");
            ExitCode::from(2)
        }
    }
}

/// The README's provider snippet, plus `--port` and `--once`.
async fn run() -> Result<bool, BoxError> {
    let args = args()?;
    let (store, in_flight) = (MetadataStore::new(), InFlight::new());
    let (s, gate) = (store.clone(), InFlightGate::new(in_flight.clone()));
    let server = HttpServer::new(move || {
        App::new()
            .wrap(gate.clone()) // counts requests; 503 + Retry-After once closing
            .service(metadata_scope(DEFAULT_BASE_PATH, s.clone()))
            .route("/greet/{name}", web::get().to(greet))
    })
    .disable_signals() // the shutdown helper owns SIGTERM / ctrl-c
    .bind(("0.0.0.0", args.port))?;
    let port = server.addrs()[0].port(); // the port it listens on
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let engine = steadfast::from_env()?.metadata_publisher(store).start()?;
    let export = engine
        .export(
            ExportSpec::from_env("greeter-app", port)? // STEADFAST_EXPORT_HOST (or POD_IP)
                .in_flight(in_flight)
                .http_service("demo.Greeter"), // served on the instance's own port
        )
        .await?;
    let instance = export.instance();
    println!(
        "exported greeter-app at {}:{} (listening on 0.0.0.0:{port}), revision {}",
        instance.host,
        instance.port,
        instance.revision().unwrap_or("?")
    );
    let shutdown = GracefulShutdown::new(engine).export(export).server(handle);
    let report = if args.once {
        shutdown.run_now().await
    } else {
        println!("serving; SIGTERM or ctrl-c stops it gracefully");
        shutdown.run_on_signal().await // announce closing, unregister, drain, stop server, stop engine
    };
    println!(
        "stopped in {} ms: {}",
        report.elapsed.as_millis(),
        if report.is_clean() {
            "clean"
        } else {
            "NOT clean"
        }
    );
    Ok(report.is_clean())
}
