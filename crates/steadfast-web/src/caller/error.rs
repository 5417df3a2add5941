//! What a call can fail with ([`CallError`]) and the classification of
//! each failure: retryable or final, and which [`FailureClass`] the lease
//! is told. Kept apart from the retry budget and the attempt schedule
//! (`steadfast_core::call_retry`), which only see "retryable or not".

use std::time::Duration;

use reqwest::Method;
use steadfast_core::{FailureClass, GiveUp, NoEndpoint};
use steadfast_pool::{ClosedWhileInUse, PoolError};

/// A transport's error, boxed (reqwest's as is; awc's, which are not
/// `Send`, as their message).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a call through a [`Caller`](super::Caller) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No endpoint could be had before the call's deadline (the first
    /// attempt found the directory empty, closed, or every endpoint
    /// ejected): the directory's reason. Final for this call.
    #[error(transparent)]
    NoEndpoint(#[from] NoEndpoint),
    /// Connecting to the endpoint failed (refused, unreachable, connect
    /// timeout): the request was never sent. Retryable; the lease is told
    /// `ConnectionRefused` (ejects at once).
    #[error("connect to {address} failed")]
    Connect {
        /// `host:port` of the endpoint.
        address: String,
        /// The transport's error.
        #[source]
        source: BoxError,
    },
    /// The provider answered 503 with `x-steadfast-closing: true`: it is
    /// shutting down and refused the request before running it.
    /// Retryable; the lease is told `Closing` (the endpoint is tombstoned).
    #[error("{address} is closing")]
    Closing {
        /// `host:port` of the endpoint.
        address: String,
    },
    /// The pool force-closed the endpoint's client while the call ran (the
    /// endpoint left the directory and its drain timed out). A transport
    /// failure (`Server`) for the lease. The request may have been
    /// processed, so, as for `Transport`, it is retried on another endpoint
    /// only when it may be repeated (an idempotent method, or a Caller told
    /// to retry every method).
    #[error("{source}")]
    ClosedWhileInUse {
        /// The pool's error (names the endpoint).
        #[source]
        source: ClosedWhileInUse,
        /// Whether a retry may repeat the request.
        retryable: bool,
    },
    /// The transport failed after the request may have been sent
    /// (connection reset, incomplete answer, body error). Retryable only
    /// when the method is idempotent (GET, HEAD, PUT, DELETE, OPTIONS,
    /// TRACE) or the Caller was told to retry every method; `Server` for
    /// the lease.
    #[error("request to {address} failed")]
    Transport {
        /// `host:port` of the endpoint.
        address: String,
        /// Whether a retry may repeat the request.
        retryable: bool,
        /// The transport's error.
        #[source]
        source: BoxError,
    },
    /// The call's deadline passed during an attempt (the lease is told
    /// `Timeout`) or while waiting for another endpoint. Final.
    #[error("call timed out after {0:?}")]
    Timeout(Duration),
    /// The attempt's own timeout (`CallerBuilder::attempt_timeout`) passed
    /// before the call's deadline: the endpoint did not answer in time
    /// (hung, overloaded). Retryable on another endpoint when the request
    /// may be repeated (as for `Transport`); `Timeout` for the lease.
    #[error("{address} did not answer within {after:?}")]
    AttemptTimeout {
        /// `host:port` of the endpoint.
        address: String,
        /// How long the attempt ran.
        after: Duration,
        /// Whether a retry may repeat the request.
        retryable: bool,
    },
    /// The request could not be built (an invalid URL, header or body
    /// from the `build` closure). Final; nothing is reported to the lease.
    #[error("invalid request")]
    Request(#[source] BoxError),
    /// The pool could not give a client for the endpoint (its factory
    /// failed). Retryable on another endpoint; nothing is reported to the
    /// lease (a local failure says nothing of the provider).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// Retries stopped (`why`) after `attempts` attempts; `last` is the
    /// last attempt's failure.
    #[error("call failed after {attempts} attempt(s), {why}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// Why no further retry ran.
        why: GiveUp,
        /// The last attempt's failure.
        #[source]
        last: Box<CallError>,
    },
}

impl CallError {
    /// A short label of the failure, for spans, logs and metric labels
    /// (`connect`, `closing`, `timeout`, ...; a [`CallError::GaveUp`] is
    /// labelled by why it gave up: `gave_up_budget`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::NoEndpoint(_) => "no_endpoint",
            CallError::Connect { .. } => "connect",
            CallError::Closing { .. } => "closing",
            CallError::ClosedWhileInUse { .. } => "closed_while_in_use",
            CallError::Transport { .. } => "transport",
            CallError::Timeout(_) => "timeout",
            CallError::AttemptTimeout { .. } => "attempt_timeout",
            CallError::Request(_) => "request",
            CallError::Pool(_) => "pool",
            CallError::GaveUp { why, .. } => match why {
                GiveUp::Budget => "gave_up_budget",
                GiveUp::Attempts => "gave_up_attempts",
                GiveUp::Deadline => "gave_up_deadline",
                GiveUp::NoOtherEndpoint => "gave_up_no_other_endpoint",
                GiveUp::Final => "gave_up_final",
            },
        }
    }

    /// Whether a new attempt on another endpoint may succeed: connect
    /// failures, closing answers, pool failures, and, for requests that may
    /// be repeated, transport failures and clients closed while in use. For
    /// [`CallError::GaveUp`], whether its last failure is retryable (a later
    /// call may succeed).
    pub fn is_retryable(&self) -> bool {
        match self {
            CallError::Connect { .. } | CallError::Closing { .. } | CallError::Pool(_) => true,
            CallError::ClosedWhileInUse { retryable, .. }
            | CallError::Transport { retryable, .. }
            | CallError::AttemptTimeout { retryable, .. } => *retryable,
            CallError::NoEndpoint(_) | CallError::Timeout(_) | CallError::Request(_) => false,
            CallError::GaveUp { last, .. } => last.is_retryable(),
        }
    }

    /// What the lease of the failed attempt is told (`None`: nothing, the
    /// lease is dropped without an outcome).
    pub fn failure_class(&self) -> Option<FailureClass> {
        match self {
            CallError::Connect { .. } => Some(FailureClass::ConnectionRefused),
            CallError::Closing { .. } => Some(FailureClass::Closing),
            CallError::ClosedWhileInUse { .. } | CallError::Transport { .. } => {
                Some(FailureClass::Server)
            }
            CallError::Timeout(_) | CallError::AttemptTimeout { .. } => Some(FailureClass::Timeout),
            CallError::NoEndpoint(_)
            | CallError::Request(_)
            | CallError::Pool(_)
            | CallError::GaveUp { .. } => None,
        }
    }

    /// Classifies a transport error of an attempt on `address`.
    pub(crate) fn of_transport(address: &str, source: reqwest::Error, repeatable: bool) -> Self {
        let address = address.to_owned();
        if source.is_builder() {
            CallError::Request(Box::new(source))
        } else if source.is_connect() {
            CallError::Connect {
                address,
                source: Box::new(source),
            }
        } else {
            CallError::Transport {
                address,
                retryable: repeatable,
                source: Box::new(source),
            }
        }
    }
}

/// Whether a request with `method` may be sent twice without changing its
/// effect (RFC 9110 idempotent methods).
pub fn is_idempotent(method: &Method) -> bool {
    is_idempotent_name(method.as_str())
}

/// [`is_idempotent`] by the method's name (for clients on another `http`
/// crate version, such as awc).
pub(crate) fn is_idempotent_name(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS" | "TRACE"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_safe_methods_are_idempotent() {
        assert!(is_idempotent(&Method::GET) && is_idempotent(&Method::PUT));
        assert!(!is_idempotent(&Method::POST) && !is_idempotent(&Method::PATCH));
    }

    #[test]
    fn classes_follow_the_failure() {
        let closing = CallError::Closing {
            address: "h:1".into(),
        };
        assert!(closing.is_retryable());
        assert_eq!(closing.failure_class(), Some(FailureClass::Closing));
        let timeout = CallError::Timeout(Duration::from_secs(1));
        assert!(!timeout.is_retryable());
        assert_eq!(timeout.failure_class(), Some(FailureClass::Timeout));
        let gave_up = CallError::GaveUp {
            attempts: 2,
            why: GiveUp::Budget,
            last: Box::new(closing),
        };
        assert!(gave_up.is_retryable());
        assert_eq!(gave_up.failure_class(), None);
        assert!(gave_up.to_string().contains("retry budget"));
    }
}
