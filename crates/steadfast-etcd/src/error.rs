//! Typed errors of the gateway client and their mapping onto the core's
//! [`RegistryError`] and [`FetchError`]. Decisions (rotate to another
//! endpoint, treat as "lease gone", map to a class) read the variants and the
//! gRPC code, never the message text.

use std::time::Duration;

use steadfast_core::{ErrorClass, FetchError, PublishError, RegistryError};
use thiserror::Error;

use crate::config::EtcdConfigError;

/// gRPC status codes etcd puts in its error objects.
pub mod grpc {
    /// The request was malformed (e.g. bad base64).
    pub const INVALID_ARGUMENT: i64 = 3;
    /// The lease (or other entity) does not exist.
    pub const NOT_FOUND: i64 = 5;
    /// The operation needs a state the server is not in (e.g. auth off).
    pub const FAILED_PRECONDITION: i64 = 9;
    /// The revision was compacted or is in the future.
    pub const OUT_OF_RANGE: i64 = 11;
    /// The member cannot serve now (no leader, shutting down, timed out).
    pub const UNAVAILABLE: i64 = 14;
    /// The call's auth token is missing, expired or revoked.
    pub const UNAUTHENTICATED: i64 = 16;
}

/// Why a call to the etcd JSON gateway failed.
#[derive(Clone, Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum GatewayError {
    /// The client was built with an empty endpoint list.
    #[error("no etcd endpoint configured")]
    NoEndpoints,
    /// The configuration was refused.
    #[error("invalid etcd configuration")]
    Config(#[from] EtcdConfigError),
    /// Building the HTTP client failed (e.g. TLS backend initialisation).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// Every endpoint tried in one pass refused the connection, reset it or
    /// closed it before answering; `endpoint` is the last one tried.
    #[error("etcd unreachable (last tried {endpoint}): {reason}")]
    Unreachable {
        /// Last endpoint tried.
        endpoint: String,
        /// Transport error text, for logs only.
        reason: String,
    },
    /// The last endpoint tried accepted the request but did not answer within
    /// the per-request timeout (or, for a watch, the open timeout).
    #[error("etcd at {endpoint} did not answer within {timeout:?}")]
    Timeout {
        /// Last endpoint tried.
        endpoint: String,
        /// The deadline that passed.
        timeout: Duration,
    },
    /// etcd answered with a non-2xx status and (usually) an error object.
    #[error("etcd refused the request (HTTP {status}, gRPC code {code}): {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// gRPC code from the error object (0 when the body had none).
        code: i64,
        /// Error text, for logs only.
        message: String,
    },
    /// The connection broke while the answer body was being read.
    #[error("reading the etcd answer failed: {0}")]
    Body(String),
    /// The answer was not the JSON shape expected.
    #[error("unexpected etcd answer: {0}")]
    Decode(String),
    /// etcd refused the credentials (wrong user or password), or still
    /// refused a call right after a fresh token was fetched for it.
    #[error("etcd authentication failed: {0}")]
    Auth(String),
    /// The TLS handshake with `endpoint` failed (server certificate not
    /// signed by a trusted CA, client certificate refused, ...).
    #[error("TLS with etcd at {endpoint} failed: {reason}")]
    Tls {
        /// The endpoint whose handshake failed.
        endpoint: String,
        /// The TLS error text, for logs only.
        reason: String,
    },
    /// The TLS settings could not be used (unreadable or malformed CA,
    /// certificate or key).
    #[error("invalid etcd TLS settings: {0}")]
    TlsConfig(String),
    /// The registry was dropped while the call waited for its turn.
    #[error("the etcd registry was closed")]
    Closed,
}

impl GatewayError {
    /// Whether etcd said the entity (lease, ...) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, GatewayError::Status { code, .. } if *code == grpc::NOT_FOUND)
    }

    /// Whether etcd refused the call for its token (missing, expired,
    /// revoked): a fresh token may make it pass.
    pub fn is_auth_refusal(&self) -> bool {
        matches!(self, GatewayError::Status { code, message, .. }
            if crate::auth::is_auth_refusal(*code, message))
    }

    /// Whether the revision asked for was compacted or is in the future.
    pub fn is_out_of_range(&self) -> bool {
        matches!(self, GatewayError::Status { code, .. } if *code == grpc::OUT_OF_RANGE)
    }

    /// Whether the answering member cannot serve right now, so another
    /// endpoint (or a later attempt) may succeed.
    pub fn is_unavailable(&self) -> bool {
        match self {
            GatewayError::Unreachable { .. }
            | GatewayError::Timeout { .. }
            | GatewayError::Body(_) => true,
            GatewayError::Status { status, code, .. } => {
                *code == grpc::UNAVAILABLE || *status == 503
            }
            GatewayError::NoEndpoints
            | GatewayError::Config(_)
            | GatewayError::Client(_)
            | GatewayError::Decode(_)
            | GatewayError::Auth(_)
            | GatewayError::Tls { .. }
            | GatewayError::TlsConfig(_)
            | GatewayError::Closed => false,
        }
    }

    /// How a retry loop treats this error: unreachable, timed out or
    /// unavailable members are transient; an answer etcd should never give
    /// (a refusal, a malformed body) is persistent; a client that cannot be
    /// built or configured is final.
    pub fn class(&self) -> ErrorClass {
        match self {
            e if e.is_unavailable() => ErrorClass::Transient,
            GatewayError::Status { status, .. } if *status >= 500 => ErrorClass::Transient,
            GatewayError::Status { .. }
            | GatewayError::Decode(_)
            | GatewayError::Auth(_)
            | GatewayError::Tls { .. } => ErrorClass::Persistent,
            _ => ErrorClass::Final,
        }
    }
}

/// Runs a gateway operation under `limit` as a registry call: its error
/// mapped to a [`RegistryError`], running out a [`RegistryError::Timeout`].
pub(crate) async fn registry_op<T>(
    limit: std::time::Duration,
    op: impl std::future::Future<Output = Result<T, GatewayError>>,
) -> Result<T, RegistryError> {
    match tokio::time::timeout(limit, op).await {
        Ok(r) => r.map_err(RegistryError::from),
        Err(_) => Err(RegistryError::Timeout),
    }
}

impl From<GatewayError> for RegistryError {
    fn from(e: GatewayError) -> Self {
        match e {
            GatewayError::Timeout { .. } => RegistryError::Timeout,
            ref u if u.is_unavailable() => RegistryError::Unavailable(u.to_string()),
            GatewayError::Status { status, .. } if status >= 500 => {
                RegistryError::Unavailable(e.to_string())
            }
            other => RegistryError::Rejected(other.to_string()),
        }
    }
}

impl From<GatewayError> for FetchError {
    fn from(e: GatewayError) -> Self {
        match e {
            GatewayError::Timeout { .. } => FetchError::Timeout,
            GatewayError::Status { status, .. } => FetchError::ServerError(status),
            GatewayError::Decode(m) => FetchError::Malformed(m),
            other => FetchError::Unreachable(other.to_string()),
        }
    }
}

impl From<GatewayError> for PublishError {
    fn from(e: GatewayError) -> Self {
        if e.is_unavailable() {
            PublishError::Unavailable(e.to_string())
        } else {
            PublishError::Rejected(e.to_string())
        }
    }
}

/// Why an etcd record was skipped as not a valid provider record.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidRecord {
    /// The key is not `<prefix>/services/<app>/<id>` for the watched app
    /// (extra path segments, empty id, not UTF-8).
    #[error("key {0:?} does not follow <prefix>/services/<app>/<id>")]
    BadKey(String),
    /// The value is not ServiceInstance JSON (bad JSON or missing fields).
    #[error("value of {key} is not a ServiceInstance: {reason}")]
    BadJson {
        /// The record's key.
        key: String,
        /// serde's error text, for logs only.
        reason: String,
    },
    /// The record names another app than its key.
    #[error("record {key} names app {actual:?}, its key says {expected:?}")]
    ForeignApp {
        /// The record's key.
        key: String,
        /// App from the key.
        expected: String,
        /// App inside the record.
        actual: String,
    },
    /// The record names another instance id than its key.
    #[error("record {key} names id {actual:?}, its key says {expected:?}")]
    IdMismatch {
        /// The record's key.
        key: String,
        /// Id from the key.
        expected: String,
        /// Id inside the record.
        actual: String,
    },
    /// A Dubbo provider's record whose embedded metadata does not parse.
    #[error("record {key} has invalid Dubbo metadata")]
    Dubbo {
        /// The record's key.
        key: String,
        /// What does not parse.
        source: steadfast_core::DubboRecordError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_reads_codes_not_text() {
        let lease_gone = GatewayError::Status {
            status: 404,
            code: grpc::NOT_FOUND,
            message: "whatever".into(),
        };
        assert!(lease_gone.is_not_found() && !lease_gone.is_unavailable());
        assert!(matches!(
            RegistryError::from(lease_gone),
            RegistryError::Rejected(_)
        ));
        let no_leader = GatewayError::Status {
            status: 503,
            code: grpc::UNAVAILABLE,
            message: "etcdserver: no leader".into(),
        };
        assert!(matches!(
            RegistryError::from(no_leader),
            RegistryError::Unavailable(_)
        ));
        let t = GatewayError::Timeout {
            endpoint: "e".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(RegistryError::from(t.clone()), RegistryError::Timeout);
        assert_eq!(FetchError::from(t), FetchError::Timeout);
    }
}
