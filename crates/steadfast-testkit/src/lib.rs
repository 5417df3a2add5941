//! Steadfast test kit: fakes and builders for users' own tests.
//!
//! * [`ScriptedFetcher`]: a [`steadfast_core::MetadataFetcher`] serving
//!   [`steadfast_core::MetadataInfo`] from a table, with scriptable failures,
//!   per-revision blocking and call counters.
//! * [`InstanceBuilder`], [`MetadataBuilder`] and [`instance_for`]: terse
//!   construction of instances and metadata.
//!
//! The in-process registry lives in the `steadfast-memory` crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod builders;
mod fetcher;

pub use builders::{instance_for, InstanceBuilder, MetadataBuilder};
pub use fetcher::{scripted_error, ScriptedFetcher};

#[cfg(test)]
mod fetcher_tests;
