//! The registry's state: per app, the decoded instances in registration
//! order by id (an [`InstanceSet`]: each [`Instance`] decoded once, at put,
//! and shared by `Arc` with every event and every consumer), the version of
//! the app's latest change, the live watches, and one version counter for
//! the whole registry.
//!
//! A change costs O(1) plus its notification: a delta carries only the
//! changed instance, on top of the version of the app's previous change
//! (notified or not, so a watcher that missed a notification sees the gap),
//! and nothing copies an app's set. Only
//! [`crate::MemoryRegistry::instances`] rebuilds the owned records of a
//! whole app, on demand.

use std::collections::HashMap;
use std::sync::Arc;

use steadfast_core::{
    Instance, InstanceSet, Listing, RegistryEvent, RevisionInterner, ServiceInstance, Version,
};

use crate::events::EventWatcher;

/// A change to notify the watchers of an app about.
pub(crate) enum Change {
    /// Only what changed.
    Delta(RegistryEvent),
    /// The whole state was replaced.
    Reset,
}

/// Everything the registry knows about one app.
#[derive(Default)]
pub(crate) struct AppState {
    /// The instances, in registration order, by id.
    instances: InstanceSet,
    /// Version of the app's latest change (the base of its next delta).
    pub(crate) changed: Version,
    /// The app's revision strings, shared by its instances.
    revisions: RevisionInterner,
    /// Interned revisions above which the interner is next trimmed.
    trim_at: usize,
    /// Live event watches (closed ones are pruned lazily).
    pub(crate) event_watchers: Vec<EventWatcher>,
    /// Upcoming notifications that are swallowed instead of delivered.
    #[cfg(any(test, feature = "faults"))]
    pub(crate) drop_pushes: usize,
}

impl AppState {
    /// Number of instances.
    pub(crate) fn len(&self) -> usize {
        self.instances.len()
    }

    /// Every instance, in registration order.
    pub(crate) fn shared_instances(&self) -> Vec<Arc<Instance>> {
        self.instances.to_vec()
    }

    #[cfg(any(test, feature = "faults"))]
    /// A Reset of this app at `version`.
    pub(crate) fn reset_at(&self, version: Version) -> RegistryEvent {
        RegistryEvent::Reset {
            version,
            items: self.shared_instances(),
        }
    }

    /// The owned records under `app`, in registration order.
    pub(crate) fn records(&self, app: &str) -> Vec<ServiceInstance> {
        self.instances.iter().map(|i| i.to_record(app)).collect()
    }

    /// Decodes `record`, its revision interned in the app's interner.
    fn decode(&mut self, record: &ServiceInstance) -> Arc<Instance> {
        let instance = Arc::new(Instance::decode(record, &mut self.revisions));
        // Amortised O(1): trim only when the interner doubled since.
        if self.revisions.len() > self.trim_at {
            self.revisions.trim();
            self.trim_at = self.revisions.len().saturating_mul(2).max(16);
        }
        instance
    }

    /// Inserts or replaces (keeping its place) the instance with the id of
    /// `record`; returns the shared instance stored.
    pub(crate) fn upsert(&mut self, record: &ServiceInstance) -> Arc<Instance> {
        let instance = self.decode(record);
        self.instances.upsert(instance.clone());
        instance
    }

    /// Removes the instance with `id`, returning its shared id.
    pub(crate) fn delete(&mut self, id: &str) -> Option<Arc<str>> {
        self.instances.remove(id).map(|i| i.id_arc().clone())
    }

    /// Replaces every instance by `records`; a later record with an id
    /// already seen replaces the earlier one in its place.
    pub(crate) fn replace_all(&mut self, records: &[ServiceInstance]) {
        let decoded: Vec<Arc<Instance>> = records.iter().map(|r| self.decode(r)).collect();
        self.instances = InstanceSet::from_vec(decoded).0;
        self.revisions.trim();
        self.trim_at = self.revisions.len().saturating_mul(2).max(16);
    }

    /// Drops watchers whose stream is gone.
    pub(crate) fn prune(&mut self) {
        self.event_watchers.retain(|w| !w.is_closed());
    }
}

/// The state of a whole registry, behind one lock.
#[derive(Default)]
pub(crate) struct State {
    /// Per-app state.
    pub(crate) apps: HashMap<String, AppState>,
    /// The registry's version: bumped by every change of any app, notified
    /// or not.
    pub(crate) version: u64,
}

impl State {
    /// The current version.
    pub(crate) fn version(&self) -> Version {
        Version::at(self.version)
    }

    /// The next version (the one of a change being made).
    pub(crate) fn bump(&mut self) -> Version {
        self.version = self.version.saturating_add(1);
        self.version()
    }

    /// A change of `app` at the next version: returns the version of the
    /// app's previous change (the change's base) and the new version.
    pub(crate) fn change(&mut self, app: &str) -> (Version, Version) {
        let version = self.bump();
        let st = self.app(app);
        (std::mem::replace(&mut st.changed, version), version)
    }

    #[cfg(any(test, feature = "faults"))]
    /// The state of a known `app` with the current version.
    pub(crate) fn known(&mut self, app: &str) -> Option<(&mut AppState, Version)> {
        let version = self.version();
        self.apps.get_mut(app).map(|st| (st, version))
    }

    /// The state of `app`, created if needed.
    pub(crate) fn app(&mut self, app: &str) -> &mut AppState {
        if self.apps.contains_key(app) {
            // Looked up twice so that a known app costs no key allocation.
            self.apps.get_mut(app).expect("present: checked just above")
        } else {
            self.apps.entry(app.to_string()).or_default()
        }
    }

    /// Every instance of `app` at the current version.
    pub(crate) fn listing(&self, app: &str) -> Listing {
        Listing {
            version: self.version(),
            instances: self
                .apps
                .get(app)
                .map(AppState::shared_instances)
                .unwrap_or_default(),
        }
    }

    /// A Reset of `app` at the current version.
    pub(crate) fn reset_event(&self, app: &str) -> RegistryEvent {
        RegistryEvent::reset(self.listing(app))
    }

    /// Tells the watchers of `app` about `change`, unless a dropped
    /// notification is scripted; prunes closed watchers either way.
    pub(crate) fn notify(&mut self, app: &str, change: Change) {
        let Some(st) = self.apps.get_mut(app) else {
            return;
        };
        st.prune();
        #[cfg(any(test, feature = "faults"))]
        if st.drop_pushes > 0 {
            st.drop_pushes -= 1;
            tracing::debug!(app, remaining = st.drop_pushes, "dropping scripted push");
            return;
        }
        for w in &st.event_watchers {
            match &change {
                Change::Delta(delta) => w.push_delta(delta),
                Change::Reset => w.push_reset(),
            }
        }
        tracing::trace!(
            app,
            instances = st.len(),
            watchers = st.event_watchers.len(),
            "notified"
        );
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes every live watch stream of `app` panic when next polled.
    pub(crate) fn poison(&mut self, app: &str) {
        let Some(st) = self.apps.get_mut(app) else {
            return;
        };
        for w in &st.event_watchers {
            w.poison();
        }
    }
}
