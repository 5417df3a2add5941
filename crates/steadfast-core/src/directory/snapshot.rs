//! Which of a directory's apps are served from a disk snapshot, for the
//! ready status, and the failing subscription that keeps them so.

use super::DirectoryMachine;
use crate::freshness::{Freshness, Source};
use crate::pending::RegistryFailure;
use crate::ServedFromSnapshot;

impl DirectoryMachine {
    /// The apps whose endpoints come from a disk snapshot, with the age of
    /// the oldest snapshot (`None`: none does).
    pub(super) fn served_from_snapshot(&self) -> Option<ServedFromSnapshot> {
        let mut apps = Vec::new();
        let mut age = std::time::Duration::ZERO;
        let mut subscribe: Option<&RegistryFailure> = None;
        for (app, v) in &self.apps {
            let Some(origin) = v.as_ref().and_then(|v| v.snapshot.as_ref()) else {
                continue;
            };
            if v.as_ref().is_some_and(|v| v.set.is_empty()) {
                continue;
            }
            apps.push(app.clone());
            age = age.max(origin.age);
            if let Some(f) = &origin.subscribe {
                // The most attempts wins; the first app on a tie.
                match subscribe {
                    Some(s) if f.attempts <= s.attempts => {}
                    _ => subscribe = Some(f),
                }
            }
        }
        (!apps.is_empty()).then(|| ServedFromSnapshot {
            apps,
            freshness: Freshness::Stale { age },
            source: Source::Snapshot,
            subscribe: subscribe.cloned(),
        })
    }
}
