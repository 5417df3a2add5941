//! # Steadfast
//!
//! Self-healing, actor-based service discovery for actix services.
//!
//! A registry holds one record per provider instance, tagged with a metadata
//! revision. Steadfast watches the registry, resolves each revision's
//! MetadataInfo (retrying every transient failure on a bounded, jittered
//! schedule), turns it into per-service endpoint URLs, and feeds one
//! directory per reference. Every directory says why it looks the way it
//! does: ready, degraded, unresolved, or really empty.
//!
//! ```no_run
//! # async fn demo(fetcher: impl steadfast::MetadataFetcher) -> Result<(), steadfast::EngineError> {
//! use steadfast::{Engine, Reference};
//! let engine = Engine::builder().fetcher(fetcher).start()?;
//! let dir = engine.subscribe(Reference::new("demo.Greeter", "tri", ["greeter-app"])).await?;
//! match dir.select() {
//!     Ok(lease) => {
//!         println!("call {}", *lease);         // derefs to the endpoint
//!         lease.success();                     // or .failure(FailureClass::Timeout)
//!     }
//!     Err(no) => println!("{no}"),             // e.g. "no endpoint: waiting for the registry"
//! }
//! engine.shutdown().await;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// A directory as a tower discovery stream (feature `tower`).
#[cfg(feature = "tower")]
pub use steadfast_actors::DirectoryDiscover;
/// Which actor a drill hits (feature `testkit`).
#[cfg(feature = "testkit")]
pub use steadfast_actors::RestartTarget;
pub use steadfast_actors::{
    CallerConfig, ConfigError, Deadline, Directory, DirectoryView, Engine, EngineBuilder,
    EngineConfig, EngineError, ExportHandle, ExportSpec, InFlight, InFlightGuard, ShutdownReport,
    SnapshotConfig, EXPORT_VARS,
};
/// Engine counters (`Engine::stats`) and the one table they are exported from.
pub use steadfast_actors::{EngineStatsSnapshot, ENGINE_COUNTERS};
/// A password, token or inline key that `Debug` and `Serialize` never show.
pub use steadfast_core::Secret;
pub use steadfast_core::CLOSING_KEY;
pub use steadfast_core::{
    BackoffPolicy, DirectorySnapshot, DirectoryStatus, DirectoryUpdate, EmptyReason, Endpoint,
    ErrorClass, EventStream, FallbackFetcher, FetchError, HeldInstances, Incarnation, Instance,
    Listing, MetadataFetcher, MetadataInfo, MetadataPublisher, NoEndpoint, NoEndpointReason,
    NotServing, PublishError, Reference, Registry, RegistryError, RegistryEvent, ServiceInfo,
    ServiceInstance, ServiceUrl, Unresolved, UpdateState, UrlChange, Version,
};
/// Describing an exported service, and a call's retries.
pub use steadfast_core::{CallRetryPolicy, GiveUp, RetryBudgetConfig, ServiceInfoBuilder};
/// A counter table's rows and values (the engine's and the etcd backend's).
pub use steadfast_core::{CounterKind, CounterSpec, CounterValue};
/// Balancing: strategies, leases and outcome feedback, outlier ejection.
pub use steadfast_core::{
    FailureClass, FailureRate, Lease, Outcome, OutlierPolicy, PeakEwma, Strategy,
};
/// One-shot instance queries (`Engine::instances`): answer, error, cache settings.
pub use steadfast_core::{InstancesAnswer, LookupConfig, LookupError};
pub use steadfast_memory::MemoryRegistry;

pub mod env;
pub use env::{
    from_env, unknown_vars, Configured, ConfiguredRegistry, FromEnvError, RegistryChoice,
    SteadfastConfig, UnknownVar,
};
/// An engine built with neither a fetcher nor the `http` feature fetches
/// through this (every fetch fails saying why).
pub use steadfast_actors::NoFetcher;
pub use steadfast_actors::{EnvError, EnvVar, EnvVars, Takes, ENGINE_VARS};

/// The HTTP MetadataService: provider scope and server, consumer fetcher
/// (feature `http`, on by default).
#[cfg(feature = "http")]
pub mod http {
    pub use steadfast_http::*;
}

/// The etcd registry backend and remote metadata report (feature `etcd`,
/// on by default).
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use steadfast_etcd::*;
}

/// The Nacos registry backend over the Nacos 2.x gRPC protocol (feature
/// `nacos`, on by default).
#[cfg(feature = "nacos")]
pub mod nacos {
    pub use steadfast_nacos::*;
}

/// Dubbo 3 interop: MetadataServiceV2 over Triple, client and server
/// (feature `dubbo`, on by default).
#[cfg(feature = "dubbo")]
pub mod dubbo {
    pub use steadfast_core::{
        adopt_dubbo_metadata, derived_port, dubbo_endpoints, dubbo_metadata, metadata_service,
        DubboEndpoint, DubboRecordError, MetadataServiceParams, DUBBO_ENDPOINTS_KEY,
        DUBBO_METADATA_PARAMS_KEY, DUBBO_META_VERSION_KEY, DUBBO_REVISION_KEY, DUBBO_STORAGE_KEY,
        DUBBO_TIMESTAMP_KEY, META_V2,
    };
    pub use steadfast_dubbo::*;
}

/// Scripted fakes and builders for users' own tests (feature `testkit`).
#[cfg(feature = "testkit")]
pub mod testkit {
    pub use steadfast_testkit::*;
}

/// The client pool: one client per endpoint address, idle reaping that
/// never closes a client in use, draining of dropped endpoints.
pub mod pool {
    pub use steadfast_pool::*;
}

/// actix-web / reqwest integration (feature `http`, on by default):
/// `Caller`, client factories, provider middleware and graceful shutdown.
#[cfg(feature = "http")]
pub mod web {
    pub use steadfast_web::*;
}

/// Prometheus metrics and logging setup (feature `metrics`).
#[cfg(feature = "metrics")]
pub mod metrics {
    pub use steadfast_metrics::*;
}

/// A directory status's bounded state label, and every label it returns.
pub use steadfast_actors::{state_label, REFERENCE_STATES};
/// What the engine sees: the serializable report of [`Engine::inspect`]
/// (references, apps with revisions, registry watches, registrations).
pub use steadfast_actors::{
    AppReport, EndpointReport, EngineReport, ReferenceReport, RegistrationReport, RegistryReport,
    RevisionReport, WatchReport, DEFAULT_INSPECT_TIMEOUT, INSPECT_PART_TIMEOUT,
};

// The Rust snippets of the README and of every guide in docs/, compiled as
// doc tests (`cargo test --doc`; `no_run` where they need a server or a
// registry; any other block is fenced `text`, `bash` or `json`). Each file
// is gated on the features its snippets use; the `awc` and `metrics`
// snippets gate themselves and compile with `--features awc,metrics`.
#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../docs/caller.md")]
pub struct CallerDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/directory.md")]
pub struct DirectoryDoctests;

#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../docs/provider.md")]
pub struct ProviderDoctests;

#[cfg(all(doctest, feature = "http", feature = "etcd"))]
#[doc = include_str!("../docs/operations.md")]
pub struct OperationsDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/architecture.md")]
pub struct ArchitectureDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/failure-handling.md")]
pub struct FailureHandlingDoctests;

#[cfg(all(doctest, feature = "dubbo", feature = "tower"))]
#[doc = include_str!("../docs/dubbo.md")]
pub struct DubboDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/lookup.md")]
pub struct LookupDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/mapping.md")]
pub struct MappingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/pool.md")]
pub struct PoolDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/registration.md")]
pub struct RegistrationDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/snapshot.md")]
pub struct SnapshotDoctests;
