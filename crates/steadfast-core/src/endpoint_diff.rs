//! [`EndpointDiff`]: a directory's successive snapshots as the inserts and
//! removes of a discovery stream (tower's `Change::Insert` /
//! `Change::Remove`). An endpoint's key is its instance id and its URL with
//! its incarnation (`ServiceUrl`'s `Display`): [`endpoint_key`]; a provider restart is a remove and an
//! insert (a fresh connection), a weight or health change of the same
//! incarnation is no change, and a new revision changing the service's
//! params (a method added) is a remove and an insert too. Everything it holds is one key per endpoint
//! served, so a consumer of the changes holds at most that many pending.

use std::collections::{HashMap, HashSet};

use crate::url::Endpoint;

/// The discovery key of `endpoint`: `<instance id> <url>`.
pub fn endpoint_key(endpoint: &Endpoint) -> String {
    format!("{} {endpoint}", endpoint.instance_id())
}

/// One discovery change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointChange {
    /// A new endpoint under `key`.
    Insert(String, Endpoint),
    /// The endpoint under `key` is gone.
    Remove(String),
}

/// The keys last reported, diffed against each new snapshot.
#[derive(Debug, Default)]
pub struct EndpointDiff {
    held: HashSet<String>,
}

impl EndpointDiff {
    /// Nothing reported yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The changes that take what was reported to `endpoints`: removes
    /// first (a balancer never holds both incarnations of one instance
    /// longer than it must), then inserts, each in key order.
    pub fn update<'a>(
        &mut self,
        endpoints: impl IntoIterator<Item = &'a Endpoint>,
    ) -> Vec<EndpointChange> {
        // One key per endpoint, hashed; only the changes are sorted.
        let now: HashMap<String, &Endpoint> = endpoints
            .into_iter()
            .map(|e| (endpoint_key(e), e))
            .collect();
        let mut gone: Vec<String> = self
            .held
            .iter()
            .filter(|k| !now.contains_key(k.as_str()))
            .cloned()
            .collect();
        gone.sort_unstable();
        let mut added: Vec<(String, &Endpoint)> = now
            .into_iter()
            .filter(|(k, _)| !self.held.contains(k))
            .collect();
        added.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut changes = Vec::with_capacity(gone.len() + added.len());
        for key in gone {
            self.held.remove(&key);
            changes.push(EndpointChange::Remove(key));
        }
        for (key, endpoint) in added {
            self.held.insert(key.clone());
            changes.push(EndpointChange::Insert(key, endpoint.clone()));
        }
        changes
    }

    /// Removes of everything reported (the directory closed).
    pub fn clear(&mut self) -> Vec<EndpointChange> {
        let mut gone: Vec<String> = self.held.drain().collect();
        gone.sort();
        gone.into_iter().map(EndpointChange::Remove).collect()
    }

    /// Number of endpoints reported and not removed.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is reported.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::instance::{Instance, RevisionInterner};
    use crate::model::{ServiceInfo, ServiceInstance};
    use crate::url::{ServiceEndpoint, ServiceUrl};

    fn endpoint(port: u16, weight: u32, export_ms: Option<u64>) -> Endpoint {
        let mut record = ServiceInstance::new("a", "10.0.0.1", port);
        record.weight = weight;
        if let Some(ms) = export_ms {
            record
                .metadata
                .insert(crate::EXPORT_MS_KEY.into(), ms.to_string());
            record
                .metadata
                .insert(crate::BOOT_ID_KEY.into(), format!("{ms:016x}"));
        }
        let instance = Arc::new(Instance::decode(&record, &mut RevisionInterner::default()));
        let service = ServiceEndpoint::of(&ServiceInfo::test_service());
        Arc::new(ServiceUrl::new(&instance, &service))
    }

    fn keys(changes: &[EndpointChange]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                EndpointChange::Insert(k, e) => format!("+{k}@{}", e.instance.port()),
                EndpointChange::Remove(k) => format!("-{k}"),
            })
            .collect()
    }

    #[test]
    fn inserts_then_removes_then_a_restart_is_both() {
        let mut d = EndpointDiff::new();
        let (a, b) = (endpoint(1, 100, Some(1)), endpoint(2, 100, Some(1)));
        assert_eq!(d.update([&a, &b]).len(), 2);
        assert!(d.update([&a, &b]).is_empty(), "nothing changed");
        // A weight change of the same incarnation is no change.
        assert!(d.update([&endpoint(1, 5, Some(1)), &b]).is_empty());
        // A restart of instance 1: its old incarnation goes, the new comes.
        let a2 = endpoint(1, 100, Some(2));
        let changes = d.update([&a2, &b]);
        assert_eq!(changes.len(), 2);
        assert!(matches!(changes[0], EndpointChange::Remove(_)));
        assert!(matches!(changes[1], EndpointChange::Insert(_, _)));
        assert_eq!(d.len(), 2);
        let gone = d.update([&a2]);
        assert_eq!(keys(&gone), vec![format!("-{}", endpoint_key(&b))]);
        assert_eq!(d.clear().len(), 1);
        assert!(d.is_empty());
    }
}
