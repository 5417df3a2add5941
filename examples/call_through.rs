//! The whole story in one command: `cargo run --example call_through`.
//!
//! Starts an etcd when `etcd` is on PATH (free loopback ports, temp data
//! dir, killed at the end; `--embedded` forces the embedded registry), two
//! provider PROCESSES (this binary re-executed as `provider ...`, so the
//! SIGKILL is real) or, on the embedded registry, two provider tasks, and
//! one actix-web consumer that relays every call through `Caller`. Traffic
//! runs in bounded loops; provider a is SIGKILLed mid-traffic and restarted
//! a second later (as a supervisor would), then provider b is restarted
//! gracefully (SIGTERM: announce closing, unregister, drain, stop). Ends with
//! `<n> calls, 0 failed`, and exits non-zero when a call failed or one took
//! more than one retry.

#[path = "call_through/story.rs"]
mod story;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use steadfast::etcd::{EtcdConfig, EtcdRegistry};
use steadfast::{MemoryRegistry, Registry};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use story::{BoxError, Fleet, Summary, Timing};

const TIMING: Timing = Timing {
    phase: Duration::from_secs(1),
    settle: Duration::from_secs(20),
    concurrency: 4,
};

#[actix_rt::main]
async fn main() {
    // Logs on stderr, filtered by RUST_LOG (default: warnings).
    steadfast_metrics::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("provider") {
        if let Err(e) = provider_process(&args[1..]).await {
            eprintln!("provider: {e}");
            std::process::exit(2);
        }
        return;
    }
    let embedded = args.iter().any(|a| a == "--embedded");
    match story_main(embedded).await {
        Ok(s) => {
            println!(
                "retried calls: {} (at most {} attempts per call); served per boot: {:?}",
                s.retried, s.max_attempts, s.by_boot
            );
            for f in &s.failures {
                println!("failure: {f}");
            }
            println!("{} calls, {} failed", s.calls, s.failed);
            if s.failed > 0 || s.max_attempts > 2 {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("story aborted: {e}");
            std::process::exit(1);
        }
    }
}

fn say(step: &str) {
    println!("[call_through] {step}");
}

async fn story_main(embedded: bool) -> Result<Summary, BoxError> {
    let etcd = if embedded {
        None
    } else {
        match EtcdServer::start().await {
            Ok(e) => Some(e),
            Err(e) => {
                say(&format!("no etcd ({e}): using the embedded registry"));
                None
            }
        }
    };
    match etcd {
        Some(etcd) => {
            let prefix = unique_prefix();
            say(&format!(
                "etcd at {} (prefix {prefix}); providers are processes",
                etcd.endpoint()
            ));
            let registry: Arc<dyn Registry> = Arc::new(EtcdRegistry::new(
                EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix),
            )?);
            let consumer = story::start_consumer(registry).await?;
            let mut fleet = ProcessFleet::new(etcd.endpoint(), prefix)?;
            let summary = story::run(&mut fleet, &consumer.url, TIMING, say).await;
            say(&format!("caller: {:?}", consumer.caller.stats()));
            fleet.finish().await;
            consumer.server.stop(true).await;
            consumer.engine.shutdown().await;
            drop(etcd);
            summary
        }
        None => {
            say("embedded registry; providers are tasks of this process");
            let memory = MemoryRegistry::new();
            let registry: Arc<dyn Registry> = Arc::new(memory);
            let consumer = story::start_consumer(registry.clone()).await?;
            let mut fleet = story::TaskFleet::new(registry)?;
            let summary = story::run(&mut fleet, &consumer.url, TIMING, say).await;
            say(&format!("caller: {:?}", consumer.caller.stats()));
            say(&format!("closing 503s answered by b1: {}", fleet.refused));
            fleet.finish().await;
            consumer.server.stop(true).await;
            consumer.engine.shutdown().await;
            summary
        }
    }
}

/// A provider process: `provider <etcd endpoint> <prefix> <port> <boot name>`.
/// Serves until SIGTERM / ctrl-c (graceful shutdown), or until its parent
/// goes (stdin closes).
async fn provider_process(args: &[String]) -> Result<(), BoxError> {
    let [etcd, prefix, port, name] = args else {
        return Err("usage: provider <etcd endpoint> <prefix> <port> <boot name>".into());
    };
    let port: u16 = port.parse()?;
    std::thread::spawn(|| {
        let _ = std::io::stdin().read(&mut [0u8; 1]);
        std::process::exit(3);
    });
    let registry: Arc<dyn Registry> = Arc::new(EtcdRegistry::new(
        EtcdConfig::new([etcd.as_str()]).with_prefix(prefix),
    )?);
    let provider = story::boot_provider(registry, port, name).await?;
    let report = provider.shutdown.run_on_signal().await;
    eprintln!(
        "provider {name}: {} shutdown in {:?}, clean: {}, closing 503s answered: {}",
        report.cause,
        report.elapsed,
        report.is_clean(),
        provider.gate.refused()
    );
    if report.is_clean() {
        Ok(())
    } else {
        Err(format!("unclean shutdown: {report:?}").into())
    }
}

/// The providers as child processes of this binary.
struct ProcessFleet {
    exe: PathBuf,
    etcd: String,
    prefix: String,
    ports: [u16; 2],
    children: [Option<Child>; 2],
}

impl ProcessFleet {
    fn new(etcd: String, prefix: String) -> Result<Self, BoxError> {
        Ok(Self {
            exe: std::env::current_exe()?,
            etcd,
            prefix,
            ports: [story::free_port()?, story::free_port()?],
            children: [None, None],
        })
    }

    /// Stops what is left gracefully.
    async fn finish(&mut self) {
        for i in 0..2 {
            if self.children[i].is_some() {
                let _ = self.stop_gracefully(i).await;
            }
        }
    }
}

impl Drop for ProcessFleet {
    fn drop(&mut self) {
        for c in self.children.iter_mut().filter_map(Option::take) {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Fleet for ProcessFleet {
    async fn start(&mut self, i: usize, name: &str) -> Result<(), BoxError> {
        let child = Command::new(&self.exe)
            .args(["provider", &self.etcd, &self.prefix])
            .arg(self.ports[i].to_string())
            .arg(name)
            .stdin(Stdio::piped())
            .spawn()?;
        self.children[i] = Some(child);
        Ok(())
    }

    async fn kill(&mut self, i: usize) -> Result<(), BoxError> {
        let mut child = self.children[i].take().ok_or("provider not running")?;
        child.kill()?; // SIGKILL
        child.wait()?;
        Ok(())
    }

    async fn stop_gracefully(&mut self, i: usize) -> Result<(), BoxError> {
        let mut child = self.children[i].take().ok_or("provider not running")?;
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        if !sent.success() {
            return Err("kill -TERM failed".into());
        }
        // Bounded: drain 5 s + steps; then the process is killed.
        let end = Instant::now()
            .checked_add(Duration::from_secs(30))
            .unwrap_or_else(Instant::now);
        loop {
            if let Some(status) = child.try_wait()? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("provider exited with {status}").into())
                };
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                return Err("provider did not stop within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
