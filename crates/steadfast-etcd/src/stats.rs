//! Counters of the etcd backend, shared by every watch and keepalive task of
//! one [`crate::EtcdRegistry`] (and its clones); the prober counters are the
//! client's.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters (atomics; read them with [`EtcdStats::snapshot`]).
#[derive(Debug, Default)]
pub struct EtcdStats {
    /// Records skipped because they were not valid provider records.
    pub invalid_records: AtomicU64,
    /// Full range resyncs after a compaction, a cancel, a cluster change or a
    /// wiped data dir (the initial range is not counted).
    pub resyncs: AtomicU64,
    /// Interruptions of a watch (stream ended or broke, an open failed, a
    /// liveness loss), each followed by a resume.
    pub resumes: AtomicU64,
    /// Full re-reads of an app on resuming after an outage (a clean
    /// reconnect resumes from the last revision instead).
    pub rereads: AtomicU64,
    /// Differences (instances added, removed or changed) a re-read or resync
    /// found against the state the watch had delivered: notifications the
    /// watch missed, e.g. writes to a wiped store past its old revision.
    pub missed_notifications: AtomicU64,
    /// Watch endpoints declared dead by the liveness probe (frozen,
    /// leaderless, black-holed).
    pub liveness_failures: AtomicU64,
    /// `Err(Unavailable)` items yielded to the engine.
    pub unavailable_reports: AtomicU64,
    /// Registrations redone by a keepalive task (lease gone or key vanished).
    pub reregistrations: AtomicU64,
    /// Keepalive rounds that failed to reach etcd.
    pub keepalive_failures: AtomicU64,
    /// Probes of the client's shared prober for "etcd answered again"
    /// that failed (counted by the prober, once per client; a registry's
    /// [`crate::EtcdRegistry::stats`] includes those of its client).
    pub health_probe_failures: AtomicU64,
    /// Probes the client's shared prober sent (liveness of live endpoints
    /// and "answered again" checks): one per endpoint and cadence, however
    /// many watches and registrations the client has.
    pub probes_sent: AtomicU64,
    /// Shared watch streams opened (each carries the watches of many apps).
    pub stream_opens: AtomicU64,
    /// Range batches sent (each one txn of up to `range_batch_size` apps).
    pub range_batches: AtomicU64,
}

/// A copy of the counters at one moment (named apart from the engine's
/// `EngineStatsSnapshot`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EtcdStatsSnapshot {
    /// See [`EtcdStats::invalid_records`].
    pub invalid_records: u64,
    /// See [`EtcdStats::resyncs`].
    pub resyncs: u64,
    /// See [`EtcdStats::resumes`].
    pub resumes: u64,
    /// See [`EtcdStats::rereads`].
    pub rereads: u64,
    /// See [`EtcdStats::missed_notifications`].
    pub missed_notifications: u64,
    /// See [`EtcdStats::liveness_failures`].
    pub liveness_failures: u64,
    /// See [`EtcdStats::unavailable_reports`].
    pub unavailable_reports: u64,
    /// See [`EtcdStats::reregistrations`].
    pub reregistrations: u64,
    /// See [`EtcdStats::keepalive_failures`].
    pub keepalive_failures: u64,
    /// See [`EtcdStats::health_probe_failures`].
    pub health_probe_failures: u64,
    /// See [`EtcdStats::probes_sent`].
    pub probes_sent: u64,
    /// See [`EtcdStats::stream_opens`].
    pub stream_opens: u64,
    /// See [`EtcdStats::range_batches`].
    pub range_batches: u64,
}

impl EtcdStats {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        Self::add(counter, 1);
    }

    /// Adds `n` to `counter` (wrapping; a u64 of events never wraps).
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> EtcdStatsSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EtcdStatsSnapshot {
            invalid_records: r(&self.invalid_records),
            resyncs: r(&self.resyncs),
            resumes: r(&self.resumes),
            rereads: r(&self.rereads),
            missed_notifications: r(&self.missed_notifications),
            liveness_failures: r(&self.liveness_failures),
            unavailable_reports: r(&self.unavailable_reports),
            reregistrations: r(&self.reregistrations),
            keepalive_failures: r(&self.keepalive_failures),
            health_probe_failures: r(&self.health_probe_failures),
            probes_sent: r(&self.probes_sent),
            stream_opens: r(&self.stream_opens),
            range_batches: r(&self.range_batches),
        }
    }
}
