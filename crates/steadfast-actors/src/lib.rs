//! Steadfast actors: thin actix shells around the core state machines.
//!
//! - [`RegistryActor`](registry_actor::RegistryActor) owns the registry
//!   subscription and sends each app's versioned changes (a Reset, then
//!   Deltas) to its resolvers;
//! - one [`ResolverActor`](resolver_actor::ResolverActor) per provider app
//!   resolves metadata revisions with its own retry scheduler;
//! - the [`CacheActor`](cache_actor::CacheActor) runs one fetch flight per
//!   (app, revision) and caches the results for every resolver;
//! - one [`DirectoryActor`](directory_actor::DirectoryActor) per reference
//!   serves endpoints.
//!
//! They exchange messages only; no RPC ever runs under shared state.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache_actor;
pub mod config;
mod contain;
mod coordinator;
pub mod defaults;
pub mod directory_actor;
pub mod engine;
pub mod env;
pub mod error;
pub mod export;
pub mod handle;
pub mod inspect;
pub mod link;
pub mod live_config;
pub mod lookup_actor;
mod mapping_actor;
pub mod messages;
mod random;
pub mod registrar_actor;
pub mod registry_actor;
mod registry_live;
pub mod resolver_actor;
pub mod snapshot_actor;
pub mod snapshot_config;
pub mod stats;
mod timer;

pub use config::{ConfigError, EngineConfig};
#[cfg(any(test, feature = "testkit"))]
pub use coordinator::RestartTarget;
pub use directory_actor::DirectoryView;
pub use engine::{Engine, EngineBuilder};
pub use error::EngineError;
pub use export::{ExportHandle, ExportSpec, InFlight, InFlightGuard, ShutdownReport, EXPORT_VARS};
pub use handle::{Deadline, Directory};
pub use inspect::{
    AppReport, EndpointReport, EngineReport, ReferenceReport, RegistrationReport, RegistryReport,
    RevisionReport, WatchReport,
};
pub use live_config::{CallerConfig, LiveConfig};
pub use random::thread_random;
pub use snapshot_config::SnapshotConfig;
pub use stats::{CounterKind, CounterSpec, CounterValue, EngineStatsSnapshot, ENGINE_COUNTERS};
