//! Steadfast's embedded, in-process registry.
//!
//! [`MemoryRegistry`] implements [`steadfast_core::Registry`] over a map held
//! in memory: app -> (instance id -> [`steadfast_core::ServiceInstance`]).
//! Watches are fed full snapshots over unbounded channels, the first item of
//! every watch being the current state of the app.
//!
//! Besides the trait, the registry offers synchronous helpers for tests
//! (`put`, `remove`, `set_instances`, ...) and scriptable faults (failing
//! calls, dropped pushes, silent changes, unhealthy or ended or errored watch
//! streams, panicking calls and streams) with call counters,
//! so engine behaviour under registry trouble can be tested deterministically.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod faults;
mod registry;

pub use registry::MemoryRegistry;

#[cfg(test)]
mod tests;
