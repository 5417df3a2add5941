//! Tunables of the subscription machine, with their defaults.

use std::time::Duration;

use crate::backoff::BackoffPolicy;
use crate::recover::RecoverPolicy;

/// Largest fraction the periodic resync interval is moved by at random
/// (0.2: each app resyncs after 80-120 % of the interval).
pub const RECONCILE_JITTER: f64 = 0.2;

/// Tunables of the subscription machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SubscriptionConfig {
    /// Re-subscribe schedule of failed or ended watches, with the probe
    /// cadence while the registry is down (default: 1 s doubling to 30 s,
    /// +0-25 %, one probe per engine every 1 s while down).
    pub recover: RecoverPolicy,
    /// Periodic full re-read of every subscribed app (default 5 min,
    /// jittered; zero: only on resume after an outage).
    pub reconcile_interval: Duration,
    /// How long instances of a mass expiry right after a registry recovery
    /// are held (default 3 s; zero: never held).
    pub mass_removal_grace: Duration,
    /// Deadline of every registry call (`watch` open, `list`) (default 5 s).
    pub call_timeout: Duration,
}

/// Default probe cadence of a registry that is down: one cheap `list` per
/// engine (not per app) every second, jittered by the backoff's jitter.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

impl Default for SubscriptionConfig {
    fn default() -> Self {
        Self {
            recover: RecoverPolicy::new(BackoffPolicy::default())
                .with_probe(DEFAULT_PROBE_INTERVAL),
            reconcile_interval: Duration::from_secs(300),
            mass_removal_grace: Duration::from_secs(3),
            call_timeout: Duration::from_secs(5),
        }
    }
}
