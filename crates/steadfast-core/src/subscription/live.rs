//! The live watch state of a subscribed app, for one-shot queries
//! (`Engine::instances`): a subscribed app answers from what its watch
//! holds, with no registry call.

use std::sync::Arc;
use std::time::Instant;

use super::SubscriptionMachine;
use crate::event::Version;
use crate::instance::Instance;

/// What the watch of a subscribed app holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveState {
    /// Every instance subscribers see (instances held after a mass expiry
    /// included, as the app's directories serve them).
    pub instances: Vec<Arc<Instance>>,
    /// Version of the registry state held.
    pub version: Version,
    /// Since when the state is stale (the watch is unhealthy), if it is.
    pub stale_since: Option<Instant>,
}

impl SubscriptionMachine {
    /// The state the watch of `app` holds: `None` when `app` is not
    /// subscribed or its watch has not delivered a first state yet (the
    /// caller then asks the registry).
    pub fn live_state(&self, app: &str) -> Option<LiveState> {
        let sub = self.apps.get(app)?;
        let version = sub.real.version()?;
        Some(LiveState {
            instances: sub.merged(),
            version,
            stale_since: sub.stale_since(),
        })
    }

    /// The registry's state of `app` as the machine holds it (held
    /// instances not included), in registry order, with its version;
    /// `None` when `app` is not subscribed or nothing arrived yet.
    pub fn registry_state(&self, app: &str) -> Option<crate::event::Listing> {
        let sub = self.apps.get(app)?;
        Some(crate::event::Listing {
            version: sub.real.version()?,
            instances: sub.real.iter().cloned().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{insts, reset, A};
    use super::super::{SubscriptionAction, SubscriptionConfig, SubscriptionMachine};
    use crate::error::RegistryError;
    use crate::event::Version;

    #[test]
    fn live_state_is_the_watched_state_with_its_stale_mark() {
        let t0 = std::time::Instant::now();
        let mut m = SubscriptionMachine::new(SubscriptionConfig::default(), 1);
        assert_eq!(m.live_state(A), None, "not subscribed");
        let out = m.subscribe(A, 1, t0);
        let token = out
            .iter()
            .find_map(|a| match a {
                SubscriptionAction::OpenWatch { token, .. } => Some(*token),
                _ => None,
            })
            .expect("opens the watch");
        m.on_watch_opened(A, token, Ok(()), t0);
        assert_eq!(m.live_state(A), None, "no first state yet");
        m.on_stream_item(A, token, Ok(reset(&insts(&[1, 2]), 4)), t0);
        let live = m.live_state(A).expect("watched");
        assert_eq!((live.instances.len(), live.version), (2, Version::at(4)));
        assert_eq!(live.stale_since, None);
        let t1 = t0 + Duration::from_secs(1);
        m.on_stream_item(A, token, Err(RegistryError::Timeout), t1);
        let live = m.live_state(A).expect("kept while stale");
        assert_eq!((live.instances.len(), live.stale_since), (2, Some(t1)));
    }
}
