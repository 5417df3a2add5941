//! Steadfast metrics in Prometheus format.
//!
//! One [`Metrics`] value gathers the counters the engine, the etcd backend,
//! the metadata fetchers and the client pools already keep, and the gauges
//! of what the engine sees now (from `Engine::inspect`, bounded), into one
//! `prometheus-client` registry under the `steadfast_` prefix, with `app`,
//! `reference`, `state`, `kind` and `source` labels only (no revision or
//! instance label: cardinality stays bounded by the apps and references
//! subscribed). Label values come from the registry (any provider names
//! its app) and are escaped per the OpenMetrics text rules (`\\`, `\"`,
//! `\n`), other control characters and line separators replaced by
//! U+FFFD, so no app or interface name can end a label or a line.
//! [`Metrics::encode`] renders the text exposition;
//! [`metrics_scope`] serves it from actix-web.
//!
//! ```no_run
//! # async fn demo(engine: steadfast_actors::Engine) {
//! use steadfast_metrics::{metrics_scope, Metrics};
//! let metrics = Metrics::new().engine(&engine);
//! println!("{}", metrics.encode().await);
//! let app = actix_web::App::new().service(metrics_scope("/metrics", metrics.clone()));
//! # }
//! ```
//!
//! The select-latency histogram is timed by a probe, off the callers' hot
//! path: each [`Metrics::encode`] (each scrape) times
//! [`PROBE_SELECTS`] picks of every directory given to
//! [`Metrics::directory`] and drops their leases unreported (a lease
//! dropped without an outcome changes no balancing state).
//!
//! [`init_logging`] installs a `tracing-subscriber` filtered by `RUST_LOG`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod collect;
#[cfg(feature = "http")]
mod counted;
mod engine_families;
mod gather;
mod inspect_families;
mod label;
mod logging;
mod probe;
mod scope;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::registry::Registry;
use steadfast_actors::{Directory, Engine};
use steadfast_pool::{ClientFactory, ClientPool, PoolStats};

#[cfg(feature = "http")]
pub use counted::{Counted, FetchSource};
pub use logging::{init_logging, DEFAULT_FILTER};
pub use probe::PROBE_SELECTS;
pub use scope::{metrics_scope, CONTENT_TYPE};

/// How long [`Metrics::encode`] waits for the engine's inspection and
/// registrations (each) before it leaves their gauges out.
pub const DEFAULT_INSPECT_TIMEOUT: Duration = Duration::from_secs(2);

type PoolReader = Arc<dyn Fn() -> PoolStats + Send + Sync>;

/// What a [`Metrics`] reads at each encode.
#[derive(Clone, Default)]
pub(crate) struct Sources {
    pub(crate) engine: Option<Engine>,
    #[cfg(feature = "etcd")]
    pub(crate) etcd: Vec<steadfast_etcd::EtcdRegistry>,
    #[cfg(feature = "nacos")]
    pub(crate) nacos: Vec<steadfast_nacos::NacosRegistry>,
    #[cfg(feature = "http")]
    pub(crate) fetchers: Vec<Arc<dyn FetchSource>>,
    pub(crate) pools: Vec<PoolReader>,
    #[cfg(feature = "http")]
    pub(crate) callers: Vec<steadfast_web::CallerStatsReader>,
    pub(crate) directories: Vec<Directory>,
    pub(crate) inspect_timeout: Option<Duration>,
}

/// The metrics of one engine and its backends. Cheap to clone; clones share
/// the sources and the select-latency histogram. Holding it keeps the
/// engine value (not its references) alive until `Engine::shutdown`.
#[derive(Clone)]
pub struct Metrics {
    sources: Arc<Mutex<Sources>>,
    probe: probe::SelectProbe,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics with no source yet.
    pub fn new() -> Self {
        Self {
            sources: Arc::new(Mutex::new(Sources::default())),
            probe: probe::SelectProbe::new(),
        }
    }

    fn with(self, f: impl FnOnce(&mut Sources)) -> Self {
        f(&mut self.sources.lock().unwrap_or_else(PoisonError::into_inner));
        self
    }

    /// Reads `engine`'s counters (`Engine::stats`) and, at each encode, its
    /// inspection (apps, references, registry, registrations). One engine
    /// per `Metrics`: a second call replaces the first.
    pub fn engine(self, engine: &Engine) -> Self {
        let engine = engine.clone();
        self.with(|s| s.engine = Some(engine))
    }

    /// Reads an etcd registry's counters (`EtcdRegistry::stats`); several
    /// registries are summed.
    #[cfg(feature = "etcd")]
    pub fn etcd(self, registry: &steadfast_etcd::EtcdRegistry) -> Self {
        let registry = registry.clone();
        self.with(|s| s.etcd.push(registry))
    }

    /// Reads a Nacos registry's counters (`NacosRegistry::stats`); several
    /// registries are summed.
    #[cfg(feature = "nacos")]
    pub fn nacos(self, registry: &steadfast_nacos::NacosRegistry) -> Self {
        let registry = registry.clone();
        self.with(|s| s.nacos.push(registry))
    }

    /// Reads a metadata source's outcome counters under its `source` label:
    /// an `HttpMetadataFetcher` (`rpc`), or any fetcher wrapped in
    /// [`Counted`] (e.g. `Counted::new("report", etcd.metadata_report())`).
    #[cfg(feature = "http")]
    pub fn fetcher<S: FetchSource>(self, source: S) -> Self {
        self.with(|s| s.fetchers.push(Arc::new(source)))
    }

    /// Reads a Caller's counters under its `reference` label
    /// (`steadfast_caller_calls_total`, `_attempts_total`, `_retries_total`,
    /// `_failed_total`, `_budget_refused_total`). Holds a
    /// [`CallerStatsReader`](steadfast_web::CallerStatsReader), not the
    /// Caller: once the Caller drops its series go away. Callers of one
    /// reference are summed.
    #[cfg(feature = "http")]
    pub fn caller<H: steadfast_web::HttpClient>(self, caller: &steadfast_web::Caller<H>) -> Self
    where
        H::Factory: 'static,
    {
        let reader = caller.stats_reader();
        self.with(|s| s.callers.push(reader))
    }

    /// Reads a client pool's gauges and counters; several pools are summed.
    pub fn pool<F: ClientFactory>(self, pool: &ClientPool<F>) -> Self {
        let pool = pool.clone();
        self.with(|s| s.pools.push(Arc::new(move || pool.stats())))
    }

    /// Times [`PROBE_SELECTS`] picks of `directory` at each encode, into
    /// `steadfast_select_duration_seconds{reference}`. The probe holds an
    /// observer handle: it keeps neither the reference subscribed nor the
    /// engine running.
    pub fn directory(self, directory: &Directory) -> Self {
        let observer = directory.observer();
        self.with(|s| s.directories.push(observer))
    }

    /// Bounds the wait for the engine's inspection and registrations at each
    /// encode (default [`DEFAULT_INSPECT_TIMEOUT`]).
    pub fn inspect_timeout(self, timeout: Duration) -> Self {
        self.with(|s| s.inspect_timeout = Some(timeout))
    }

    /// The text exposition (OpenMetrics text, which Prometheus scrapes) of
    /// every source, read now. Waits at most twice the inspect timeout; a
    /// part that did not answer in time is left out and
    /// `steadfast_inspect_up` says 0.
    pub async fn encode(&self) -> String {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let gathered = gather::gather(&sources).await;
        self.probe.run(&sources.directories);
        let mut registry = Registry::with_prefix("steadfast");
        registry.register_collector(Box::new(gathered));
        self.probe.register(&mut registry);
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "metrics encoding failed");
        }
        out
    }
}
