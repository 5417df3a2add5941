//! Steadfast etcd backend: a [`steadfast_core::Registry`] and a remote
//! metadata report over etcd's v3 JSON gateway, with plain `reqwest` over
//! HTTP/1.1 (no gRPC, no protoc).
//!
//! * [`gateway`]: [`EtcdClient`], the few gateway calls needed (range, put,
//!   delete, lease grant/keepalive/revoke, compaction, status, watch), with
//!   per-request timeouts and endpoint rotation;
//! * [`wire`] and [`framing`]: the gateway's JSON shapes and NDJSON framing;
//! * [`watch_machine`]: the sans-IO watch state (resume, resync, invalid
//!   records), driven by an internal `unfold` stream;
//! * [`registry`]: [`EtcdRegistry`], each lease kept alive by a task;
//! * [`metadata`]: [`EtcdMetadataReport`] (pair it with core's
//!   [`FallbackFetcher`] to read the report first);
//! * `harness` (feature `harness`): real etcd processes for tests.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod error;
pub mod framing;
pub mod gateway;
mod health;
mod keepalive;
pub mod keeper_machine;
pub mod metadata;
pub mod records;
pub mod registry;
pub mod stats;
pub mod watch_body;
pub mod watch_machine;
mod watch_stream;
pub mod watch_timing;
pub mod wire;

#[cfg(any(test, feature = "harness"))]
pub mod harness;

#[cfg(test)]
mod fuzz_tests;

pub use config::{EtcdConfig, EtcdConfigError};
pub use error::{GatewayError, InvalidRecord};
pub use gateway::EtcdClient;
pub use metadata::EtcdMetadataReport;
pub use records::KeyLayout;
pub use registry::EtcdRegistry;
pub use stats::{EtcdStats, StatsSnapshot};
/// Moved to core; re-exported here for convenience.
pub use steadfast_core::FallbackFetcher;
pub use watch_body::{watch_stream, WatchError, WatchStream};
pub use watch_machine::{
    Interruption, Next, Phase, Probe, ProbeTarget, Resume, Step, WatchMachine, WatchTiming,
};
