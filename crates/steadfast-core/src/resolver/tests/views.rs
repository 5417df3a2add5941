//! Reassembling the resolver's updates into the full URL list of each key,
//! as a directory holds it, so tests assert on what callers would see.

use std::collections::BTreeMap;

use crate::update::{DirectoryUpdate, UrlChange};
use crate::url::Endpoint;

/// The URLs of each key, built from full updates and patches.
#[derive(Debug, Default)]
pub(crate) struct Views {
    keys: BTreeMap<String, (u64, BTreeMap<String, Endpoint>)>,
}

impl Views {
    /// Applies `u` (a patch must follow the update held) and returns it
    /// as the full update of its key.
    pub(crate) fn absorb(&mut self, u: DirectoryUpdate) -> DirectoryUpdate {
        let entry = self.keys.entry(u.subscribe_key.clone()).or_default();
        match &u.change {
            UrlChange::Full(all) => {
                entry.1 = all
                    .iter()
                    .map(|e| (e.instance_id().to_string(), e.clone()))
                    .collect();
            }
            UrlChange::Patch {
                base,
                upserts,
                removals,
            } => {
                assert_eq!(entry.0, *base, "a patch on top of the update held");
                for id in removals {
                    entry.1.remove(id.as_ref());
                }
                for e in upserts {
                    entry.1.insert(e.instance_id().to_string(), e.clone());
                }
            }
        }
        entry.0 = u.generation;
        DirectoryUpdate {
            change: UrlChange::Full(entry.1.values().cloned().collect()),
            ..u
        }
    }
}

/// The URLs of a full update.
pub(crate) fn urls(u: &DirectoryUpdate) -> &[Endpoint] {
    match &u.change {
        UrlChange::Full(all) => all,
        UrlChange::Patch { .. } => panic!("a full update expected, got {u:?}"),
    }
}

/// A Reset feed of owned records (decoded here).
pub(crate) fn reset_feed(instances: &[crate::model::ServiceInstance]) -> crate::subscription::Feed {
    let mut revs = crate::instance::RevisionInterner::default();
    crate::subscription::Feed::Reset(
        instances
            .iter()
            .map(|i| std::sync::Arc::new(crate::instance::Instance::decode(i, &mut revs)))
            .collect(),
    )
}
