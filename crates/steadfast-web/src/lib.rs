//! Steadfast's actix-web / reqwest integration.
//!
//! - Consumer side: [`caller`], a reqwest client for one reference that
//!   selects an endpoint, builds its URL, takes a pooled client, reports
//!   the outcome to the lease and retries a retryable failure on another
//!   endpoint within a retry budget and the call's deadline.
//! - Client factories for the pool: [`factory`] (reqwest; awc behind the
//!   `awc` feature).
//! - Provider side: [`provider`], a middleware that counts requests in
//!   flight and answers 503 + `Retry-After` once closing, and the graceful
//!   shutdown sequence run on SIGTERM / ctrl-c.
//! - Operators: [`inspect`], a scope serving the engine's inspection
//!   report as JSON and a self-refreshing HTML status page.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod caller;
pub mod factory;
pub mod inspect;
pub mod provider;

pub use caller::{
    is_idempotent, Answer, CallError, Caller, CallerBuilder, CallerStats, CallerStatsReader,
    ReqwestPool, DEFAULT_DEADLINE,
};
#[cfg(feature = "awc")]
pub use factory::{AwcClient, AwcConfig, AwcFactory};
pub use factory::{ReqwestConfig, ReqwestFactory};
pub use inspect::{inspect_scope, render_status, InspectScope};
pub use provider::{
    is_closing_answer, ExportStopError, GracefulReport, GracefulShutdown, InFlightGate,
    ShutdownCause, ShutdownTrigger, CLOSING_HEADER,
};
