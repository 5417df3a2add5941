//! Shared fixture of the message-level integration tests: an engine on the
//! embedded registry with a scripted fetcher, and bounded waits on virtual
//! time (every test pauses the tokio clock first).

#![allow(dead_code)]

use std::time::Duration;

use steadfast::{
    Directory, DirectoryView, Engine, MemoryRegistry, MetadataInfo, Reference, ServiceInstance,
};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};
use tokio::time::{sleep, Instant};

/// Provider app used by most tests.
pub const APP: &str = "greeter";
/// Interface used by most tests.
pub const IFACE: &str = "demo.Greeter";

/// An engine wired to an embedded registry and a scripted fetcher.
pub struct Fixture {
    pub engine: Engine,
    pub registry: MemoryRegistry,
    pub fetcher: ScriptedFetcher,
}

impl Fixture {
    /// Starts an engine with seed 7 and default backoff.
    pub fn start() -> Self {
        Self::start_with(|b| b)
    }

    /// Starts an engine after letting `f` adjust the builder.
    pub fn start_with(
        f: impl FnOnce(steadfast::EngineBuilder) -> steadfast::EngineBuilder,
    ) -> Self {
        tokio::time::pause();
        Self::start_paused(f)
    }

    /// Like [`Fixture::start_with`] on a clock the test already paused.
    pub fn start_paused(
        f: impl FnOnce(steadfast::EngineBuilder) -> steadfast::EngineBuilder,
    ) -> Self {
        Self::start_full(|b, _| f(b))
    }

    /// Starts on a paused clock; `f` also sees the scripted fetcher.
    pub fn start_full(
        f: impl FnOnce(steadfast::EngineBuilder, &ScriptedFetcher) -> steadfast::EngineBuilder,
    ) -> Self {
        let registry = MemoryRegistry::new();
        let fetcher = ScriptedFetcher::new();
        let builder = Engine::builder()
            .registry(registry.clone())
            .fetcher(fetcher.clone())
            .seed(7);
        let engine = f(builder, &fetcher).start().expect("engine starts");
        Self {
            engine,
            registry,
            fetcher,
        }
    }

    /// Subscribes to the default reference.
    pub async fn subscribe(&self) -> Directory {
        self.engine.subscribe(reference()).await.expect("subscribe")
    }

    /// Serves two revisions (R1 on service port 20000, R2 on 20001),
    /// subscribes, registers an instance on R1 at :8001 and waits until the
    /// directory is ready with it.
    pub async fn ready_on_r1(&self) -> (MetadataInfo, MetadataInfo, Directory) {
        let m1 = metadata(APP, 20000, "t1");
        let m2 = metadata(APP, 20001, "t2");
        self.fetcher.serve(m1.clone());
        self.fetcher.serve(m2.clone());
        let dir = self.subscribe().await;
        self.registry.put(instance(&m1, 8001));
        wait_for(&dir, "R1 ready", Duration::from_millis(50), |v| {
            v.status.is_ready()
        })
        .await;
        (m1, m2, dir)
    }
}

impl Fixture {
    /// Serves R1 (port 20000) and R2 (port 20001) with R2 failing for good,
    /// registers one instance of each (:8001, :8002), subscribes and waits
    /// until the directory is ready on R1 with R2's retry pending.
    pub async fn r1_ready_r2_failing(&self) -> (MetadataInfo, MetadataInfo, Directory) {
        let m1 = metadata(APP, 20000, "t1");
        let m2 = metadata(APP, 20001, "t2");
        self.fetcher.serve(m1.clone());
        self.fetcher.serve(m2.clone());
        self.fetcher.fail_always(&m2.revision);
        let dir = self.subscribe().await;
        self.registry.put(instance(&m1, 8001));
        self.registry.put(instance(&m2, 8002));
        wait_for(&dir, "ready", Duration::from_millis(50), |v| {
            v.status.is_ready()
        })
        .await;
        (m1, m2, dir)
    }
}

/// An export of `greeter` on 127.0.0.1:`port` with `demo.Greeter` over
/// `tri` on the same port.
pub fn export_spec(port: u16) -> steadfast::ExportSpec {
    steadfast::ExportSpec::new(APP, "127.0.0.1", port).service(steadfast::ServiceInfo {
        name: IFACE.into(),
        group: None,
        version: None,
        protocol: "tri".into(),
        port,
        path: IFACE.into(),
        params: Default::default(),
    })
}

/// The default reference: `demo.Greeter` over `tri`, served by `greeter`.
pub fn reference() -> Reference {
    Reference::new(IFACE, "tri", [APP])
}

/// Metadata of `app` exporting `demo.Greeter` on `port`; `tag` makes the
/// revision distinct (like a new export timestamp after a restart).
pub fn metadata(app: &str, port: u16, tag: &str) -> MetadataInfo {
    MetadataBuilder::new(app)
        .service(IFACE, "tri", port)
        .param("timestamp", tag)
        .build()
}

/// An instance of `info`'s app on 127.0.0.1:`port` advertising its revision.
pub fn instance(info: &MetadataInfo, port: u16) -> ServiceInstance {
    instance_for(info, "127.0.0.1", port)
}

/// Lets queued messages run without moving the clock meaningfully.
pub async fn settle() {
    for _ in 0..3 {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        sleep(Duration::from_millis(1)).await;
    }
}

/// Advances virtual time by `d` in small steps, letting actors run.
pub async fn advance(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        let step = (end - Instant::now()).min(Duration::from_millis(100));
        sleep(step).await;
    }
    settle().await;
}

/// Polls the directory every 10 ms of virtual time until `pred` holds;
/// panics with the last view after `limit`.
pub async fn wait_for(
    dir: &Directory,
    what: &str,
    limit: Duration,
    pred: impl Fn(&DirectoryView) -> bool,
) -> DirectoryView {
    let start = Instant::now();
    loop {
        let view = dir.view().await.expect("directory open");
        if pred(&view) {
            return view;
        }
        assert!(
            start.elapsed() <= limit,
            "timed out after {limit:?} waiting for {what}; last view: {view:#?}"
        );
        sleep(Duration::from_millis(10)).await;
    }
}

/// Whether a view is ready but marked stale (the registry stopped answering).
pub fn stale(v: &DirectoryView) -> bool {
    matches!(
        &v.status,
        steadfast::DirectoryStatus::Ready {
            stale_since: Some(_),
            ..
        }
    )
}

/// Ports of the endpoints in a view, sorted.
pub fn ports(view: &DirectoryView) -> Vec<u16> {
    let mut p: Vec<u16> = view.endpoints.iter().map(|u| u.port()).collect();
    p.sort_unstable();
    p
}

/// Instance ids of the endpoints in a view, sorted.
pub fn instance_ids(view: &DirectoryView) -> Vec<String> {
    let mut ids: Vec<String> = view
        .endpoints
        .iter()
        .map(|u| u.instance_id().to_string())
        .collect();
    ids.sort();
    ids
}

/// Checks for one second (ten reads) that the directory keeps serving
/// exactly `want` while its registry is down: an outage never empties it.
pub async fn keeps_serving(dir: &Directory, want: &[&str]) {
    for _ in 0..10 {
        sleep(Duration::from_millis(100)).await;
        let v = dir.view().await.expect("directory open");
        assert_eq!(instance_ids(&v), want, "an outage never empties");
    }
}

/// The configuration a process with these environment variables gets
/// (`SteadfastConfig::from_vars`, the path `from_env` takes).
pub fn config_from(vars: &[(&str, String)]) -> steadfast::SteadfastConfig {
    let vars: std::collections::HashMap<&str, String> = vars.iter().cloned().collect();
    steadfast::SteadfastConfig::from_vars(&steadfast::EnvVars::new(|k| vars.get(k).cloned()))
        .expect("a valid configuration")
}
