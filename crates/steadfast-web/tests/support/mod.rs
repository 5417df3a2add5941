//! Fixture of the Caller tests: an engine on the embedded registry with a
//! scripted fetcher, inside the test's actix System, and actix-web
//! providers on real loopback sockets whose behaviour a test switches
//! (answer, closing 503, slow answer), plus a raw listener that resets
//! every connection once it has read the request.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use steadfast_actors::{Directory, Engine};
use steadfast_core::{MetadataInfo, Reference, ServiceInfo};
use steadfast_memory::MemoryRegistry;
use steadfast_testkit::{instance_for, ScriptedFetcher};
use tokio::io::AsyncReadExt;

/// Provider app.
pub const APP: &str = "web-app";
/// Interface.
pub const IFACE: &str = "demo.Web";

/// How a provider answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// 200 with `<port> <path>?<query>`.
    Serve = 0,
    /// 503 + `Retry-After: 1` + `x-steadfast-closing: true`.
    Closing = 1,
    /// Takes the request and never answers (a hung provider).
    Slow = 2,
    /// 200 with its headers and a first chunk at once, then a body that
    /// never ends.
    StallBody = 3,
}

/// One actix-web provider on 127.0.0.1.
pub struct Provider {
    pub port: u16,
    pub hits: Arc<AtomicU64>,
    mode: Arc<AtomicU8>,
    handle: actix_web::dev::ServerHandle,
}

impl Provider {
    /// Starts a provider answering in `mode` on a free port.
    pub fn start(mode: Mode) -> Provider {
        let hits = Arc::new(AtomicU64::new(0));
        let mode = Arc::new(AtomicU8::new(mode as u8));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (h, m) = (hits.clone(), mode.clone());
        let server = HttpServer::new(move || {
            let (h, m) = (h.clone(), m.clone());
            App::new().default_service(web::to(move |req: HttpRequest| {
                let (h, m) = (h.clone(), m.clone());
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    match m.load(Ordering::SeqCst) {
                        1 => HttpResponse::ServiceUnavailable()
                            .insert_header(("Retry-After", "1"))
                            .insert_header(("x-steadfast-closing", "true"))
                            .finish(),
                        // Never answers: a call to it ends only by its own
                        // bound (deadline, attempt timeout, forced close);
                        // the handler goes with the server or the System.
                        2 => std::future::pending::<HttpResponse>().await,
                        3 => {
                            let first = futures::stream::once(async {
                                Ok::<_, std::io::Error>(web::Bytes::from_static(b"first"))
                            });
                            HttpResponse::Ok().streaming(futures::StreamExt::chain(
                                first,
                                futures::stream::pending(),
                            ))
                        }
                        _ => HttpResponse::Ok().body(format!(
                            "{port} {}?{}",
                            req.path(),
                            req.query_string()
                        )),
                    }
                }
            }))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        actix_rt::spawn(server);
        Provider {
            port,
            hits,
            mode,
            handle,
        }
    }

    /// Switches how it answers.
    pub fn set_mode(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Requests it received.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }

    /// Stops it at once (connections refused afterwards).
    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

/// A port nothing listens on (bound, then released).
pub fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A listener that reads each request and closes the connection without
/// answering (a reset after the request was sent); counts connections.
pub fn resetter() -> (u16, Arc<AtomicU64>) {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let port = std_listener.local_addr().expect("addr").port();
    let listener = tokio::net::TcpListener::from_std(std_listener).expect("tokio listener");
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    actix_rt::spawn(async move {
        // Bounded by the test's System: it stops with it.
        while let Ok((mut sock, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(1), sock.read(&mut buf)).await;
            drop(sock);
        }
    });
    (port, count)
}

/// An engine on an embedded registry and a scripted fetcher.
pub struct World {
    pub engine: Engine,
    pub registry: MemoryRegistry,
    pub fetcher: ScriptedFetcher,
}

impl World {
    /// Starts the engine (inside the test's actix System).
    pub fn start() -> World {
        let registry = MemoryRegistry::new();
        let fetcher = ScriptedFetcher::new();
        let engine = Engine::builder()
            .registry(registry.clone())
            .fetcher(fetcher.clone())
            .seed(10)
            .start()
            .expect("engine starts");
        World {
            engine,
            registry,
            fetcher,
        }
    }

    /// Subscribes to the test reference (`demo.Web` over `http`).
    pub async fn subscribe(&self) -> Directory {
        self.engine
            .subscribe(Reference::new(IFACE, "http", [APP]))
            .await
            .expect("subscribe")
    }

    /// Registers an instance whose service listens on `port` under `path`.
    pub fn register(&self, port: u16, path: &str) -> MetadataInfo {
        let svc = ServiceInfo::builder(IFACE, port)
            .path(path)
            .param("lang", "en GB")
            .param("timestamp", "1")
            .build();
        let meta = MetadataInfo::new(APP, [svc]);
        self.fetcher.serve(meta.clone());
        self.registry.put(instance_for(&meta, "127.0.0.1", port));
        meta
    }

    /// Removes the instance on `port`.
    pub fn unregister(&self, port: u16) {
        self.registry.remove(APP, &format!("127.0.0.1:{port}"));
    }
}

/// Longest a wait of these tests polls (real time): it only bounds a
/// failure, so it is generous (the tests share two cores with other work).
pub const WAIT: Duration = Duration::from_secs(10);

/// Waits (bounded by [`WAIT`], real time) until `dir` serves exactly `n`
/// endpoints.
pub async fn wait_endpoints(dir: &Directory, n: usize) {
    let start = std::time::Instant::now();
    while start.elapsed() < WAIT {
        if dir.snapshot().map(|s| s.len()).unwrap_or(0) == n && (n == 0 || dir.select().is_ok()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "directory never served {n} endpoint(s) within {WAIT:?}: {:?}",
        dir.status().await
    );
}

/// Waits (bounded by [`WAIT`], real time) until `pred` holds.
pub async fn wait_until(what: &str, pred: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while start.elapsed() < WAIT {
        if pred() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out after {WAIT:?} waiting for {what}");
}
