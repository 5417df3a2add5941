//! Typed errors of the registry and metadata edges, and their classification
//! (retry soon, or back off to the cap). Classification is kept apart from
//! the backoff policy: the policy only reads [`ErrorClass`].

use thiserror::Error;

/// How the engine treats an error when scheduling the next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Likely to pass on its own soon (timeout, refused connection, 5xx):
    /// retry on the normal exponential schedule.
    Transient,
    /// The peer answered but the answer is wrong (malformed, mismatched,
    /// oversized): retry at the capped delay so a fixed provider is picked up
    /// without hammering a broken one.
    Persistent,
    /// No retry can succeed (an invalid name, a configuration the backend
    /// refuses for good): stop and report.
    Final,
}

/// Why fetching a revision's MetadataInfo from an instance failed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FetchError {
    /// The metadata service could not be reached (connection refused/reset).
    #[error("metadata service unreachable: {0}")]
    Unreachable(String),
    /// The fetch did not complete within the deadline.
    #[error("metadata fetch timed out")]
    Timeout,
    /// The provider does not know the revision (HTTP 404 or equivalent).
    #[error("revision {0} unknown to the provider")]
    UnknownRevision(String),
    /// The provider answered with a server error.
    #[error("metadata service failed with status {0}")]
    ServerError(u16),
    /// The body was not valid MetadataInfo.
    #[error("malformed metadata: {0}")]
    Malformed(String),
    /// The body named another app or revision than the one asked for.
    #[error("metadata mismatch: asked {expected}, got {actual}")]
    Mismatch {
        /// `app@revision` asked for.
        expected: String,
        /// `app@revision` received.
        actual: String,
    },
    /// The body exceeded the size cap.
    #[error("metadata body larger than {limit} bytes")]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
    },
    /// The instance record names no usable metadata endpoint.
    #[error("instance has no usable metadata endpoint: {0}")]
    NoEndpoint(String),
    /// No candidate instance was available to fetch from.
    #[error("no instance to fetch the revision from")]
    NoCandidates,
    /// The fetcher (user code) panicked; the panic was contained.
    #[error("metadata fetcher panicked: {0}")]
    Panicked(String),
}

impl FetchError {
    /// Classifies the error for the retry scheduler.
    pub fn class(&self) -> ErrorClass {
        match self {
            FetchError::Unreachable(_)
            | FetchError::Timeout
            | FetchError::UnknownRevision(_)
            | FetchError::ServerError(_)
            | FetchError::NoCandidates
            | FetchError::Panicked(_) => ErrorClass::Transient,
            FetchError::Malformed(_)
            | FetchError::Mismatch { .. }
            | FetchError::TooLarge { .. }
            | FetchError::NoEndpoint(_) => ErrorClass::Persistent,
        }
    }

    /// Every label [`FetchError::label`] returns, in a fixed order.
    pub const LABELS: [&'static str; 10] = [
        "unreachable",
        "timeout",
        "unknown_revision",
        "server_error",
        "malformed",
        "mismatch",
        "too_large",
        "no_endpoint",
        "no_candidates",
        "panicked",
    ];

    /// A short stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            FetchError::Unreachable(_) => "unreachable",
            FetchError::Timeout => "timeout",
            FetchError::UnknownRevision(_) => "unknown_revision",
            FetchError::ServerError(_) => "server_error",
            FetchError::Malformed(_) => "malformed",
            FetchError::Mismatch { .. } => "mismatch",
            FetchError::TooLarge { .. } => "too_large",
            FetchError::NoEndpoint(_) => "no_endpoint",
            FetchError::NoCandidates => "no_candidates",
            FetchError::Panicked(_) => "panicked",
        }
    }
}

/// Why a registry operation failed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryError {
    /// The registry could not be reached.
    #[error("registry unavailable: {0}")]
    Unavailable(String),
    /// The registry answered too late.
    #[error("registry call timed out")]
    Timeout,
    /// The watch stream ended (cleanly or not) and must be re-established.
    #[error("registry watch ended: {0}")]
    WatchEnded(String),
    /// The registry refused the request.
    #[error("registry rejected the request: {0}")]
    Rejected(String),
    /// A fault injected by a test registry.
    #[error("injected fault: {0}")]
    Injected(String),
    /// The registry backend (user code) panicked; the panic was contained.
    #[error("registry backend panicked: {0}")]
    Panicked(String),
    /// The backend does not implement this operation (say, interface ->
    /// app mappings); retrying cannot help.
    #[error("registry backend does not support {0}")]
    Unsupported(String),
}

impl RegistryError {
    /// Classifies the error for the retry scheduler.
    pub fn class(&self) -> ErrorClass {
        match self {
            RegistryError::Rejected(_) => ErrorClass::Persistent,
            RegistryError::Unsupported(_) => ErrorClass::Final,
            _ => ErrorClass::Transient,
        }
    }
}

/// Why publishing or withdrawing MetadataInfo failed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError {
    /// The metadata store (e.g. a remote report) could not be reached.
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    /// The store refused the metadata.
    #[error("metadata store rejected the request: {0}")]
    Rejected(String),
    /// The publisher (user code) panicked; the panic was contained.
    #[error("metadata publisher panicked: {0}")]
    Panicked(String),
}

impl PublishError {
    /// Classifies the error for the retry scheduler: a refusal goes to the
    /// cap, the rest follow the exponential schedule.
    pub fn class(&self) -> ErrorClass {
        match self {
            PublishError::Rejected(_) => ErrorClass::Persistent,
            PublishError::Unavailable(_) | PublishError::Panicked(_) => ErrorClass::Transient,
        }
    }
}

/// An error and its sources joined by `": "`, for logs and messages.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Text from outside (a record, a peer's answer) for an error message: at
/// most `max_chars` characters, escaped so it cannot forge lines or
/// control a terminal.
pub fn excerpt(text: &str, max_chars: usize) -> String {
    let cut: String = text.chars().take(max_chars).collect();
    cut.escape_debug().to_string()
}

/// The message of a contained panic payload (`&str` or `String`), for the
/// `Panicked` variants.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
