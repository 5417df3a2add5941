//! Steadfast Nacos backend: a [`steadfast_core::Registry`] over the Nacos
//! 2.x gRPC protocol, the one protocol rnacos, Nacos 2.x and Nacos 3.x all
//! serve out of the box. tonic carries it; its few prost messages are
//! written by hand (no protoc, no build script).
//!
//! * `wire`: the `Payload` envelope and the two gRPC paths;
//! * `protocol`: the JSON messages inside it;
//! * `connection`: one HTTP/2 connection (unary calls and the bi-stream
//!   share it: the server ties instances and subscriptions to it), the
//!   handshake, and the stream's reader answering every server request;
//! * `link`: the sans-IO [`LinkMachine`]: which server, when to connect,
//!   health checks, redo after every reconnect, periodic resyncs;
//! * `driver`: the one task performing the link's actions;
//! * `subscriptions`: full lists diffed into versioned Reset / Delta
//!   events, delivered through core's bounded `EventQueue`;
//! * `record`: instance records in Dubbo's layout on Nacos;
//! * `login`: the token of a server with auth on (renewed by the link);
//! * `registry`: [`NacosRegistry`];
//! * `config_service`, `metadata` and `mapping`: config items; the remote
//!   metadata report ([`NacosMetadataReport`]) and the interface -> app
//!   mapping on them, both in Dubbo's layout;
//! * `harness` (feature `harness`): real rnacos processes for tests.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod config_service;
mod connection;
mod driver;
mod error;
mod link;
mod login;
mod mapping;
mod metadata;
mod protocol;
mod record;
mod registry;
mod stats;
mod subscriptions;
mod wire;

#[cfg(feature = "harness")]
pub mod harness;

pub use config::{
    grpc_address, http_address, NacosAuth, NacosConfig, DEFAULT_GROUP, DEFAULT_NAMESPACE,
};
pub use error::{InvalidInstance, NacosError};
pub use link::{LinkAction, LinkMachine};
pub use mapping::{parse_apps, MAPPING_GROUP};
pub use metadata::NacosMetadataReport;
pub use record::ID_KEY;
pub use registry::NacosRegistry;
pub use stats::{NacosStats, NacosStatsSnapshot, NACOS_COUNTERS};
