//! The data model: provider instances as the registry stores them, and the
//! MetadataInfo a provider serves for one revision.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::incarnation::Incarnation;
use crate::keys::{match_key, service_key};

/// Metadata key of an instance that holds its metadata revision.
pub const REVISION_KEY: &str = "steadfast.metadata.revision";
/// Metadata key of an instance that holds the port of its MetadataService
/// (when it differs from the instance port).
pub const METADATA_PORT_KEY: &str = "steadfast.metadata.port";

/// Metadata key set (to `"true"`) on a record while its provider shuts down.
pub const CLOSING_KEY: &str = "steadfast.closing";

/// A revision meaning "this instance exports no services"; never fetched.
pub const EMPTY_REVISION: &str = "0";

/// One provider instance, as one registry record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInstance {
    /// Unique id of the instance within its app (e.g. `host:port`).
    pub id: String,
    /// Name of the provider application.
    pub app: String,
    /// Host the instance is reachable on.
    pub host: String,
    /// Main port of the instance.
    pub port: u16,
    /// Load-balancing weight; 0 means "take no traffic".
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Whether the registry considers the instance healthy.
    #[serde(default = "default_healthy")]
    pub healthy: bool,
    /// Free-form string metadata: revision, incarnation, metadata port, ...
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

fn default_weight() -> u32 {
    100
}

fn default_healthy() -> bool {
    true
}

impl ServiceInstance {
    /// Creates a healthy instance with weight 100 and no metadata.
    pub fn new(app: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        let host = host.into();
        Self {
            id: format!("{host}:{port}"),
            app: app.into(),
            host,
            port,
            weight: default_weight(),
            healthy: true,
            metadata: BTreeMap::new(),
        }
    }

    /// The metadata revision this instance advertises, or `None` when it has
    /// none or advertises the empty revision (`"0"` or `""`).
    pub fn revision(&self) -> Option<&str> {
        self.metadata
            .get(REVISION_KEY)
            .map(String::as_str)
            .filter(|r| !r.is_empty() && *r != EMPTY_REVISION)
    }

    /// Sets the metadata revision.
    pub fn set_revision(&mut self, revision: impl Into<String>) {
        self.metadata
            .insert(REVISION_KEY.to_string(), revision.into());
    }

    /// The incarnation stamped on this instance at export, if any.
    pub fn incarnation(&self) -> Option<Incarnation> {
        Incarnation::from_metadata(&self.metadata)
    }

    /// Port of the instance's MetadataService (the instance port unless the
    /// metadata names another one).
    pub fn metadata_port(&self) -> u16 {
        self.metadata
            .get(METADATA_PORT_KEY)
            .and_then(|p| p.parse().ok())
            .unwrap_or(self.port)
    }

    /// Whether the instance may receive traffic.
    pub fn is_serving(&self) -> bool {
        self.healthy && self.weight > 0 && !self.is_closing()
    }

    /// Whether the record announces that its provider is shutting down.
    pub fn is_closing(&self) -> bool {
        self.metadata.get(CLOSING_KEY).is_some_and(|v| v == "true")
    }
}

/// Description of one exported service inside a [`MetadataInfo`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInfo {
    /// Interface name.
    pub name: String,
    /// Optional group.
    #[serde(default)]
    pub group: Option<String>,
    /// Optional version.
    #[serde(default)]
    pub version: Option<String>,
    /// Protocol the service is exported with (e.g. `tri`, `http`).
    pub protocol: String,
    /// Port the service listens on: consumers call `host:port` (see
    /// [the ports](crate::ServiceInfoBuilder#ports)); 0: each instance's own
    /// (its `dubbo.endpoints` port of the protocol, else its port), as
    /// Dubbo consumers read a service published without one.
    pub port: u16,
    /// URL path of the service.
    #[serde(default)]
    pub path: String,
    /// Extra parameters (`timestamp`, `methods`, ...).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

impl ServiceInfo {
    /// Service `S` over `tri` on port 1, path `S`, no params: the one the
    /// unit tests build endpoints of.
    #[cfg(test)]
    pub(crate) fn test_service() -> Self {
        Self {
            name: "S".into(),
            group: None,
            version: None,
            protocol: "tri".into(),
            port: 1,
            path: "S".into(),
            params: Default::default(),
        }
    }

    /// The service key `[group/]interface[:version]`.
    pub fn service_key(&self) -> String {
        service_key(&self.name, self.group.as_deref(), self.version.as_deref())
    }

    /// The match key: service key + `:` + protocol.
    pub fn match_key(&self) -> String {
        match_key(&self.service_key(), &self.protocol)
    }
}

/// Everything a provider app exports at one revision, keyed by match key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataInfo {
    /// Provider application name.
    pub app: String,
    /// Revision of this metadata (see [`crate::revision`]).
    pub revision: String,
    /// Exported services keyed by match key.
    #[serde(default)]
    pub services: BTreeMap<String, ServiceInfo>,
}

impl MetadataInfo {
    /// Builds metadata for `app` from its services and stamps the computed revision.
    pub fn new(app: impl Into<String>, services: impl IntoIterator<Item = ServiceInfo>) -> Self {
        let app = app.into();
        let services: BTreeMap<String, ServiceInfo> =
            services.into_iter().map(|s| (s.match_key(), s)).collect();
        let revision = crate::revision::compute_revision(&app, services.values());
        Self {
            app,
            revision,
            services,
        }
    }
}
