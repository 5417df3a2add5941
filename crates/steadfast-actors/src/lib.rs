//! Steadfast actors: thin actix shells around the core state machines.
//!
//! - `RegistryActor` owns the registry
//!   subscription and sends each app's versioned changes (a Reset, then
//!   Deltas) to its resolvers;
//! - one `ResolverActor` per provider app
//!   resolves metadata revisions with its own retry scheduler;
//! - the `CacheActor` runs one fetch flight per
//!   (app, revision) and caches the results for every resolver;
//! - one `DirectoryActor` per reference
//!   serves endpoints.
//!
//! They exchange messages only; no RPC ever runs under shared state.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cache_actor;
mod config;
mod contain;
mod coordinator;
mod defaults;
mod directory_actor;
mod engine;
mod env;
mod error;
mod export;
mod handle;
mod inspect;
mod link;
mod live_config;
mod lookup_actor;
mod mapping_actor;
mod messages;
mod random;
mod registrar_actor;
mod registry_actor;
mod registry_live;
mod resolver_actor;
mod snapshot_actor;
mod snapshot_config;
mod stats;
mod timer;

pub use config::{ConfigError, EngineConfig};
#[cfg(any(test, feature = "testkit"))]
pub use coordinator::RestartTarget;
pub use defaults::{NoFetcher, NO_FETCHER};
pub use directory_actor::DirectoryView;
pub use engine::{Engine, EngineBuilder};
pub use env::{EnvError, EnvVar, EnvVars, Takes, ENGINE_VARS};
pub use error::EngineError;
pub use export::{ExportHandle, ExportSpec, InFlight, InFlightGuard, ShutdownReport, EXPORT_VARS};
#[cfg(feature = "tower")]
pub use handle::DirectoryDiscover;
pub use handle::{Deadline, Directory};
pub use inspect::{
    state_label, AppReport, EndpointReport, EngineReport, ReferenceReport, RegistrationReport,
    RegistryReport, RevisionReport, WatchReport, DEFAULT_INSPECT_TIMEOUT, INSPECT_PART_TIMEOUT,
    REFERENCE_STATES,
};
pub use live_config::{CallerConfig, LiveConfig};
pub use random::thread_random;
pub use snapshot_config::{SnapshotConfig, DEFAULT_IO_DEADLINE, MAX_SNAPSHOT_BYTES};
pub use stats::{EngineStatsSnapshot, ENGINE_COUNTERS};
