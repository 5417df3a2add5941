//! Closing notices: an endpoint that announced graceful shutdown (its
//! registry record's closing flag) or whose call failed with a closing-type
//! error. A directory that holds the endpoint removes it at once and keeps a
//! tombstone keyed by the endpoint's incarnation (see `docs/directory.md`).

use std::sync::Arc;

use crate::incarnation::Incarnation;
use crate::url::ServiceUrl;

/// Who said the endpoint is closing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClosingSource {
    /// The provider's registry record carries the closing flag.
    Registry,
    /// A caller's call failed with a closing-type error.
    Call,
}

/// One endpoint announced closing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closing {
    /// The endpoint's address: its instance id (`host:port`).
    pub address: Arc<str>,
    /// The service key of the directory it was served by.
    pub service_key: String,
    /// The incarnation of the instance that is closing, when known.
    pub incarnation: Option<Incarnation>,
    /// Who said so.
    pub source: ClosingSource,
}

impl Closing {
    /// The notice for `endpoint`, served under `service_key`, from `source`.
    pub fn of(endpoint: &ServiceUrl, service_key: &str, source: ClosingSource) -> Self {
        Self {
            address: endpoint.instance.id_arc().clone(),
            service_key: service_key.to_string(),
            incarnation: endpoint.incarnation().cloned(),
            source,
        }
    }
}
