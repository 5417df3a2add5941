//! Apps that come and go on [`DirectoryMachine`]: a reference without apps
//! follows its interface -> app mapping (`crate::mapping`), so its directory
//! gains an app when the mapping lists it and loses it (with its endpoints)
//! when the mapping stops listing it. While no app is known the status says
//! why: [`EmptyReason::Pending`] naming the failing mapping read, or
//! [`EmptyReason::NoProviderApp`] when the mapping, read and healthy, lists
//! none.

use std::sync::Arc;

use super::{DirectoryMachine, DirectoryStatus, EmptyReason};
use crate::endpoint_set::DirectorySnapshot;
use crate::pending::{Pending, RegistryFailure};

/// What a mapping-following directory knows of its mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct MappingView {
    /// `Some` until the mapping was read and while its read fails.
    pending: Option<Pending>,
}

impl DirectoryMachine {
    /// A directory for `subscribe_key` whose apps follow the interface's
    /// mapping: none at first, the status pending on the mapping.
    pub fn following_mapping(subscribe_key: impl Into<String>, seed: u64) -> Self {
        let mut m = Self::new(subscribe_key, &[], seed);
        m.mapping = Some(MappingView {
            pending: Some(Pending::waiting()),
        });
        drop(m.republish());
        m
    }

    /// Whether the apps follow a mapping.
    pub fn follows_mapping(&self) -> bool {
        self.mapping.is_some()
    }

    /// The apps served now, sorted.
    pub fn apps(&self) -> impl Iterator<Item = &str> {
        self.apps.keys().map(String::as_str)
    }

    /// Adds `app` (no update from it yet). `None` when it was there
    /// already; otherwise the replaced snapshot (the status changed).
    pub fn add_app(&mut self, app: &str) -> Option<Arc<DirectorySnapshot>> {
        if self.apps.contains_key(app) {
            return None;
        }
        self.apps.insert(app.to_string(), None);
        Some(self.republish())
    }

    /// Removes `app` with its endpoints and tombstones. `None` when it was
    /// not there; otherwise the replaced snapshot.
    pub fn remove_app(&mut self, app: &str) -> Option<Arc<DirectorySnapshot>> {
        self.apps.remove(app)?;
        self.asks.remove(app);
        self.carried.remove(app);
        self.answered(app);
        Some(self.republish())
    }

    /// What the mapping says while no app is known (see
    /// `MappingMachine::pending`). `None` when nothing changed (or the
    /// directory does not follow a mapping); otherwise the replaced
    /// snapshot.
    pub fn set_mapping_pending(
        &mut self,
        pending: Option<Pending>,
    ) -> Option<Arc<DirectorySnapshot>> {
        let view = self.mapping.as_mut()?;
        if view.pending == pending {
            return None;
        }
        view.pending = pending;
        Some(self.republish())
    }

    /// The failing mapping read of a mapping-following directory, shown
    /// while its apps last known are served.
    pub(super) fn mapping_failure(&self) -> Option<RegistryFailure> {
        self.mapping.as_ref()?.pending.as_ref()?.mapping.clone()
    }

    /// The status while a mapping-following directory has no app.
    pub(super) fn mapping_status(&self) -> Option<DirectoryStatus> {
        let view = self.mapping.as_ref()?;
        if !self.apps.is_empty() {
            return None;
        }
        Some(DirectoryStatus::Empty(match &view.pending {
            Some(p) => EmptyReason::Pending(p.clone()),
            None => EmptyReason::NoProviderApp,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::error::RegistryError;
    use crate::pending::RegistryFailure;
    use crate::update::{DirectoryUpdate, UpdateState};

    fn failing() -> Pending {
        thread_local!(static T0: Instant = Instant::now());
        Pending {
            subscribe: None,
            mapping: Some(RegistryFailure {
                since: T0.with(|t| *t),
                attempts: 2,
                last_error: RegistryError::Unavailable("down".into()),
            }),
        }
    }

    #[test]
    fn the_status_follows_the_mapping_while_no_app_is_known() {
        let mut d = DirectoryMachine::following_mapping("a.B:tri", 1);
        assert!(d.follows_mapping());
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::Pending(Pending::waiting()))
        );
        assert!(d.set_mapping_pending(Some(failing())).is_some());
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::Pending(failing()))
        );
        assert!(
            d.set_mapping_pending(Some(failing())).is_none(),
            "no change"
        );
        d.set_mapping_pending(None);
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::NoProviderApp)
        );
        assert!(d.status().to_string().contains("names no provider app"));
    }

    #[test]
    fn apps_come_with_their_updates_and_go_with_their_endpoints() {
        let mut d = DirectoryMachine::following_mapping("a.B:tri", 1);
        d.set_mapping_pending(None);
        assert!(d.add_app("x").is_some());
        assert!(d.add_app("x").is_none());
        assert_eq!(d.apps().collect::<Vec<_>>(), vec!["x"]);
        // Known but silent: waiting on its subscription.
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::Pending(Pending::waiting()))
        );
        let update = DirectoryUpdate {
            app: "x".into(),
            subscribe_key: "a.B:tri".into(),
            change: crate::change::Change::Reset {
                version: crate::change::Version::at(1),
                items: Vec::new(),
            },
            state: UpdateState::Resolved,
            stale_since: None,
            held: None,
            closing: Vec::new(),
            snapshot: None,
        };
        let now = std::time::Instant::now();
        assert!(d
            .apply_at(update, now, std::time::Duration::from_secs(30))
            .0
            .applied());
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::NoMatchingService)
        );
        assert!(d.remove_app("x").is_some());
        assert!(d.remove_app("x").is_none());
        assert_eq!(d.version_of("x"), None);
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::NoProviderApp)
        );
        let fixed = DirectoryMachine::new("a.B:tri", &["x".to_string()], 1);
        assert!(!fixed.follows_mapping());
    }
}
