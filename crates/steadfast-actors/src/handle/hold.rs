//! [`HandleHold`]: what makes a [`Directory`](crate::Directory) handle keep
//! its engine alive. Every handle of one subscribed reference (every clone,
//! every later `subscribe` of it while one is alive) shares one hold; the
//! hold owns a strong address of the engine's coordinator, so the engine
//! runs while any handle lives even after every `Engine` value is gone.
//! When the last handle drops, the hold tells the coordinator, which
//! unsubscribes the reference after `unsubscribe_linger` unless a handle of
//! it exists again by then.

use std::fmt;

use actix::Addr;
use steadfast_core::Reference;

use crate::coordinator::{Coordinator, HandlesDropped};

/// Shared by every handle of one subscribed reference; its drop is the
/// drop of the last one.
pub(crate) struct HandleHold {
    coordinator: Addr<Coordinator>,
    reference: Reference,
    /// Tells this hold from a later one of the same reference.
    id: u64,
}

impl HandleHold {
    /// A hold of `reference` numbered `id`, keeping `coordinator` alive.
    pub(crate) fn new(coordinator: Addr<Coordinator>, reference: Reference, id: u64) -> Self {
        Self {
            coordinator,
            reference,
            id,
        }
    }
}

impl Drop for HandleHold {
    fn drop(&mut self) {
        // Safe from any thread, and a no-op once the coordinator is gone.
        self.coordinator.do_send(HandlesDropped {
            reference: self.reference.clone(),
            id: self.id,
        });
    }
}

impl fmt::Debug for HandleHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandleHold")
            .field("reference", &self.reference.subscribe_key())
            .field("id", &self.id)
            .finish()
    }
}
