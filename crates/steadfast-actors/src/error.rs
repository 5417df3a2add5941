//! Errors of the engine's public API.

use thiserror::Error;

use crate::config::ConfigError;

/// Why an engine or directory call failed.
#[derive(Clone, Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum EngineError {
    /// The engine was shut down (or is shutting down) before the call ran.
    #[error("the engine is shut down")]
    ShutDown,
    /// The directory was unsubscribed or the engine shut down.
    #[error("the directory is closed")]
    DirectoryClosed,
    /// A reference named neither a provider app nor an interface whose
    /// mapping could name one.
    #[error("reference {0} names no provider app")]
    NoProviderApps(String),
    /// Unsubscribe named a reference that is not subscribed.
    #[error("reference {0} is not subscribed")]
    NotSubscribed(String),
    /// The default HTTP metadata fetcher could not be built.
    #[error("metadata fetcher setup failed: {0}")]
    FetcherSetup(String),
    /// A forced restart named an actor that does not exist.
    #[error("no actor to restart: {0}")]
    UnknownTarget(String),
    /// An export named no service.
    #[error("provider {0} exports no service")]
    NothingToExport(String),
    /// An export was given an in-flight tracker that is already closing
    /// (a graceful shutdown closed it for good): use a fresh
    /// `InFlight::new()` per export.
    #[error("provider {0}: its in-flight tracker is already closing")]
    TrackerClosing(String),
    /// `start()` was called outside a running actix System.
    #[error("the engine must be started inside a running actix System")]
    NoSystem,
    /// An engine actor panicked while handling the call; the panic was
    /// contained and the actor restarts under supervision. Retry the call.
    #[error("an engine actor panicked handling the call; it restarts, retry")]
    Panicked,
    /// `start()` was given no registry and this build has no default one
    /// (the `memory` feature of `steadfast-actors` is off).
    #[error(
        "no registry configured (give EngineBuilder::registry, or enable the `memory` feature)"
    )]
    NoRegistry,
    /// `start()` refused the configuration.
    #[error("invalid engine configuration")]
    InvalidConfig(#[from] ConfigError),
    /// The engine did not answer within the call's bound.
    #[error("the engine did not answer in time")]
    Timeout,
}
