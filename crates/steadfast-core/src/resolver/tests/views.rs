//! Reassembling the resolver's updates into the full URL list of each key,
//! as a directory holds it, so tests assert on what callers would see.

use std::collections::BTreeMap;

use crate::change::{Change, Version};
use crate::update::DirectoryUpdate;
use crate::url::Endpoint;

/// The URLs of each key, built from full updates and patches.
#[derive(Debug, Default)]
pub(crate) struct Views {
    keys: BTreeMap<String, (Option<Version>, BTreeMap<String, Endpoint>)>,
}

impl Views {
    /// Applies `u` (a patch must follow the update held) and returns it
    /// as the full update of its key.
    pub(crate) fn absorb(&mut self, u: DirectoryUpdate) -> DirectoryUpdate {
        let entry = self.keys.entry(u.subscribe_key.clone()).or_default();
        assert!(
            entry.0.is_none_or(|held| held < u.version()),
            "each update comes after the one held: {:?} then {}",
            entry.0,
            u.version()
        );
        match &u.change {
            Change::Reset { items, .. } => {
                entry.1 = items
                    .iter()
                    .map(|e| (e.instance_id().to_string(), e.clone()))
                    .collect();
            }
            Change::Delta {
                base,
                upserts,
                removals,
                ..
            } => {
                assert_eq!(entry.0, Some(*base), "a patch on top of the update held");
                for id in removals {
                    entry.1.remove(id.as_ref());
                }
                for e in upserts {
                    entry.1.insert(e.instance_id().to_string(), e.clone());
                }
            }
        }
        entry.0 = Some(u.version());
        DirectoryUpdate {
            change: Change::Reset {
                version: u.version(),
                items: entry.1.values().cloned().collect(),
            },
            ..u
        }
    }
}

/// The URLs of a full update.
pub(crate) fn urls(u: &DirectoryUpdate) -> &[Endpoint] {
    match &u.change {
        Change::Reset { items, .. } => items,
        Change::Delta { .. } => panic!("a full update expected, got {u:?}"),
    }
}

/// A Reset feed at version `version` of owned records (decoded here).
pub(crate) fn reset_feed(
    version: u64,
    instances: &[crate::model::ServiceInstance],
) -> crate::subscription::Feed {
    let mut revs = crate::instance::RevisionInterner::default();
    crate::change::Change::Reset {
        version: crate::change::Version::at(version),
        items: instances
            .iter()
            .map(|i| std::sync::Arc::new(crate::instance::Instance::decode(i, &mut revs)))
            .collect(),
    }
}

/// A delta feed from version `base` to `version` of owned records
/// (decoded here) and removed ids.
pub(crate) fn delta(
    base: u64,
    version: u64,
    upserts: &[crate::model::ServiceInstance],
    removals: &[&str],
) -> crate::subscription::Feed {
    let mut revs = crate::instance::RevisionInterner::default();
    crate::change::Change::Delta {
        base: crate::change::Version::at(base),
        version: crate::change::Version::at(version),
        upserts: upserts
            .iter()
            .map(|i| std::sync::Arc::new(crate::instance::Instance::decode(i, &mut revs)))
            .collect(),
        removals: removals.iter().map(|r| std::sync::Arc::from(*r)).collect(),
    }
}

/// `feed` through the machine's entry point, with the registry's
/// staleness and hold.
pub(crate) fn deliver(
    m: &mut crate::resolver::ResolverMachine,
    feed: crate::subscription::Feed,
    stale_since: Option<std::time::Instant>,
    held: Option<crate::update::HeldInstances>,
    now: std::time::Instant,
) -> Vec<crate::resolver::ResolverAction> {
    m.on_delivery(
        crate::subscription::Delivery {
            feed,
            held,
            stale_since,
        },
        now,
    )
}
