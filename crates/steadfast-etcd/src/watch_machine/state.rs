//! The state half of [`WatchMachine`]: the instances held (decoded once,
//! shared by `Arc`, revisions interned), their version, and the views of
//! them (a Reset, owned records for tests).

use std::collections::BTreeMap;
use std::sync::Arc;

use steadfast_core::{Instance, RegistryEvent, ServiceInstance, Version};

use super::WatchMachine;
use crate::stats::EtcdStats;
use crate::wire::{KeyValue, RangeResponse};

impl WatchMachine {
    /// The current instance set as owned records, ordered by id (for
    /// tests and diagnostics; the watch path yields events).
    pub fn snapshot(&self) -> Vec<ServiceInstance> {
        self.instances
            .values()
            .map(|i| i.to_record(&self.app))
            .collect()
    }

    /// The current instances, shared, ordered by id.
    pub fn instances(&self) -> Vec<Arc<Instance>> {
        self.instances.values().cloned().collect()
    }

    /// The version of the state held (`None` before the first range).
    pub fn version(&self) -> Option<Version> {
        (self.cluster_id.is_some()).then(|| self.version_at(self.last_revision))
    }

    /// The state held as a Reset (`None` before the first range).
    pub fn reset(&self) -> Option<RegistryEvent> {
        self.version().map(|version| RegistryEvent::Reset {
            version,
            items: self.instances(),
        })
    }

    pub(super) fn version_at(&self, rev: i64) -> Version {
        Version {
            epoch: self.epoch,
            revision: u64::try_from(rev).unwrap_or(0),
            step: 0,
        }
    }

    /// Decodes every valid record of `r` once, keeping the `Arc` of an
    /// instance held unchanged; invalid ones are counted and skipped.
    pub(super) fn decode_all(&mut self, r: &RangeResponse) -> BTreeMap<Arc<str>, Arc<Instance>> {
        let mut fresh = BTreeMap::new();
        for kv in &r.kvs {
            if let Some(i) = self.decode(kv) {
                let i = match self.instances.get(i.id()) {
                    Some(old) if **old == *i => old.clone(),
                    _ => i,
                };
                fresh.insert(i.id_arc().clone(), i);
            }
        }
        fresh
    }

    /// Forgets interned revisions nobody holds: always on a Reset, else
    /// once their number doubled (so a delta costs no pass over them).
    pub(super) fn trim_revisions(&mut self, reset: bool) {
        if reset || self.revisions.len() > self.trimmed_at.saturating_mul(2).saturating_add(16) {
            self.revisions.trim();
            self.trimmed_at = self.revisions.len();
        }
    }

    /// Decodes one record once; an invalid one is counted and skipped.
    pub(super) fn decode(&mut self, kv: &KeyValue) -> Option<Arc<Instance>> {
        match self
            .layout
            .decode_shared(&self.app, kv, &mut self.revisions)
        {
            Ok(instance) => Some(Arc::new(instance)),
            Err(e) => {
                EtcdStats::bump(&self.stats.invalid_records);
                tracing::warn!(app = %self.app, error = %e, "skipping invalid etcd record");
                None
            }
        }
    }
}
