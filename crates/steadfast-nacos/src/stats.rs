//! Counters of the Nacos backend, declared once (core's `counter_table!`).

use std::sync::atomic::{AtomicU64, Ordering};

steadfast_core::counter_table! {
    /// Live counters (read them with [`NacosStats::snapshot`]).
    pub struct NacosStats {}
    /// A copy of the counters at one moment.
    pub struct NacosStatsSnapshot;
    /// Every Nacos backend counter: the one table the snapshot and the
    /// Prometheus export are read from.
    pub const NACOS_COUNTERS;
    rows {
        /// Connections made (the first one included).
        counter connects: "nacos_connects", "Connections made to a Nacos server";
        /// Connection attempts that failed.
        counter connect_failures: "nacos_connect_failures", "Connection attempts that failed";
        /// Connections lost (stream ended, reset, health checks failed).
        counter connection_losses: "nacos_connection_losses", "Connections lost";
        /// Health checks that failed.
        counter health_check_failures: "nacos_health_check_failures", "Health checks that failed";
        /// Pushed service lists received.
        counter pushes: "nacos_pushes", "Pushed service lists received";
        /// Full lists of subscribed services read by the periodic resync.
        counter resyncs: "nacos_resyncs", "Periodic full lists of subscribed services";
        /// Differences a periodic full list found against the pushed state:
        /// pushes the client missed.
        counter missed_notifications: "nacos_missed_notifications", "Differences a periodic full list found against the pushed state";
        /// Instance records skipped because they were not valid.
        counter invalid_records: "nacos_invalid_records", "Instance records skipped: not valid";
        /// Registrations sent again after a reconnect.
        counter redone_registrations: "nacos_redone_registrations", "Registrations redone after a reconnect";
        /// Subscriptions sent again after a reconnect.
        counter redone_subscriptions: "nacos_redone_subscriptions", "Subscriptions redone after a reconnect";
        /// `Err(Unavailable)` items yielded to the engine.
        counter unavailable_reports: "nacos_unavailable_reports", "Unavailable items yielded to the engine";
    }
}

impl NacosStats {
    /// Adds one to `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to `counter`.
    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}
