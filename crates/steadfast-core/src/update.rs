//! Messages' payloads between the resolver and the directory: the URLs of
//! one subscribe key (all of them, or only what changed) plus the reason
//! the list looks the way it does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::change::Change;
use crate::error::FetchError;
use crate::instance::Instance;
use crate::model::ServiceInstance;
use crate::pending::Pending;
use crate::url::Endpoint;

/// Revisions the resolver could not resolve yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved {
    /// The unresolved revisions, sorted.
    pub revisions: Vec<String>,
    /// When the oldest of them first became unresolved.
    pub since: Instant,
    /// Failed fetch attempts of the most-tried revision.
    pub attempts: u32,
    /// The latest fetch error, if any attempt finished.
    pub last_error: Option<FetchError>,
}

/// Instances are present but none may take traffic, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotServing {
    /// Instances the registry marks unhealthy (and not closing).
    pub unhealthy: usize,
    /// Instances whose provider announced it is shutting down.
    pub closing: usize,
    /// Healthy instances with weight 0.
    pub zero_weight: usize,
}

impl NotServing {
    /// Counts why each of `instances` does not serve (serving ones are
    /// not counted).
    pub fn count<'a>(instances: impl IntoIterator<Item = &'a ServiceInstance>) -> Self {
        let mut n = Self::default();
        for i in instances {
            if i.is_closing() {
                n.closing += 1;
            } else if !i.healthy {
                n.unhealthy += 1;
            } else if i.weight == 0 {
                n.zero_weight += 1;
            }
        }
        n
    }

    /// Counts (`up`) or uncounts one decoded instance, as the resolver's
    /// table changes.
    pub fn track(&mut self, instance: &Instance, up: bool) {
        let field = if instance.is_closing() {
            &mut self.closing
        } else if !instance.healthy() {
            &mut self.unhealthy
        } else if instance.weight() == 0 {
            &mut self.zero_weight
        } else {
            return;
        };
        *field = if up {
            field.saturating_add(1)
        } else {
            field.saturating_sub(1)
        };
    }

    /// Adds another app's counts.
    pub fn merge(&mut self, other: &NotServing) {
        self.unhealthy = self.unhealthy.saturating_add(other.unhealthy);
        self.closing = self.closing.saturating_add(other.closing);
        self.zero_weight = self.zero_weight.saturating_add(other.zero_weight);
    }

    /// Instances counted.
    pub fn total(&self) -> usize {
        self.unhealthy
            .saturating_add(self.closing)
            .saturating_add(self.zero_weight)
    }
}

/// Why an update carries the URLs it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateState {
    /// No registry snapshot has arrived yet (and whether the subscription
    /// is failing meanwhile).
    Pending(Pending),
    /// Every revision in the snapshot is resolved.
    Resolved,
    /// Some revisions are unresolved; the URLs hold the resolved ones plus
    /// last-known-good URLs of live instances.
    Degraded(Unresolved),
    /// The registry holds no instance of the app: the list is really empty.
    RegistryEmpty,
    /// Instances exist but their revisions are unresolved, so no URL is known.
    Unresolved(Unresolved),
    /// Everything is resolved but no serving instance exports this service.
    NoMatchingService,
    /// Instances exist but none may take traffic (unhealthy, closing or
    /// weight 0).
    NotServing(NotServing),
}

/// Instances the registry removed in a mass expiry right after it recovered
/// from an outage, still served for a bounded grace while their providers
/// re-register (see `steadfast_core::subscription`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldInstances {
    /// Instances held.
    pub count: usize,
    /// When the last of them is dropped, re-registered or not.
    pub until: Instant,
    /// The grace they are held for.
    pub grace: Duration,
}

/// How an update changes the URLs one app provides for one subscribe key:
/// every URL currently known (a Reset, one per serving instance, in the
/// app's order) or what changed since the key's previous update (a Delta:
/// URLs added or replaced by instance id, instances whose URL is gone).
pub type UrlChange = Change<Endpoint>;

/// A change of the URLs one app provides for one subscribe key.
#[derive(Clone, Debug)]
pub struct DirectoryUpdate {
    /// Provider application the URLs come from.
    pub app: String,
    /// Subscribe key (match key) the URLs belong to.
    pub subscribe_key: String,
    /// The URLs: all, or what changed, at the version of the registry
    /// delivery the update was built from (or a step after it: a fetch
    /// result, a status change).
    pub change: UrlChange,
    /// Why the list is what it is.
    pub state: UpdateState,
    /// Set while the registry watch is down: the URLs are the last state
    /// seen, kept (an outage never empties a directory) but possibly stale.
    pub stale_since: Option<Instant>,
    /// Set while instances removed in a mass expiry after a registry
    /// recovery are still served (they are part of the URLs).
    pub held: Option<HeldInstances>,
    /// Instances whose record now carries the closing flag: in a Delta,
    /// those whose URL it removes because they announced closing (they are
    /// in its removals too; such a removal is not the registry removing
    /// them); in a Reset, every closing instance of the app. A directory holding one of them removes it and writes a
    /// tombstone (see `docs/directory.md`).
    pub closing: Vec<Arc<Instance>>,
    /// Set while the URLs come from a disk snapshot written by an earlier
    /// run (the registry has not delivered a state yet): when it was
    /// written and how old it is (shared: rare, and it keeps the update
    /// small).
    pub snapshot: Option<Arc<crate::SnapshotOrigin>>,
}

impl DirectoryUpdate {
    /// The URLs a Reset carries; for a Delta, only its upserts.
    pub fn urls(&self) -> &[Endpoint] {
        match &self.change {
            Change::Reset { items, .. } => items,
            Change::Delta { upserts, .. } => upserts,
        }
    }

    /// The version of the URLs after the update.
    pub fn version(&self) -> crate::change::Version {
        self.change.version()
    }
}
