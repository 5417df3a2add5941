//! Last-known-good: an instance still in the snapshot whose new revision is
//! unresolved keeps serving the URLs of the revision it served before, while
//! that metadata is known. Built per snapshot, and only when some revision
//! is unresolved, so a fully resolved app pays nothing for it.

use std::collections::HashSet;

use rustc_hash::FxHashMap;

use super::{ResolverMachine, RevisionState};
use crate::model::ServiceInstance;

impl ResolverMachine {
    /// Last-known-good revisions for the instances of `next` whose revision
    /// is unresolved: the revision each one served in the current snapshot
    /// (directly, or itself from last-known-good), when its metadata is
    /// known. Costs nothing while every revision is resolved.
    pub(super) fn carry_last_good(&self, next: &[ServiceInstance]) -> FxHashMap<String, String> {
        let mut out = FxHashMap::default();
        let unresolved = |r: &str| {
            matches!(
                self.revisions.get(r),
                Some(RevisionState::Unresolved { .. })
            )
        };
        // `revisions` holds exactly the revisions of `next` at this point.
        let any_unresolved = self
            .revisions
            .values()
            .any(|s| matches!(s, RevisionState::Unresolved { .. }));
        if !any_unresolved {
            return out;
        }
        let Some(current) = &self.instances else {
            return out;
        };
        let served: FxHashMap<&str, &str> = current
            .iter()
            .filter_map(|i| {
                let rev = i.revision()?;
                // Metadata is only ever held for revisions that resolved.
                let eff = if self.metadata.contains_key(rev) {
                    rev
                } else {
                    self.last_good.get(&i.id)?.as_str()
                };
                Some((i.id.as_str(), eff))
            })
            .collect();
        for i in next {
            match i.revision() {
                Some(rev) if unresolved(rev) => {}
                _ => continue,
            }
            if let Some(prev) = served.get(i.id.as_str()) {
                if self.metadata.contains_key(*prev) {
                    out.insert(i.id.clone(), prev.to_string());
                }
            }
        }
        out
    }

    /// Drops metadata no resolved revision and no last-known-good entry uses.
    pub(super) fn forget_unused_metadata(&mut self) {
        let revisions = &self.revisions;
        let in_use: HashSet<&str> = self.last_good.values().map(String::as_str).collect();
        self.metadata.retain(|rev, _| {
            matches!(revisions.get(rev), Some(RevisionState::Resolved))
                || in_use.contains(rev.as_str())
        });
    }
}
