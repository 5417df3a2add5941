//! The consistency checks of [`WatchMachine`]: what a re-read found that
//! the watch missed, messages etcd cannot have sent, and headers showing
//! another store than the one the state came from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use steadfast_core::same;
use steadfast_core::Instance;

use super::{plausible, WatchMachine};
use crate::stats::EtcdStats;
use crate::wire::{ResponseHeader, WatchResponse};

impl WatchMachine {
    /// Counts and logs how a non-initial range (decoded as `fresh`)
    /// differs from the state held.
    pub(super) fn count_reread(
        &mut self,
        h: &ResponseHeader,
        fresh: &BTreeMap<Arc<str>, Arc<Instance>>,
    ) {
        if self.resync_pending {
            // Counted as a resync already.
        } else if let Some(why) = self.store_changed(h) {
            EtcdStats::bump(&self.stats.resyncs);
            tracing::warn!(app = %self.app, why, "etcd store changed during the outage");
        } else {
            EtcdStats::bump(&self.stats.rereads);
        }
        let changed = fresh
            .iter()
            .filter(|(k, v)| self.instances.get(*k).is_none_or(|old| !same(old, v)))
            .count();
        let removed = self
            .instances
            .keys()
            .filter(|k| !fresh.contains_key(*k))
            .count();
        let missed = u64::try_from(changed.saturating_add(removed)).unwrap_or(u64::MAX);
        if missed > 0 {
            EtcdStats::add(&self.stats.missed_notifications, missed);
            tracing::warn!(app = %self.app, missed, changed, removed,
                "etcd re-read found changes the watch did not deliver");
        }
    }

    /// Why `m` cannot come from etcd, if it cannot.
    pub(super) fn implausible(&self, m: &WatchResponse) -> Option<String> {
        let head = m.header.revision;
        if (m.created || m.is_progress()) && !plausible(head) {
            return Some(format!("header revision {head}"));
        }
        m.events
            .iter()
            .map(|ev| ev.kv.mod_revision)
            .find(|&r| !plausible(r) || (head > 0 && r > head))
            .map(|r| format!("event revision {r} (header {head})"))
    }

    /// Why the store answering is not the one the state came from, if it
    /// is not.
    pub(super) fn store_changed(&self, h: &ResponseHeader) -> Option<&'static str> {
        if self.cluster_id.is_some_and(|c| c != h.cluster_id) {
            Some("cluster id changed")
        } else if h.revision < self.last_revision {
            Some("store revision went backwards")
        } else if h.raft_term != 0 && h.raft_term < self.raft_term {
            Some("raft term went backwards")
        } else {
            None
        }
    }

    /// Why a probe sent at `sent` that answered `h` shows another store
    /// than the one the state came from, if it does (see the module doc:
    /// the revision counts only against one held before `sent`).
    pub(super) fn probe_says_changed(
        &self,
        h: &ResponseHeader,
        sent: Instant,
    ) -> Option<&'static str> {
        let floor = self
            .probe_floor
            .filter(|(at, _)| *at <= sent)
            .map(|(_, rev)| rev);
        if self.cluster_id.is_some_and(|c| c != h.cluster_id) {
            Some("cluster id changed")
        } else if floor.is_some_and(|rev| h.revision < rev) {
            Some("store revision went backwards")
        } else if h.raft_term != 0 && h.raft_term < self.raft_term {
            Some("raft term went backwards")
        } else {
            None
        }
    }
}
