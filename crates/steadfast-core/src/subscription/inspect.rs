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
    /// Since when a delta that did not follow the state held waits for the
    /// re-read it asked for, if one does.
    pub gap_since: Option<Instant>,
    /// Re-reads asked for after deltas that did not follow, so far.
    pub resets_asked: u64,
    /// Version of the registry state held (`None`: nothing yet).
    pub version: Option<crate::change::Version>,
}

impl SubscriptionMachine {
    /// Every watched app with its watch health, in app order.
    pub fn inspect_watches(&self) -> Vec<WatchInspection> {
        self.apps
            .iter()
            .map(|(app, sub)| WatchInspection {
                app: app.clone(),
                stale_since: sub.stale_since(),
                subscribe_failure: sub.failing.clone(),
                gap_since: sub.ask.pending_since(),
                resets_asked: sub.ask.asks(),
                version: sub.real.version(),
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
