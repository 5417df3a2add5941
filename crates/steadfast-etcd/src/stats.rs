//! Counters of the etcd backend, shared by every watch and keepalive task of
//! one [`crate::EtcdRegistry`] (and its clones).

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters (atomics; read them with [`EtcdStats::snapshot`]).
#[derive(Debug, Default)]
pub struct EtcdStats {
    /// Records skipped because they were not valid provider records.
    pub invalid_records: AtomicU64,
    /// Full range resyncs after a compaction, a cancel, a cluster change or a
    /// wiped data dir (the initial range is not counted).
    pub resyncs: AtomicU64,
    /// Watches resumed from `last revision + 1` after the stream broke.
    pub resumes: AtomicU64,
    /// `Err(Unavailable)` items yielded to the engine.
    pub unavailable_reports: AtomicU64,
    /// Registrations redone by a keepalive task (lease gone or key vanished).
    pub reregistrations: AtomicU64,
    /// Keepalive rounds that failed to reach etcd.
    pub keepalive_failures: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// See [`EtcdStats::invalid_records`].
    pub invalid_records: u64,
    /// See [`EtcdStats::resyncs`].
    pub resyncs: u64,
    /// See [`EtcdStats::resumes`].
    pub resumes: u64,
    /// See [`EtcdStats::unavailable_reports`].
    pub unavailable_reports: u64,
    /// See [`EtcdStats::reregistrations`].
    pub reregistrations: u64,
    /// See [`EtcdStats::keepalive_failures`].
    pub keepalive_failures: u64,
}

impl EtcdStats {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            invalid_records: r(&self.invalid_records),
            resyncs: r(&self.resyncs),
            resumes: r(&self.resumes),
            unavailable_reports: r(&self.unavailable_reports),
            reregistrations: r(&self.reregistrations),
            keepalive_failures: r(&self.keepalive_failures),
        }
    }
}
