//! [`Engine::inspect`](crate::Engine::inspect): what the engine sees, as
//! one serializable [`EngineReport`]: every subscribed reference with its
//! state and endpoints (ejection and tombstone marks), every provider app
//! with its instances and revisions (resolution state, attempts, last
//! error, next retry), the registry watch health, and the registrations
//! the registrar keeps.
//!
//! The report is gathered by one query to the coordinator, which reads the
//! directories' published snapshots lock-free and fans out to the
//! resolvers, the directories (tombstones), the registry actor and the
//! registrar at once, each answer bounded (`inspect/collect.rs`); a part
//! that does not answer in time is left out, and the whole call is bounded
//! too, so a hung actor never blocks it.

pub(crate) mod collect;
pub(crate) mod render;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use steadfast_core::{DirectoryStatus, EmptyReason};

pub(crate) use collect::InspectEngine;

use crate::error::EngineError;
pub use collect::{DEFAULT_INSPECT_TIMEOUT, INSPECT_PART_TIMEOUT};

/// Everything the engine sees at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineReport {
    /// Every subscribed reference, by subscribe key.
    pub references: Vec<ReferenceReport>,
    /// Every provider app a resolver runs for, by name.
    pub apps: Vec<AppReport>,
    /// Health of the registry watches.
    pub registry: RegistryReport,
    /// Every registration the registrar keeps.
    pub registrations: Vec<RegistrationReport>,
    /// Wall-clock time of the report, milliseconds since the Unix epoch.
    pub taken_at_ms: u64,
    /// Parts that did not answer within their bound (e.g. `resolver:app`,
    /// `registry`); their data is missing from the report.
    #[serde(default)]
    pub missing: Vec<String>,
}

/// One subscribed reference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReferenceReport {
    /// Its subscribe key (`service key:protocol`).
    pub reference: String,
    /// Its provider apps (empty: it follows its interface's mapping).
    pub apps: Vec<String>,
    /// One short label of its state (see [`state_label`]).
    pub state: String,
    /// Its status as the directory renders it (`DirectoryStatus` Display).
    pub status: String,
    /// Every endpoint it serves.
    pub endpoints: Vec<EndpointReport>,
    /// Endpoints held out by a closing tombstone: `host:port` when the
    /// registry still lists them, else the instance id.
    #[serde(default)]
    pub tombstoned: Vec<String>,
    /// Whole states this directory asked of its resolvers after updates
    /// that did not follow (a lost update), so far.
    #[serde(default)]
    pub resets_asked: u64,
    /// How long the oldest such gap has waited for its whole state.
    #[serde(default)]
    pub gap_for_ms: Option<u64>,
}

/// One endpoint of a reference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointReport {
    /// Its HTTP URL (`ServiceUrl::to_http_url`).
    pub url: String,
    /// `host:port`.
    pub address: String,
    /// Id of its instance.
    pub instance_id: String,
    /// Whether outlier detection ejected it now.
    pub ejected: bool,
    /// Calls in flight on it.
    pub in_flight: u64,
    /// Its peak-EWMA latency estimate, once a call measured one.
    pub latency_ms: Option<f64>,
}

/// One provider app.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AppReport {
    /// Provider app.
    pub app: String,
    /// Its instances, by id.
    pub instances: Vec<steadfast_core::InstanceInspection>,
    /// Its revisions, in order.
    pub revisions: Vec<RevisionReport>,
    /// Version of the latest registry delivery the resolver applied
    /// (`revision`, `epoch:revision`, or with `.step` for a change it made
    /// at that registry version).
    #[serde(default)]
    pub version: String,
    /// Whole states the resolver asked of the registry actor after
    /// deliveries that did not follow, so far.
    #[serde(default)]
    pub resets_asked: u64,
    /// How long the current such gap has waited for its whole state.
    #[serde(default)]
    pub gap_for_ms: Option<u64>,
}

/// One metadata revision of a provider app.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionReport {
    /// The revision.
    pub revision: String,
    /// Whether its metadata is known.
    pub resolved: bool,
    /// Failed fetch attempts since it became unresolved.
    pub attempts: u32,
    /// The latest fetch error.
    pub last_error: Option<String>,
    /// Milliseconds until the next retry is due (while one is scheduled).
    pub next_retry_in_ms: Option<u64>,
    /// Milliseconds it has been unresolved.
    pub unresolved_for_ms: Option<u64>,
    /// Instances advertising it.
    pub instances: usize,
    /// Where its resolution stands: `resolved`, `fetching`, `waiting`,
    /// `idle` or `gave_up`.
    #[serde(default)]
    pub phase: String,
}

/// Health of the registry watches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RegistryReport {
    /// Which registry the engine uses: kind and endpoints
    /// ([`Registry::describe`](steadfast_core::Registry::describe)).
    #[serde(default)]
    pub backend: steadfast_core::RegistryInfo,
    /// Every watched app's watch is healthy (none stale, none failing to
    /// open). True while nothing is watched.
    pub connected: bool,
    /// Milliseconds since the earliest outage start of a watched app.
    pub stale_for_ms: Option<u64>,
    /// Milliseconds since the latest event of a current watch.
    pub last_event_ago_ms: Option<u64>,
    /// Every watched app with its watch health.
    #[serde(default)]
    pub watches: Vec<WatchReport>,
}

/// The watch of one app.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchReport {
    /// Provider app.
    pub app: String,
    /// Milliseconds its state has been stale, if it is.
    pub stale_for_ms: Option<u64>,
    /// While opening the watch keeps failing: the failure, rendered.
    pub subscribe_error: Option<String>,
    /// Version of the registry state held (`None`: nothing yet).
    #[serde(default)]
    pub version: Option<String>,
    /// Re-reads asked after registry deltas that did not follow (a lost
    /// notification), so far.
    #[serde(default)]
    pub resets_asked: u64,
    /// How long the current such gap has waited for its re-read.
    #[serde(default)]
    pub gap_for_ms: Option<u64>,
}

/// One registration the registrar keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationReport {
    /// `app/id` (a mapping: `app/interface`), with ` (mapping)` for a
    /// mapping entry.
    pub key: String,
    /// `register` or `unregister`.
    pub intent: String,
    /// Whether the intent has not landed yet.
    pub pending: bool,
    /// Failed attempts since the last success.
    pub attempts: u32,
    /// The latest error (or the final one, once it gave up).
    pub last_error: Option<String>,
}

/// Every label [`state_label`] returns, for bounded metric labels.
pub const REFERENCE_STATES: &[&str] = &[
    "ready",
    "degraded",
    "stale",
    "snapshot",
    "pending",
    "empty:registry_empty",
    "empty:unresolved",
    "empty:no_matching_service",
    "empty:not_serving",
    "empty:no_provider_app",
];

/// One short label of a directory status: `ready`, `degraded` (some app
/// has unresolved revisions), `stale` (a watch is down), `snapshot`
/// (served from a disk snapshot), `pending` (no state yet) or
/// `empty:<reason>`. Stale wins over degraded, degraded over snapshot.
pub fn state_label(status: &DirectoryStatus) -> &'static str {
    match status {
        DirectoryStatus::Ready {
            stale_since: Some(_),
            ..
        } => "stale",
        DirectoryStatus::Ready { degraded, .. } if !degraded.is_empty() => "degraded",
        DirectoryStatus::Ready {
            snapshot: Some(_), ..
        } => "snapshot",
        DirectoryStatus::Ready { .. } => "ready",
        DirectoryStatus::Empty(reason) => match reason {
            EmptyReason::Pending(_) => "pending",
            EmptyReason::RegistryEmpty => "empty:registry_empty",
            EmptyReason::Unresolved(_) => "empty:unresolved",
            EmptyReason::NoMatchingService => "empty:no_matching_service",
            EmptyReason::NotServing(_) => "empty:not_serving",
            EmptyReason::NoProviderApp => "empty:no_provider_app",
        },
    }
}

impl crate::Engine {
    /// What the engine sees now, as one serializable report: references
    /// with state and endpoints, apps with instances and revisions
    /// (attempts, last error, next retry), registry watch health and
    /// registrations (see [`EngineReport`]). Bounded by
    /// [`DEFAULT_INSPECT_TIMEOUT`](DEFAULT_INSPECT_TIMEOUT):
    /// a part that does not answer within its own bound is left out and
    /// named in `missing`; a coordinator that does not answer at all gives
    /// [`EngineError::Timeout`].
    pub async fn inspect(&self) -> Result<EngineReport, EngineError> {
        self.inspect_within(DEFAULT_INSPECT_TIMEOUT).await
    }

    /// [`Engine::inspect`](crate::Engine::inspect) bounded by `limit` as a whole.
    pub async fn inspect_within(&self, limit: Duration) -> Result<EngineReport, EngineError> {
        let ask = self.life.coordinator.send(InspectEngine);
        match tokio::time::timeout(limit, ask).await {
            Ok(Ok(report)) => report,
            Ok(Err(_)) => Err(EngineError::ShutDown),
            Err(_) => Err(EngineError::Timeout),
        }
    }
}
