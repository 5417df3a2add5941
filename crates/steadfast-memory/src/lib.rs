//! Steadfast's embedded, in-process registry.
//!
//! [`MemoryRegistry`] keeps, per app, the instances decoded once into shared
//! [`steadfast_core::Instance`]s, by id, and one version counter for the
//! whole registry. [`MemoryRegistry::watch_events`] yields versioned
//! [`steadfast_core::RegistryEvent`]s: a Reset of the current state first,
//! then one Delta per put or remove (only the changed instance), a Reset
//! after `set_instances`; each watcher's queue is bounded (a watcher that
//! falls behind gets one Reset instead of its backlog).
//! [`MemoryRegistry::list_events`] lists an app with its version. The
//! [`steadfast_core::Registry`] trait's `watch` and `list` are these two.
//!
//! Besides that, the registry offers synchronous helpers for tests
//! (`put`, `remove`, `set_instances`, ...) and scriptable faults (failing
//! calls, dropped notifications, silent changes, unhealthy or ended or
//! errored watch streams, panicking calls and streams) with call counters,
//! so engine behaviour under registry trouble can be tested deterministically.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod events;
mod faults;
mod mapping;
mod registry;
mod session;
mod state;
#[cfg(test)]
mod tests_session;

pub use events::DEFAULT_EVENT_QUEUE_LIMIT;
pub use mapping::MAPPING_QUEUE_LIMIT;
pub use registry::MemoryRegistry;
pub use steadfast_core::EventStream;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_events;
