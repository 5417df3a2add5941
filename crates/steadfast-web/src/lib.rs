//! Steadfast's actix-web / reqwest integration.
//!
//! - Consumer side: [`Caller`], a reqwest client for one reference that
//!   selects an endpoint, builds its URL, takes a pooled client, reports
//!   the outcome to the lease and retries a retryable failure on another
//!   endpoint within a retry budget and the call's deadline.
//! - Client factories for the pool: [`ReqwestFactory`] (awc behind the
//!   `awc` feature).
//! - Provider side: [`InFlightGate`], a middleware that counts requests in
//!   flight and answers 503 + `Retry-After` once closing, and the graceful
//!   shutdown sequence ([`GracefulShutdown`]) run on SIGTERM / ctrl-c.
//! - Operators: [`inspect_scope`], a scope serving the engine's inspection
//!   report as JSON and a self-refreshing HTML status page.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod caller;
mod factory;
mod inspect;
mod provider;

pub use caller::{
    is_idempotent, Answer, BoxError, CallError, Caller, CallerBuilder, CallerStats,
    CallerStatsReader, Held, HttpClient, Reqwest, ReqwestPool, DEFAULT_DEADLINE,
};
#[cfg(feature = "awc")]
pub use caller::{Awc, AwcPool};
#[cfg(feature = "awc")]
pub use factory::{AwcClient, AwcConfig, AwcFactory, AwcFactoryError};
pub use factory::{ReqwestConfig, ReqwestFactory};
pub use inspect::{inspect_scope, render_status, InspectScope, DEFAULT_REFRESH};
pub use provider::{
    is_closing_answer, ExportStopError, GatedBody, GracefulReport, GracefulShutdown, InFlightGate,
    InFlightGateService, ShutdownCause, ShutdownTrigger, CLOSING_HEADER, DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_RETRY_AFTER, DEFAULT_STEP_TIMEOUT,
};
