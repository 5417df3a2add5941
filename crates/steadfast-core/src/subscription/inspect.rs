//! What the subscription machine can tell an operator: per watched app,
//! whether its watch is healthy, since when it is stale, and how opening it
//! fails; and when the latest event of a current watch arrived.

use std::time::Instant;

use super::SubscriptionMachine;
use crate::pending::RegistryFailure;

/// The watch of one app, as seen by [`SubscriptionMachine::inspect_watches`].
#[derive(Clone, Debug, PartialEq)]
pub struct WatchInspection {
    /// Provider app.
    pub app: String,
    /// Since when the app's state is stale (its watch is down), if it is.
    pub stale_since: Option<Instant>,
    /// While opening the watch keeps failing: since when, attempts, error.
    pub subscribe_failure: Option<RegistryFailure>,
}

impl SubscriptionMachine {
    /// Every watched app with its watch health, in app order.
    pub fn inspect_watches(&self) -> Vec<WatchInspection> {
        self.apps
            .keys()
            .map(|app| WatchInspection {
                app: app.clone(),
                stale_since: self.stale_since(app),
                subscribe_failure: self.subscribe_failure(app),
            })
            .collect()
    }

    /// When the latest event of a current watch arrived (any app).
    pub fn last_event_at(&self) -> Option<Instant> {
        self.last_event
    }
}
