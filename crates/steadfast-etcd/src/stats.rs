//! Counters of the etcd backend, shared by every watch and keepalive task of
//! one [`crate::EtcdRegistry`] (and its clones); the prober counters are the
//! client's.

use std::sync::atomic::{AtomicU64, Ordering};

steadfast_core::counter_table! {
    /// Live counters (atomics; read them with [`EtcdStats::snapshot`]),
    /// declared once in the table of [`ETCD_COUNTERS`].
    pub struct EtcdStats {}
    /// A copy of the counters at one moment (named apart from the engine's
    /// `EngineStatsSnapshot`).
    pub struct EtcdStatsSnapshot;
    /// Every etcd backend counter, in snapshot order: the one table the
    /// snapshot and the Prometheus export are read from.
    pub const ETCD_COUNTERS;
    rows {
        /// Records skipped because they were not valid provider records.
        counter invalid_records: "etcd_invalid_records", "Records skipped: not valid provider records";
        /// Full range resyncs after a compaction, a cancel, a cluster change
        /// or a wiped data dir (the initial range is not counted).
        counter resyncs: "etcd_resyncs", "Full range resyncs (compaction, cancel, cluster change, wiped data)";
        /// Interruptions of a watch (stream ended or broke, an open failed, a
        /// liveness loss), each followed by a resume.
        counter resumes: "etcd_watch_resumes", "Watch interruptions, each followed by a resume";
        /// Full re-reads of an app on resuming after an outage (a clean
        /// reconnect resumes from the last revision instead).
        counter rereads: "etcd_rereads", "Full re-reads of an app on resuming after an outage";
        /// Differences (instances added, removed or changed) a re-read or
        /// resync found against the state the watch had delivered:
        /// notifications the watch missed, e.g. writes to a wiped store past
        /// its old revision.
        counter missed_notifications: "etcd_missed_notifications", "Differences a re-read or resync found against the watched state";
        /// Watch endpoints declared dead by the liveness probe (frozen,
        /// leaderless, black-holed).
        counter liveness_failures: "etcd_liveness_failures", "Watch endpoints declared dead by the liveness probe";
        /// `Err(Unavailable)` items yielded to the engine.
        counter unavailable_reports: "etcd_unavailable_reports", "Unavailable items yielded to the engine";
        /// Registrations redone by a keepalive task (lease gone or key
        /// vanished).
        counter reregistrations: "etcd_reregistrations", "Registrations redone by a keepalive task";
        /// Keepalive rounds that failed to reach etcd.
        counter keepalive_failures: "etcd_keepalive_failures", "Keepalive rounds that failed to reach etcd";
        /// Probes of the client's shared prober for "etcd answered again"
        /// that failed (counted by the prober, once per client; a registry's
        /// [`crate::EtcdRegistry::stats`] includes those of its client).
        counter health_probe_failures: "etcd_health_probe_failures", "Failed probes for etcd answering again";
        /// Probes the client's shared prober sent (liveness of live
        /// endpoints and "answered again" checks): one per endpoint and
        /// cadence, however many watches and registrations the client has.
        counter probes_sent: "etcd_probes", "Probes sent by the shared prober";
        /// Shared watch streams opened (each carries the watches of many
        /// apps).
        counter stream_opens: "etcd_stream_opens", "Shared watch streams opened";
        /// Range batches sent (each one txn of up to `range_batch_size`
        /// apps).
        counter range_batches: "etcd_range_batches", "Range batches sent";
    }
}

impl EtcdStats {
    /// Adds one to `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        Self::add(counter, 1);
    }

    /// Adds `n` to `counter` (wrapping; a u64 of events never wraps).
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
