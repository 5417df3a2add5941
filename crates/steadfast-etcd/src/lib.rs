//! Steadfast etcd backend: a [`steadfast_core::Registry`] and a remote
//! metadata report over etcd's v3 JSON gateway, with plain `reqwest` over
//! HTTP/1.1 (no gRPC, no protoc).
//!
//! * `gateway`: [`EtcdClient`], the few gateway calls needed (range, put,
//!   delete, lease grant/keepalive/revoke, compaction, status, watch,
//!   probe), with per-request timeouts, endpoint rotation and demotion,
//!   `Grpc-Metadata-hasleader: true` on every request, the shared
//!   "etcd answered again" signal, and the client's one liveness prober;
//! * `prober_machine`: the sans-IO decisions of that prober, shared by
//!   every watch and keeper of the client: one probe per endpoint and
//!   cadence, whatever the number of watched apps;
//! * `wire` and `framing`: the gateway's JSON shapes and NDJSON framing;
//! * `watch_machine` and `watch_timing`: the sans-IO watch of one app
//!   (resume, resync, full re-read after outages, invalid records, the
//!   shared prober's verdicts, stale reports, every retry and resync on
//!   `Recover`), driven by the registry's hub;
//! * `mux`: the sans-IO planner of the shared watch streams and of the
//!   batched ranges;
//! * `keeper_machine`: the sans-IO keepalive of one registration;
//! * `registry`: [`EtcdRegistry`], registrations serialised per key, each
//!   operation under a deadline, updates in place under the live lease;
//!   [`EtcdRegistry::watch_events`] / [`EtcdRegistry::list_events`] yield
//!   versioned events (a Reset on every full read, one Delta per watch
//!   message, records decoded once into shared `Instance`s); the core's
//!   snapshot `Registry::watch` is a thin adapter over them;
//! * `epoch`: the version epoch shared by every watch and list of one
//!   registry, bumped once when a range proves the store's history
//!   restarted (wiped data dir, another cluster);
//! * `metadata`: [`EtcdMetadataReport`], each publication under a lease
//!   of its publisher (pair it with core's [`FallbackFetcher`](steadfast_core::FallbackFetcher) to read the
//!   report first);
//! * `mapping`: interface -> app mappings, one persistent key per app
//!   under `<prefix>/mapping/<interface>/`, and their watch sessions;
//! * `auth` and `tls`: a secured etcd: username / password (a token
//!   on every call, renewed once when etcd refuses it, watches re-opened
//!   from their revision), TLS with a custom CA and a client certificate,
//!   and no proxy unless [`EtcdConfig::proxy`] names one;
//! * `harness` (feature `harness`): real etcd processes for tests
//!   (`harness::secure`: one with auth on, one serving TLS with
//!   certificates made by `rcgen` at start).
//!
//! One watch stream per engine: every app watched through one
//! [`EtcdRegistry`] is driven by one hub task (`hub`) over at most two
//! shared watch streams (one watch request carrying every app's create,
//! each from its own revision with its own watch id, planned by the
//! sans-IO `mux`) and batched ranges (one txn of up to 128 prefix
//! ranges, two in flight). etcd 3.4's JSON gateway answers a watch only
//! once its body is complete (`tests/gateway_duplex.rs`) and Go's HTTP/1
//! server discards the body's rest at the first answer unless 256 KiB or
//! more remain, so the body is padded (see `gateway/multi.rs`). Each app's
//! [`WatchMachine`] keeps its own resume revision, resync, epoch and
//! reports; events reach each subscriber through a bounded queue that
//! collapses to a Reset when full (core's `EventQueue`). 1000 apps: 1 watch stream,
//! 3 connections, all Resets in ~50 ms (`examples/fleet.rs`).
//!
//! Fault containment, on by default (see [`EtcdConfig`] for the knobs):
//!
//! | fault | what happens | bound (defaults) |
//! |---|---|---|
//! | etcd frozen (SIGSTOP) or black-holed under an open watch | the client's shared prober fails two probes of the endpoint: every watch on it yields `Err`, the endpoint is demoted, the watches re-read from the next one | stale within ~5 s (probe every 2 s, 1 s deadline) |
//! | many watched apps on one client | one prober per client: one probe per endpoint with live watches per 2 s, one "answered yet?" probe per ~1 s while any watch is down, whatever the number of apps | load independent of the number of apps |
//! | a member without leader (quorum lost) | `hasleader` makes it refuse calls and end watches; probes fail | stale within ~3-5 s |
//! | etcd down (SIGKILL, restart) | a clean reconnect first; if it fails, backoff (250 ms to 10 s) plus a probe every ~1 s; `Err` once the watch has been down 3 s | resumes within one probe period (~1.25 s) of etcd answering, however long the outage |
//! | any outage beyond a clean reconnect | the resume is a full range, diffed against the state held; differences are counted in `missed_notifications` | a wiped store written past its old revision is caught at the resume |
//! | leases dropped while etcd was frozen | failing keepalives ask the client's prober (every 250 ms); when it answers, each lost registration comes back within a random 0-250 ms | back within ~0.5 s of etcd answering |
//! | a watch cancelled, found on a changed store, or ended right after each creation | every resync and re-end is a failure on the watch's backoff, which resets only once the watch proved healthy (an event, a progress notification, or open for one backoff cap) | one range / open per backoff step: 16 in 120 s, not a loop at network speed |
//! | a slow call for one key | other keys never wait; every register / unregister fails with `Timeout` after 10 s | 10 s |
//! | impossible numbers from etcd (revision `i64::MAX`, below 1, past the header) | the message or range counts as malformed: re-read, never an overflow | - |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod auth;
mod config;
mod dubbo;
mod epoch;
mod error;
pub(crate) mod framing;
pub(crate) mod gateway;
mod hub;
mod keepalive;
mod keeper_machine;
mod mapping;
mod metadata;
mod mux;
mod prober;
mod prober_machine;
mod records;
mod registry;
mod stats;
mod tls;
mod watch_body;
pub(crate) mod watch_machine;
mod watch_step;
mod watch_timing;
/// The gateway's JSON shapes and base64 helpers: not a stable API, public
/// only with the `harness` feature (this crate's benchmarks and fault
/// tests).
#[cfg(any(test, feature = "harness"))]
pub mod wire;
#[cfg(not(any(test, feature = "harness")))]
pub(crate) mod wire;

#[cfg(any(test, feature = "harness"))]
pub mod harness;

#[cfg(test)]
mod fuzz_tests;

pub use auth::EtcdAuth;
pub use config::{EtcdConfig, EtcdConfigError, DEFAULT_ETCD_ENDPOINT};
pub use dubbo::DubboEtcdReport;
pub use epoch::Epochs;
pub use error::{GatewayError, InvalidRecord};
pub use gateway::EtcdClient;
pub use metadata::EtcdMetadataReport;
pub use records::KeyLayout;
pub use registry::EtcdRegistry;
pub use stats::{EtcdStats, EtcdStatsSnapshot, ETCD_COUNTERS};
pub use tls::{EtcdTls, PemSource};
pub use watch_body::{watch_stream, WatchError, WatchStream};
pub use watch_machine::{
    Interruption, Next, Phase, ProbeNeed, Resume, Step, WatchMachine, WatchTiming,
};
