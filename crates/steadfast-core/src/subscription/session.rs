//! Session loss and subscribe-failure accessors of the
//! [`SubscriptionMachine`].

use std::time::{Duration, Instant};

use super::{SubscriptionAction, SubscriptionMachine};
use crate::jitter::uniform_delay;
use crate::pending::RegistryFailure;

impl SubscriptionMachine {
    /// Spreads the re-subscriptions after a session loss over `spread`
    /// (default [`crate::registrar::DEFAULT_SESSION_SPREAD`]).
    pub fn with_session_spread(mut self, spread: Duration) -> Self {
        self.set_session_spread(spread);
        self
    }

    /// Sets the window a session loss spreads the re-subscriptions over.
    pub fn set_session_spread(&mut self, spread: Duration) {
        self.session_spread = spread;
    }

    /// While opening `app`'s watch keeps failing: since when, attempts and
    /// the last error.
    pub fn subscribe_failure(&self, app: &str) -> Option<RegistryFailure> {
        self.apps.get(app).and_then(|a| a.failing.clone())
    }

    /// The registry lost this client's session: every subscription is
    /// marked stale and re-established, each at a uniform random delay
    /// within the spread window (not all at once); each re-open starts
    /// with a full re-read, so changes missed meanwhile are applied.
    pub fn session_lost(&mut self, now: Instant) -> Vec<SubscriptionAction> {
        let spread = self.session_spread;
        let mut delays = Vec::with_capacity(self.apps.len());
        for _ in 0..self.apps.len() {
            delays.push(uniform_delay(spread, &mut self.rng));
        }
        let mut delays = delays.into_iter();
        self.each_app(now, |sub, ctx| {
            let delay = delays.next().unwrap_or_default();
            sub.session_lost(delay, now, ctx);
        })
    }
}
