//! The pool's errors.

/// Why [`ClientPool::acquire`](crate::ClientPool::acquire) gave no client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The factory could not build a client for `address` (for example an
    /// invalid TLS configuration). Final for this address until the cause
    /// is fixed.
    #[error("could not build a client for {address}")]
    Build {
        /// The endpoint address ("host:port").
        address: String,
        /// The factory's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The factory panicked while building a client for `address`; the
    /// panic was contained.
    #[error("the client factory panicked building a client for {address}: {message}")]
    BuildPanicked {
        /// The endpoint address ("host:port").
        address: String,
        /// The panic's message.
        message: String,
    },
}

/// The pool closed a client while a call was using it (the endpoint was
/// dropped and the drain timeout passed). The request may or may not have
/// been processed by the provider; the call should count it as a transport
/// failure and may retry it on another endpoint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the pooled client for {address} was closed while in use")]
pub struct ClosedWhileInUse {
    /// The endpoint address ("host:port").
    pub address: String,
}

impl ClosedWhileInUse {
    /// Always true: a call cut by a pool close is worth retrying elsewhere.
    pub fn is_retryable(&self) -> bool {
        true
    }
}
