//! Sans-IO directory of one reference: merges the per-app updates (full
//! lists or patches) of the reference's provider apps into one immutable
//! [`DirectorySnapshot`] (one [`EndpointSet`] per app, edited by
//! copy-on-write), answers list/select, and reports why it is empty or
//! degraded. Randomness for selection is a seeded input; the lock-free read
//! side is [`crate::endpoint_set::Published`]. Endpoints that announce
//! closing leave tombstones (`directory/tombstones.rs`, driven from
//! `directory/closing.rs`) with time as an input.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::change::{Change, Fit, ResetAsk, Version};
use crate::endpoint_set::{DirectorySnapshot, EndpointSet, EndpointSetEditor};
use crate::pending::{Pending, RegistryFailure};
use crate::update::{DirectoryUpdate, HeldInstances, NotServing, Unresolved, UpdateState};
use crate::url::{Endpoint, ServiceUrl};
use crate::{ServedFromSnapshot, SnapshotOrigin};

/// Why a directory has no endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmptyReason {
    /// No update has arrived yet; names a failing subscribe or mapping read.
    Pending(Pending),
    /// The registry holds no instance of any provider app.
    RegistryEmpty,
    /// Instances exist but their metadata is not resolved yet.
    Unresolved(Unresolved),
    /// Providers are resolved but none exports this service.
    NoMatchingService,
    /// Instances exist but none may take traffic: unhealthy, closing or
    /// weight 0 (summed over the reference's apps).
    NotServing(NotServing),
    /// A reference without apps follows its interface -> app mapping, and
    /// the mapping (read, healthy) names no provider app.
    NoProviderApp,
}

/// What a directory can serve right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectoryStatus {
    /// Endpoints are available; `degraded` lists apps with unresolved revisions.
    Ready {
        /// Number of endpoints.
        endpoints: usize,
        /// Set while a provider app's registry watch is down: the endpoints
        /// are the last state seen (earliest outage start of all apps).
        stale_since: Option<Instant>,
        /// Apps with unresolved revisions (their live instances may be
        /// served from last-known-good metadata).
        degraded: Vec<(String, Unresolved)>,
        /// Apps whose instances removed in a mass expiry right after a
        /// registry recovery are still served for a bounded grace.
        held: Vec<(String, HeldInstances)>,
        /// A reference following its interface -> app mapping whose mapping
        /// read is failing: the apps last known keep being served.
        mapping: Option<RegistryFailure>,
        /// Set while endpoints of some apps come from a disk snapshot (the
        /// registry has not delivered their state yet): which apps, and
        /// `Freshness::Stale { age }` with `Source::Snapshot`.
        snapshot: Option<ServedFromSnapshot>,
    },
    /// No endpoint, and why.
    Empty(EmptyReason),
}

impl DirectoryStatus {
    /// Whether at least one endpoint is available.
    pub fn is_ready(&self) -> bool {
        matches!(self, DirectoryStatus::Ready { .. })
    }
}

struct AppView {
    /// Version of the latest update applied.
    version: Version,
    /// Writer side of the app's set (index by id, copy-on-write chunks).
    editor: EndpointSetEditor,
    /// The app's set as last published.
    set: EndpointSet,
    state: UpdateState,
    stale_since: Option<Instant>,
    held: Option<HeldInstances>,
    /// Set while the app's URLs come from a disk snapshot.
    snapshot: Option<SnapshotOrigin>,
    /// Closing tombstones of the app's endpoints.
    tombs: Tombstones,
}

/// What [`DirectoryMachine::apply`] did with an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The update applied; a new snapshot is ready.
    Yes,
    /// Another key, an unknown app, not newer than what is held, or a
    /// change that does not follow while a Reset is asked for already.
    Ignored,
    /// A change on top of a state the directory does not hold for its app
    /// (an update was lost): ask the app's resolver for a Reset (the
    /// machine says so once per gap, at most once per
    /// [`crate::change::RESET_ASK_INTERVAL`]).
    Gap,
}

impl Applied {
    /// Whether the update applied.
    pub fn applied(self) -> bool {
        self == Applied::Yes
    }
}

/// The endpoints of one reference.
pub struct DirectoryMachine {
    subscribe_key: String,
    apps: BTreeMap<String, Option<AppView>>,
    rng: StdRng,
    version: u64,
    /// What readers see: rebuilt after each applied update, from the apps'
    /// sets (an update re-publishes only its own app's set).
    snapshot: Arc<DirectorySnapshot>,
    /// What the tombstones did since the counts were last taken.
    tomb_counts: TombstoneCounts,
    /// Set when the apps follow the interface -> app mapping
    /// (`directory/apps.rs`).
    mapping: Option<apps::MappingView>,
    /// Reset asks per app, after updates that did not follow.
    asks: BTreeMap<String, ResetAsk>,
    /// A replacement's tombstones of apps that have not delivered yet
    /// (`directory/resume.rs`).
    carried: BTreeMap<String, Tombstones>,
    /// A replacement's publish gate (`directory/resume.rs`).
    gate: Option<resume::Gate>,
}

impl DirectoryMachine {
    /// A directory for `subscribe_key` served by `apps`.
    pub fn new(subscribe_key: impl Into<String>, apps: &[String], seed: u64) -> Self {
        let mut m = Self {
            subscribe_key: subscribe_key.into(),
            apps: apps.iter().map(|a| (a.clone(), None)).collect(),
            rng: StdRng::seed_from_u64(seed),
            version: 0,
            snapshot: Arc::default(),
            tomb_counts: TombstoneCounts::default(),
            mapping: None,
            asks: BTreeMap::new(),
            carried: BTreeMap::new(),
            gate: None,
        };
        m.snapshot = Arc::new(DirectorySnapshot::new(0, m.compute_status(), Vec::new()));
        m
    }

    /// The subscribe key.
    pub fn subscribe_key(&self) -> &str {
        &self.subscribe_key
    }

    /// Applies an update for one app at `now` where it fits the version
    /// held for the app ([`Change::fit`]): a Reset replaces the app's URLs
    /// in one pass (in its order; an endpoint of the same id and incarnation
    /// keeps its balancing statistics) unless it is older than what is
    /// held; a Delta applies on a state held at a version in its
    /// `[base, version)`, is ignored when not newer, and is a gap otherwise
    /// ([`Applied::Gap`]: ask the resolver for a Reset; asked at most once
    /// per second, later ones within it are [`Applied::Ignored`]). Updates
    /// for another key or an unknown app are ignored. A held endpoint the
    /// update names closing (`update.closing`) is removed and leaves a
    /// tombstone expiring `tombstone_ttl` from `now`; tombstoned ids are
    /// screened (see `docs/directory.md`). Also hands back the replaced
    /// snapshot, so the caller can free what only it holds off the update
    /// path.
    pub fn apply_at(
        &mut self,
        update: DirectoryUpdate,
        now: Instant,
        tombstone_ttl: Duration,
    ) -> (Applied, Option<Arc<DirectorySnapshot>>) {
        let clock = Clock {
            now,
            ttl: tombstone_ttl,
        };
        if update.subscribe_key != self.subscribe_key {
            return (Applied::Ignored, None);
        }
        let carried = &mut self.carried;
        let Some(slot) = self.apps.get_mut(&update.app) else {
            return (Applied::Ignored, None);
        };
        match update.change.fit(slot.as_ref().map(|v| v.version)) {
            Fit::Apply => {}
            Fit::Older => return (Applied::Ignored, None),
            Fit::Gap => {
                let ask = self.asks.entry(update.app.clone()).or_default();
                return (
                    if ask.on_gap(now) {
                        Applied::Gap
                    } else {
                        Applied::Ignored
                    },
                    None,
                );
            }
        }
        let version = update.change.version();
        let view = match update.change {
            Change::Reset { items, .. } => {
                if let Some(ask) = self.asks.get_mut(&update.app) {
                    ask.on_reset();
                }
                let view = slot.get_or_insert_with(|| AppView {
                    version,
                    editor: EndpointSetEditor::new(),
                    set: EndpointSet::new(),
                    state: UpdateState::Pending(Pending::waiting()),
                    stale_since: None,
                    held: None,
                    snapshot: None,
                    tombs: carried.remove(&update.app).unwrap_or_default(),
                });
                let urls = view.tombs.screen_full(
                    &mut view.editor,
                    items,
                    &update.closing,
                    clock,
                    &mut self.tomb_counts,
                );
                view.editor.rebuild(urls);
                view
            }
            Change::Delta {
                upserts, removals, ..
            } => {
                let Some(view) = slot.as_mut() else {
                    return (Applied::Ignored, None);
                };
                view.tombs.apply_patch(
                    &mut view.editor,
                    upserts,
                    &removals,
                    &update.closing,
                    clock,
                    &mut self.tomb_counts,
                );
                view
            }
        };
        view.version = version;
        view.set = view.editor.snapshot();
        view.state = update.state;
        view.stale_since = update.stale_since;
        view.held = update.held;
        view.snapshot = update.snapshot.as_deref().cloned();
        self.answered(&update.app);
        (Applied::Yes, Some(self.republish()))
    }

    /// The Reset asks of `app`'s updates that did not follow (`None`: none
    /// did).
    pub fn reset_ask(&self, app: &str) -> Option<&ResetAsk> {
        self.asks.get(app)
    }

    /// Builds and installs the next snapshot from the apps' sets as they
    /// are; hands back the replaced one.
    fn republish(&mut self) -> Arc<DirectorySnapshot> {
        self.version += 1;
        let sets = self.served_sets().cloned().collect();
        let next = Arc::new(DirectorySnapshot::new(
            self.version,
            self.compute_status(),
            sets,
        ));
        std::mem::replace(&mut self.snapshot, next)
    }

    /// Number of updates applied so far.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// What readers see now: every app's endpoints, the status and the
    /// version, immutable and shared.
    pub fn snapshot(&self) -> &Arc<DirectorySnapshot> {
        &self.snapshot
    }

    /// The version held for `app`, if it has sent an update.
    pub fn version_of(&self, app: &str) -> Option<Version> {
        Some(self.apps.get(app)?.as_ref()?.version)
    }

    /// Every endpoint, app by app (each in its set's slot order).
    pub fn list(&self) -> Vec<ServiceUrl> {
        self.snapshot.iter().map(|u| (**u).clone()).collect()
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.snapshot.len()
    }

    /// Whether there is no endpoint.
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_empty()
    }

    /// Picks an endpoint at random (from the seeded generator), weighted by
    /// instance weight.
    pub fn select(&mut self) -> Option<Endpoint> {
        let r = self.rng.gen::<u64>();
        self.snapshot.pick(r).cloned()
    }

    /// Every app's set as served: its own, or while a replacement waits for
    /// the app, the set its predecessor served (`directory/resume.rs`).
    fn served_sets(&self) -> impl Iterator<Item = &EndpointSet> {
        self.apps.iter().filter_map(|(app, v)| match v {
            Some(v) => Some(&v.set),
            None => self.gate.as_ref().and_then(|g| g.awaited.get(app)),
        })
    }

    fn views(&self) -> impl Iterator<Item = &AppView> {
        self.apps.values().flatten()
    }

    /// What the directory can serve, and why.
    pub fn status(&self) -> DirectoryStatus {
        self.snapshot.status().clone()
    }

    fn compute_status(&self) -> DirectoryStatus {
        let endpoints: usize = self.served_sets().map(EndpointSet::len).sum();
        if endpoints > 0 {
            let degraded = self
                .apps
                .iter()
                .filter_map(|(app, v)| match v.as_ref().map(|v| &v.state) {
                    Some(UpdateState::Degraded(u)) | Some(UpdateState::Unresolved(u)) => {
                        Some((app.clone(), u.clone()))
                    }
                    _ => None,
                })
                .collect();
            let stale_since = self.views().filter_map(|v| v.stale_since).min();
            let held = self
                .apps
                .iter()
                .filter_map(|(app, v)| Some((app.clone(), v.as_ref()?.held?)))
                .collect();
            return DirectoryStatus::Ready {
                endpoints,
                stale_since,
                degraded,
                held,
                snapshot: self.served_from_snapshot(),
                mapping: self.mapping_failure(),
            };
        }
        if let Some(status) = self.mapping_status() {
            return status;
        }
        let states: Vec<Option<&UpdateState>> = self
            .apps
            .values()
            .map(|v| v.as_ref().map(|v| &v.state))
            .collect();
        for s in states.iter().flatten() {
            if let UpdateState::Unresolved(u) | UpdateState::Degraded(u) = s {
                return DirectoryStatus::Empty(EmptyReason::Unresolved(u.clone()));
            }
        }
        if states
            .iter()
            .any(|s| matches!(s, None | Some(UpdateState::Pending(_))))
        {
            let mut pending = Pending::waiting();
            for s in states.iter().flatten() {
                if let UpdateState::Pending(p) = s {
                    pending.merge(p);
                }
            }
            return DirectoryStatus::Empty(EmptyReason::Pending(pending));
        }
        let mut not_serving: Option<NotServing> = None;
        for s in states.iter().flatten() {
            if let UpdateState::NotServing(n) = s {
                not_serving.get_or_insert_with(NotServing::default).merge(n);
            }
        }
        // Endpoints the registry lists as serving, held back by a closing
        // tombstone: closing, as far as callers are concerned.
        let vetoed: usize = self.views().map(|v| v.tombs.vetoed()).sum();
        if vetoed > 0 {
            let n = not_serving.get_or_insert_with(NotServing::default);
            n.closing = n.closing.saturating_add(vetoed);
        }
        if let Some(n) = not_serving {
            return DirectoryStatus::Empty(EmptyReason::NotServing(n));
        }
        if states.iter().any(|s| {
            matches!(
                s,
                Some(UpdateState::NoMatchingService | UpdateState::Resolved)
            )
        }) {
            return DirectoryStatus::Empty(EmptyReason::NoMatchingService);
        }
        DirectoryStatus::Empty(EmptyReason::RegistryEmpty)
    }
}

mod display;
mod snapshot;

mod no_endpoint;
pub use no_endpoint::{NoEndpoint, NoEndpointReason};

mod apps;
mod closing;
mod inspect;
mod resume;
pub use resume::{DirectoryResume, RESUME_GATE};
mod tombstones;
pub use tombstones::TombstoneCounts;
use tombstones::{Clock, Tombstones};

#[cfg(test)]
mod tombstone_tests;

#[cfg(test)]
mod resume_tests;

#[cfg(test)]
mod tests;
