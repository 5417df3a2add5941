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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::subscription::{SubscriptionConfig, SubscriptionMachine};

    #[test]
    fn watches_are_listed_per_app_and_no_event_means_none() {
        let t0 = Instant::now();
        let mut m = SubscriptionMachine::new(SubscriptionConfig::default(), 1);
        assert!(m.inspect_watches().is_empty());
        let _ = m.subscribe("b", 1, t0);
        let _ = m.subscribe("a", 2, t0 + Duration::from_secs(1));
        let w = m.inspect_watches();
        assert_eq!(
            w.iter().map(|w| w.app.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(w
            .iter()
            .all(|w| w.stale_since.is_none() && w.subscribe_failure.is_none()));
        assert_eq!(m.last_event_at(), None);
    }
}
