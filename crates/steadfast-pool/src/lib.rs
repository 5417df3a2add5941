//! Steadfast's client pool: one client per endpoint address, built by a
//! [`ClientFactory`], reaped when idle without ever closing a client in
//! use, and drained when the directory drops its endpoint.
//!
//! The decisions (client states, idle scan, rescue, drain deadlines,
//! removal by identity) live in the sans-IO [`steadfast_core::pool`]
//! machine; this crate is its shell: it owns the reaper task, builds the
//! clients and performs the closes, each bounded by
//! [`PoolConfig::close_timeout`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod error;
mod factory;
mod pool;
mod pooled;
mod reaper;

pub use config::{PoolConfig, MIN_SCAN_INTERVAL};
pub use error::{ClosedWhileInUse, PoolError};
pub use factory::ClientFactory;
pub use pool::{ClientPool, PoolStats};
pub use pooled::PooledClient;
pub use steadfast_core::pool::{ClientId, OwnerId};
