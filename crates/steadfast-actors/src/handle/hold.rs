//! What keeps an engine alive. [`EngineLife`] owns the only strong addresses
//! of the engine's coordinator and lookup actor; every `Engine` clone and
//! every [`HandleHold`] shares it. When the last of them drops, the life
//! tells both actors to stop at once: nothing can reach the engine any more,
//! so no linger, retry or fetch of it may run on.
//!
//! Every handle of one subscribed reference (every clone, every later
//! `subscribe` of it while one is alive) shares one [`HandleHold`]. When the
//! last handle drops, the hold tells the coordinator, which unsubscribes the
//! reference after `unsubscribe_linger` unless a handle of it exists again
//! by then.

use std::fmt;

use std::sync::Arc;

use actix::Addr;
use steadfast_core::Reference;

use crate::coordinator::{Coordinator, HandlesDropped, Orphaned};
use crate::lookup_actor::LookupActor;
use crate::messages::Shutdown;

/// The engine's life: shared by every `Engine` clone and every handle hold;
/// its drop is the drop of the last of them.
pub(crate) struct EngineLife {
    pub(crate) coordinator: Addr<Coordinator>,
    pub(crate) lookup: Addr<LookupActor>,
}

impl Drop for EngineLife {
    fn drop(&mut self) {
        // Queued before the addresses go: both actors stop at once, timers
        // and flights with them (a no-op after `Engine::shutdown`).
        self.lookup.do_send(Shutdown);
        self.coordinator.do_send(Orphaned);
    }
}

/// Shared by every handle of one subscribed reference; its drop is the
/// drop of the last one.
pub(crate) struct HandleHold {
    life: Arc<EngineLife>,
    reference: Reference,
    /// Tells this hold from a later one of the same reference.
    id: u64,
}

impl HandleHold {
    /// A hold of `reference` numbered `id`, keeping the engine alive.
    pub(crate) fn new(life: Arc<EngineLife>, reference: Reference, id: u64) -> Self {
        Self {
            life,
            reference,
            id,
        }
    }
}

impl Drop for HandleHold {
    fn drop(&mut self) {
        // Safe from any thread, and a no-op once the coordinator is gone.
        self.life.coordinator.do_send(HandlesDropped {
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
