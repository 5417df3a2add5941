//! What the registry says besides the instances: each delivery carries
//! the registry's staleness and hold as of when it was sent, and the
//! machine takes them from there. A snapshot never clears the stale mark
//! by merely arriving: the registry also delivers during an outage (a hold
//! that ends, a registry actor restart, a subscriber catching up).

use std::time::Instant;

use super::{ResolverAction, ResolverMachine};
use crate::change::Fit;
use crate::subscription::Delivery;
use crate::update::HeldInstances;

impl ResolverMachine {
    /// Applies a registry delivery: its instances (all, or what changed)
    /// together with the registry's staleness and hold as of when it was
    /// sent. Staleness is taken from the delivery, never inferred from the
    /// arrival of instances (the registry also delivers during an outage,
    /// e.g. when a hold ends). A delivery that does not apply (older, or a
    /// delta on top of a state not held) changes nothing, its staleness
    /// and hold included.
    pub fn on_delivery(&mut self, delivery: Delivery, now: Instant) -> Vec<ResolverAction> {
        let Delivery {
            feed,
            held,
            stale_since,
        } = delivery;
        if self.fit(&feed) == Fit::Apply {
            self.set_registry_stale(stale_since);
            self.set_held(held);
        }
        self.on_feed(feed, now)
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

    /// The registry subscription of the app keeps failing (`Some`) or
    /// answered (`None`). Until the first registry state arrives, updates
    /// say `Pending` with this failure instead of simply waiting, or, while
    /// a disk snapshot is served, carry it in their snapshot origin.
    pub fn set_subscribe_failure(&mut self, failure: Option<crate::pending::RegistryFailure>) {
        if self.subscribe_failure != failure && !self.closed {
            self.subscribe_failure = failure;
            if !self.has_state || self.is_seeded() {
                self.dirty = true;
            }
        }
    }

    /// The subscribe failure the updates report while no registry state
    /// arrived.
    pub fn subscribe_failure(&self) -> Option<&crate::pending::RegistryFailure> {
        self.subscribe_failure.as_ref()
    }
}
