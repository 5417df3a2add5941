//! What the registry says besides the instances: each delivery carries
//! the registry's staleness and hold as of when it was sent, and the
//! machine takes them from there. A snapshot never clears the stale mark
//! by merely arriving: the registry also delivers during an outage (a hold
//! that ends, a registry actor restart, a subscriber catching up).

use std::sync::Arc;
use std::time::Instant;

use super::{ResolverAction, ResolverMachine};
use crate::model::ServiceInstance;
use crate::update::HeldInstances;

impl ResolverMachine {
    /// Applies a registry delivery: a full snapshot together with the
    /// registry's staleness and hold as of when it was sent. Staleness is
    /// taken from the delivery, never inferred from the arrival of a
    /// snapshot (the registry also delivers during an outage, e.g. when a
    /// hold ends). An older generation overtaken by a newer one changes
    /// nothing, its staleness and hold included.
    pub fn on_delivery(
        &mut self,
        generation: u64,
        instances: Arc<Vec<ServiceInstance>>,
        stale_since: Option<Instant>,
        held: Option<HeldInstances>,
        now: Instant,
    ) -> Vec<ResolverAction> {
        if self.closed || (self.instances.is_some() && generation < self.generation) {
            self.tick(now);
            return Vec::new();
        }
        self.set_registry_stale(stale_since);
        self.set_held(held);
        self.on_snapshot(generation, instances, now)
    }

    /// The registry watch went down (`Some(since)`) or came back (`None`).
    /// While down, updates say since when their URLs may be stale.
    pub fn set_registry_stale(&mut self, since: Option<Instant>) {
        if self.stale_since != since && !self.closed {
            self.stale_since = since;
            self.dirty = true;
        }
    }

    /// Instances held after a registry-caused mass expiry (`Some`) or none
    /// (`None`); the updates say so. The registry side decides and sends it
    /// with every snapshot.
    pub fn set_held(&mut self, held: Option<HeldInstances>) {
        if self.held != held && !self.closed {
            self.held = held;
            self.dirty = true;
        }
    }
}
