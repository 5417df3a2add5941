//! The README's consumer, as a program: subscribes `demo.Greeter` (protocol
//! `http`) of `greeter-app` in the registry named by the environment and
//! calls `GET greet/ann?loud=1` through a `Caller`, `--calls N` times
//! (default 5), then shuts the engine down and exits.
//!
//! ```sh
//! STEADFAST_REGISTRY=etcd://127.0.0.1:2379 cargo run --example quickstart_consumer -- --calls 5
//! ```
//!
//! Exits 1 at the first call that fails, printing why (e.g. with
//! `STEADFAST_REGISTRY=memory` no provider shares the in-process registry:
//! the call ends at its deadline saying the registry holds no instance).
//! Logs on stderr, filtered by `RUST_LOG` (default: warnings).

use std::process::ExitCode;

use steadfast::web::Caller;
use steadfast::Reference;

type BoxError = Box<dyn std::error::Error>;

fn calls() -> Result<u32, BoxError> {
    let mut calls = 5;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--calls" => calls = it.next().ok_or("--calls needs a value")?.parse()?,
            other => return Err(format!("unknown argument {other:?} (--calls N)").into()),
        }
    }
    Ok(calls)
}

#[actix_rt::main]
async fn main() -> ExitCode {
    // In your service: steadfast::metrics::init_logging() (feature `metrics`).
    steadfast_metrics::init_logging();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart_consumer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The README's consumer snippet, with `--calls N` calls.
async fn run() -> Result<(), BoxError> {
    let calls = calls()?;
    let engine = steadfast::from_env()?.start()?; // STEADFAST_REGISTRY=etcd://127.0.0.1:2379
    let dir = engine
        .subscribe(Reference::new("demo.Greeter", "http", ["greeter-app"]))
        .await?;
    let caller = Caller::new(dir.clone()); // cheap to clone: one per handler
    let mut outcome = Ok(());
    for i in 1..=calls {
        // pick, URL, pooled client, outcome, retry elsewhere
        match caller.get("greet/ann?loud=1").await {
            Ok(answer) => {
                let (attempts, address) = (answer.attempts, answer.endpoint.address());
                let text = answer.response.text().await?;
                println!("call {i}/{calls}: {text:?} from {address} ({attempts} attempt(s))");
            }
            Err(e) => {
                outcome = Err(format!("call {i}/{calls} failed: {e}").into());
                break;
            }
        }
    }
    engine.shutdown().await;
    outcome
}
