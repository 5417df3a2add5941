//! The call-through story, shared by `examples/call_through.rs` (etcd and
//! provider processes, or the embedded registry and tasks) and
//! `tests/call_through.rs` (embedded registry, tasks, shorter phases):
//! two providers behind [`InFlightGate`] with a [`GracefulShutdown`], one
//! actix-web consumer relaying every call through [`Caller`], traffic in a
//! bounded loop, one provider SIGKILLed mid-traffic and restarted a little
//! later (as a supervisor would), then a graceful restart of the other.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer};
use steadfast::http::{metadata_scope, MetadataStore, DEFAULT_BASE_PATH};
use steadfast::web::{Caller, GracefulShutdown, InFlightGate};
use steadfast::{Engine, ExportSpec, InFlight, Reference, Registry, ServiceInfo};
use tokio::sync::watch;

/// Errors of the story's setup steps.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The provider app.
pub const APP: &str = "greeter";
/// The service both providers export and the consumer calls.
pub const IFACE: &str = "demo.Greeter";
/// Header the consumer puts the Caller's attempts of one call in.
pub const ATTEMPTS_HEADER: &str = "x-call-attempts";

/// A free loopback port (bound once, then released).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Binds `port`, retrying for at most 2 s (a killed process's listener may
/// take a moment to go).
async fn bind(port: u16) -> std::io::Result<TcpListener> {
    let end = Instant::now()
        .checked_add(Duration::from_secs(2))
        .unwrap_or_else(Instant::now);
    loop {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return Ok(l),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// One boot of a provider: its actix-web server (the gate, the
/// MetadataService and `/hello`), its engine and export, and its graceful
/// shutdown (not started).
pub struct Provider {
    /// The engine (kept alive after a simulated crash: its record stays).
    pub engine: Engine,
    /// The actix-web server.
    pub server: ServerHandle,
    /// The stop sequence, built at boot.
    pub shutdown: GracefulShutdown,
    /// The server's gate (its closing answers are counted).
    pub gate: InFlightGate,
}

/// Boots provider boot `name` on `port`: the server is built with the
/// in-flight tracker first, then the export gets the same tracker.
pub async fn boot_provider(
    registry: Arc<dyn Registry>,
    port: u16,
    name: &str,
) -> Result<Provider, BoxError> {
    let store = MetadataStore::new();
    let in_flight = InFlight::new();
    let gate = InFlightGate::new(in_flight.clone());
    let (s, n, g) = (store.clone(), name.to_string(), gate.clone());
    let server = HttpServer::new(move || {
        let n = n.clone();
        App::new()
            .wrap(g.clone())
            .service(metadata_scope(DEFAULT_BASE_PATH, s.clone()))
            .route(
                "/hello",
                web::get().to(move || {
                    let n = n.clone();
                    async move {
                        // A little work, so calls are in flight at a kill or stop.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        format!("hello from {n}")
                    }
                }),
            )
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(2)
    .listen(bind(port).await?)?
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let engine = Engine::builder()
        .registry_arc(registry)
        .metadata_publisher(store)
        .start()?;
    let export = engine
        .export(
            ExportSpec::new(APP, "127.0.0.1", port)
                .in_flight(in_flight)
                .service(ServiceInfo::http(IFACE, port)),
        )
        .await?;
    let shutdown = GracefulShutdown::new(engine.clone())
        .export(export)
        .server(handle.clone())
        .drain_timeout(Duration::from_secs(5))
        .step_timeout(Duration::from_secs(5));
    Ok(Provider {
        engine,
        server: handle,
        shutdown,
        gate,
    })
}

/// The actix-web consumer: `/relay` calls `/hello` of the service through
/// the Caller and answers the provider's body, with the attempts in
/// [`ATTEMPTS_HEADER`]; 502 when the call failed.
pub struct Consumer {
    /// Its engine.
    pub engine: Engine,
    /// The Caller of the reference.
    pub caller: Caller,
    /// Its server.
    pub server: ServerHandle,
    /// `http://127.0.0.1:<port>/relay`.
    pub url: String,
}

/// Starts the consumer on a free port.
pub async fn start_consumer(registry: Arc<dyn Registry>) -> Result<Consumer, BoxError> {
    let engine = Engine::builder().registry_arc(registry).start()?;
    let dir = engine
        .subscribe(Reference::new(IFACE, "http", [APP]))
        .await?;
    let caller = Caller::new(dir);
    let c = caller.clone();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/relay", listener.local_addr()?);
    let server = HttpServer::new(move || {
        let c = c.clone();
        App::new().route("/relay", web::get().to(move || relay(c.clone())))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)?
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    Ok(Consumer {
        engine,
        caller,
        server: handle,
        url,
    })
}

async fn relay(caller: Caller) -> HttpResponse {
    let answer = match caller.get("hello").await {
        Ok(a) => a,
        Err(e) => return HttpResponse::BadGateway().body(format!("call failed: {e}")),
    };
    let (attempts, status) = (answer.attempts, answer.response.status());
    match answer.response.text().await {
        Ok(body) if status.is_success() => HttpResponse::Ok()
            .insert_header((ATTEMPTS_HEADER, attempts.to_string()))
            .body(body),
        Ok(body) => HttpResponse::BadGateway().body(format!("provider answered {status}: {body}")),
        Err(e) => HttpResponse::BadGateway().body(format!("provider body failed: {e}")),
    }
}

/// What the traffic saw.
#[derive(Debug, Default)]
pub struct Tally {
    calls: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    max_attempts: AtomicU64,
    by_boot: Mutex<BTreeMap<String, u64>>,
    first_failures: Mutex<Vec<String>>,
}

/// The traffic's totals.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Calls made.
    pub calls: u64,
    /// Calls that did not end in the provider's 200.
    pub failed: u64,
    /// Calls that took more than one attempt.
    pub retried: u64,
    /// Most attempts of one call.
    pub max_attempts: u64,
    /// Successful calls per provider boot.
    pub by_boot: BTreeMap<String, u64>,
    /// The first few failures, said.
    pub failures: Vec<String>,
}

impl Tally {
    fn record(&self, outcome: Result<(u64, String), String>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Ok((attempts, boot)) => {
                if attempts > 1 {
                    self.retried.fetch_add(1, Ordering::Relaxed);
                }
                self.max_attempts.fetch_max(attempts, Ordering::Relaxed);
                let mut by = self.by_boot.lock().unwrap_or_else(|p| p.into_inner());
                *by.entry(boot).or_default() += 1;
            }
            Err(why) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut f = self
                    .first_failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if f.len() < 10 {
                    f.push(why);
                }
            }
        }
    }

    fn served(&self, boot: &str) -> bool {
        let by = self.by_boot.lock().unwrap_or_else(|p| p.into_inner());
        by.get(boot).is_some_and(|n| *n > 0)
    }

    fn summary(&self) -> Summary {
        Summary {
            calls: self.calls.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            max_attempts: self.max_attempts.load(Ordering::Relaxed),
            by_boot: self
                .by_boot
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            failures: self
                .first_failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

/// One call to the consumer: the attempts and the provider boot that
/// answered, or why it failed.
async fn call_once(http: &reqwest::Client, url: &str) -> Result<(u64, String), String> {
    let res = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = res.status();
    let attempts = res
        .headers()
        .get(ATTEMPTS_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = res.text().await.map_err(|e| e.to_string())?;
    match (
        status.is_success(),
        attempts,
        body.strip_prefix("hello from "),
    ) {
        (true, Some(a), Some(boot)) => Ok((a, boot.to_string())),
        _ => Err(format!("{status}: {body}")),
    }
}

/// Calls the consumer from `concurrency` loops until stopped.
pub struct Traffic {
    tally: Arc<Tally>,
    stop: watch::Sender<bool>,
    loops: Vec<actix_rt::task::JoinHandle<()>>,
}

impl Traffic {
    /// Starts the loops (each call bounded by 20 s, above the Caller's
    /// 10 s deadline; 5 ms between two calls of a loop).
    pub fn start(url: &str, concurrency: usize) -> Result<Self, BoxError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()?;
        let tally = Arc::new(Tally::default());
        let (stop, rx) = watch::channel(false);
        let loops = (0..concurrency)
            .map(|_| {
                let (http, url, tally, rx) =
                    (http.clone(), url.to_string(), tally.clone(), rx.clone());
                actix_rt::spawn(async move {
                    while !*rx.borrow() {
                        tally.record(call_once(&http, &url).await);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        Ok(Self { tally, stop, loops })
    }

    /// Waits until every boot in `boots` answered a call, at most `limit`.
    pub async fn wait_served(&self, boots: &[&str], limit: Duration) -> Result<(), BoxError> {
        let end = Instant::now()
            .checked_add(limit)
            .unwrap_or_else(Instant::now);
        while !boots.iter().all(|b| self.tally.served(b)) {
            if Instant::now() >= end {
                return Err(format!(
                    "{boots:?} not all served within {limit:?}: {:?}",
                    self.tally.summary()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stops the loops (each ends after its current call) and sums up.
    pub async fn stop(self) -> Summary {
        self.stop.send_replace(true);
        for l in self.loops {
            let _ = l.await;
        }
        self.tally.summary()
    }
}

/// Controls the two providers (0 = a, 1 = b) of the story.
#[allow(async_fn_in_trait)]
pub trait Fleet {
    /// Boots provider `i` as boot `name` on its port.
    fn start(&mut self, i: usize, name: &str) -> impl Future<Output = Result<(), BoxError>>;
    /// Kills provider `i` at once: no shutdown, its record stays.
    fn kill(&mut self, i: usize) -> impl Future<Output = Result<(), BoxError>>;
    /// Stops provider `i` gracefully (SIGTERM or the trigger), bounded.
    fn stop_gracefully(&mut self, i: usize) -> impl Future<Output = Result<(), BoxError>>;
}

/// Phase lengths of the story.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Traffic between two steps.
    pub phase: Duration,
    /// Longest wait for a (re)booted provider to serve a call.
    pub settle: Duration,
    /// Concurrent call loops.
    pub concurrency: usize,
}

/// Runs the story against the consumer at `url` and returns the traffic's
/// totals. `say` narrates each step.
pub async fn run(
    fleet: &mut impl Fleet,
    url: &str,
    timing: Timing,
    say: impl Fn(&str),
) -> Result<Summary, BoxError> {
    fleet.start(0, "a1").await?;
    fleet.start(1, "b1").await?;
    let traffic = Traffic::start(url, timing.concurrency)?;
    traffic.wait_served(&["a1", "b1"], timing.settle).await?;
    say("both providers serve");
    tokio::time::sleep(timing.phase).await;
    say("SIGKILL provider a (boot a1) mid-traffic");
    fleet.kill(0).await?;
    tokio::time::sleep(timing.phase).await;
    say("restart provider a (boot a2), as a supervisor would");
    fleet.start(0, "a2").await?;
    traffic.wait_served(&["a2"], timing.settle).await?;
    say("a2 serves");
    tokio::time::sleep(timing.phase).await;
    say("graceful restart of provider b (boot b1 -> b2)");
    fleet.stop_gracefully(1).await?;
    fleet.start(1, "b2").await?;
    traffic.wait_served(&["b2"], timing.settle).await?;
    say("b2 serves");
    tokio::time::sleep(timing.phase).await;
    Ok(traffic.stop().await)
}

/// Providers as tasks of this process on the embedded registry: a kill
/// stops the server at once and leaves the engine (and its record) as a
/// crashed process would; a graceful stop runs the [`GracefulShutdown`].
pub struct TaskFleet {
    registry: Arc<dyn Registry>,
    ports: [u16; 2],
    live: [Option<Provider>; 2],
    crashed: Vec<Engine>,
    /// Closing 503s answered by the providers stopped gracefully so far.
    pub refused: u64,
}

impl TaskFleet {
    /// Two providers on free ports of `registry`.
    pub fn new(registry: Arc<dyn Registry>) -> Result<Self, BoxError> {
        Ok(Self {
            registry,
            ports: [free_port()?, free_port()?],
            live: [None, None],
            crashed: Vec::new(),
            refused: 0,
        })
    }

    /// Shuts down what is left (crashed engines included).
    pub async fn finish(mut self) {
        for p in self.live.iter_mut().filter_map(Option::take) {
            let _ = p.shutdown.run_now().await;
        }
        for e in self.crashed.drain(..) {
            e.shutdown().await;
        }
    }
}

impl Fleet for TaskFleet {
    async fn start(&mut self, i: usize, name: &str) -> Result<(), BoxError> {
        let p = boot_provider(self.registry.clone(), self.ports[i], name).await?;
        self.live[i] = Some(p);
        Ok(())
    }

    async fn kill(&mut self, i: usize) -> Result<(), BoxError> {
        let p = self.live[i].take().ok_or("provider not running")?;
        p.server.stop(false).await;
        self.crashed.push(p.engine);
        Ok(())
    }

    async fn stop_gracefully(&mut self, i: usize) -> Result<(), BoxError> {
        let p = self.live[i].take().ok_or("provider not running")?;
        let report = p.shutdown.run_now().await;
        self.refused += p.gate.refused();
        if !report.is_clean() {
            return Err(format!("graceful stop not clean: {report:?}").into());
        }
        Ok(())
    }
}
