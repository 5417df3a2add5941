//! Steadfast test kit: fakes and builders for users' own tests.
//!
//! * [`ScriptedFetcher`]: a [`steadfast_core::MetadataFetcher`] serving
//!   [`steadfast_core::MetadataInfo`] from a table, with scriptable failures,
//!   per-revision blocking and call counters.
//! * [`InstanceBuilder`], [`MetadataBuilder`] and [`instance_for`]: terse
//!   construction of instances and metadata.
//!
//! * [`TcpProxy`]: a loopback TCP proxy a test can freeze (black-hole),
//!   cut or restore, to break a real socket path at a chosen moment.
//!
//! The in-process registry lives in the `steadfast-memory` crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod builders;
mod fetcher;
mod proxy;

pub use builders::{instance_for, InstanceBuilder, MetadataBuilder};
pub use fetcher::{scripted_error, ScriptedFetcher};
pub use proxy::TcpProxy;

#[cfg(test)]
mod fetcher_tests;
