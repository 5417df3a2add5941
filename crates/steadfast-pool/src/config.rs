//! The pool's knobs.

use std::time::Duration;

/// How a [`ClientPool`](crate::ClientPool) reaps and drains its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// How often the idle scan runs (default 60 s; a zero value is raised
    /// to [`MIN_SCAN_INTERVAL`]).
    pub scan_interval: Duration,
    /// A client unused for this long, with nothing in flight, is reaped
    /// (default 180 s; `Duration::ZERO` disables reaping).
    pub idle_timeout: Duration,
    /// A draining client (its endpoint was dropped) with calls still in
    /// flight is force-closed this long after draining began (default 30 s).
    pub drain_timeout: Duration,
    /// Bound on one client's close (default 5 s); a close that takes longer
    /// counts as a close failure.
    pub close_timeout: Duration,
}

/// The smallest scan interval the reaper uses.
pub const MIN_SCAN_INTERVAL: Duration = Duration::from_millis(10);

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            scan_interval: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(180),
            drain_timeout: Duration::from_secs(30),
            close_timeout: Duration::from_secs(5),
        }
    }
}
