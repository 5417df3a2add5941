//! Sans-IO directory of one reference: merges the full per-app updates of
//! the reference's provider apps, answers list/select, and reports why it is
//! empty or degraded. Randomness for selection is a seeded input.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use rustc_hash::FxHashMap;

use crate::update::{
    DirectoryUpdate, HeldInstances, NotServing, Unresolved, UpdateState, UrlChange,
};
use crate::url::{Endpoint, ServiceUrl};

/// Why a directory has no endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmptyReason {
    /// No update has arrived yet.
    Pending,
    /// The registry holds no instance of any provider app.
    RegistryEmpty,
    /// Instances exist but their metadata is not resolved yet.
    Unresolved(Unresolved),
    /// Providers are resolved but none exports this service.
    NoMatchingService,
    /// Instances exist but none may take traffic: unhealthy, closing or
    /// weight 0 (summed over the reference's apps).
    NotServing(NotServing),
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

/// The first 8 characters of a revision (whole characters, whatever the
/// UTF-8 encoding), for display.
fn short(revision: &str) -> &str {
    match revision.char_indices().nth(8) {
        Some((end, _)) => revision.get(..end).unwrap_or(revision),
        None => revision,
    }
}

impl fmt::Display for NotServing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instance(s) present, none serving ({} unhealthy, {} closing, {} with weight 0)",
            self.total(),
            self.unhealthy,
            self.closing,
            self.zero_weight
        )
    }
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let revs: Vec<&str> = self.revisions.iter().map(|r| short(r)).collect();
        write!(
            f,
            "unresolved revision(s) {} after {} attempt(s)",
            revs.join(","),
            self.attempts
        )?;
        if let Some(e) = &self.last_error {
            write!(f, ", last error: {e}")?;
        }
        Ok(())
    }
}

impl fmt::Display for DirectoryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirectoryStatus::Ready {
                endpoints,
                degraded,
                stale_since,
                held,
            } => {
                let word = if degraded.is_empty() {
                    "ready"
                } else {
                    "degraded"
                };
                write!(f, "{word} ({endpoints} endpoint(s)")?;
                for (app, u) in degraded {
                    write!(f, "; {app}: {u}")?;
                }
                if stale_since.is_some() {
                    write!(f, "; registry unreachable, serving the last state seen")?;
                }
                for (app, h) in held {
                    write!(
                        f,
                        "; holding {} instance(s) of {app} removed in a mass expiry after a \
                         registry recovery, for at most {:?} while they re-register",
                        h.count, h.grace
                    )?;
                }
                write!(f, ")")
            }
            DirectoryStatus::Empty(EmptyReason::Pending) => {
                write!(f, "empty: waiting for the registry")
            }
            DirectoryStatus::Empty(EmptyReason::RegistryEmpty) => {
                write!(f, "empty: the registry holds no provider instance")
            }
            DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => write!(f, "empty: {u}"),
            DirectoryStatus::Empty(EmptyReason::NoMatchingService) => {
                write!(f, "empty: no provider exports this service")
            }
            DirectoryStatus::Empty(EmptyReason::NotServing(n)) => write!(f, "empty: {n}"),
        }
    }
}

struct AppView {
    generation: u64,
    urls: Vec<Endpoint>,
    /// Position of each instance's URL in `urls`.
    index: FxHashMap<Arc<str>, usize>,
    state: UpdateState,
    stale_since: Option<Instant>,
    held: Option<HeldInstances>,
}

impl AppView {
    fn reindex(&mut self) {
        self.index = self
            .urls
            .iter()
            .enumerate()
            .map(|(k, u)| (u.instance.id_arc().clone(), k))
            .collect();
    }

    fn remove(&mut self, id: &str) {
        let Some(k) = self.index.remove(id) else {
            return;
        };
        self.urls.swap_remove(k);
        if let Some(moved) = self.urls.get(k) {
            self.index.insert(moved.instance.id_arc().clone(), k);
        }
    }

    fn upsert(&mut self, url: Endpoint) {
        match self.index.get(url.instance_id()) {
            Some(&k) => self.urls[k] = url,
            None => {
                self.index
                    .insert(url.instance.id_arc().clone(), self.urls.len());
                self.urls.push(url);
            }
        }
    }
}

/// What [`DirectoryMachine::apply_update`] did with an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Applied.
    Yes,
    /// For another key, an unknown app, or older than what is held.
    Ignored,
    /// A patch on top of an update the directory does not hold: it needs
    /// the app's full list.
    NeedFull,
}

/// The endpoints of one reference.
pub struct DirectoryMachine {
    subscribe_key: String,
    apps: BTreeMap<String, Option<AppView>>,
    rng: StdRng,
    version: u64,
    /// Running weight totals over every endpoint in app order, rebuilt on
    /// each update, so a pick is a binary search.
    cumulative: Vec<u64>,
}

impl DirectoryMachine {
    /// A directory for `subscribe_key` served by `apps`.
    pub fn new(subscribe_key: impl Into<String>, apps: &[String], seed: u64) -> Self {
        Self {
            subscribe_key: subscribe_key.into(),
            apps: apps.iter().map(|a| (a.clone(), None)).collect(),
            rng: StdRng::seed_from_u64(seed),
            version: 0,
            cumulative: Vec::new(),
        }
    }

    /// The subscribe key.
    pub fn subscribe_key(&self) -> &str {
        &self.subscribe_key
    }

    /// Applies an update for one app. Updates for another key, an unknown
    /// app, or an older generation are ignored. Returns whether it applied.
    pub fn apply(&mut self, update: DirectoryUpdate) -> bool {
        self.apply_update(update) == Applied::Yes
    }

    /// Applies an update for one app, and says what it did.
    pub fn apply_update(&mut self, update: DirectoryUpdate) -> Applied {
        if update.subscribe_key != self.subscribe_key {
            return Applied::Ignored;
        }
        let Some(slot) = self.apps.get_mut(&update.app) else {
            return Applied::Ignored;
        };
        match (&update.change, slot.as_mut()) {
            (_, Some(v)) if v.generation > update.generation => return Applied::Ignored,
            (UrlChange::Full(_), _) => {}
            (UrlChange::Patch { base, .. }, Some(v)) if v.generation == *base => {}
            (UrlChange::Patch { .. }, _) => return Applied::NeedFull,
        }
        let view = slot.get_or_insert_with(|| AppView {
            generation: 0,
            urls: Vec::new(),
            index: FxHashMap::default(),
            state: UpdateState::Pending,
            stale_since: None,
            held: None,
        });
        match update.change {
            UrlChange::Full(all) => {
                view.urls = all;
                view.reindex();
            }
            UrlChange::Patch {
                upserts, removals, ..
            } => {
                for id in &removals {
                    view.remove(id);
                }
                for u in upserts {
                    view.upsert(u);
                }
            }
        }
        view.generation = update.generation;
        view.state = update.state;
        view.stale_since = update.stale_since;
        view.held = update.held;
        self.version += 1;
        self.cumulative.clear();
        let mut total = 0u64;
        for u in self.apps.values().flatten().flat_map(|v| v.urls.iter()) {
            total = total.saturating_add(u64::from(u.weight()));
            self.cumulative.push(total);
        }
        Applied::Yes
    }

    /// Number of updates applied so far.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Every endpoint, in app order.
    pub fn list(&self) -> Vec<ServiceUrl> {
        self.views()
            .flat_map(|v| v.urls.iter().map(|u| ServiceUrl::clone(u)))
            .collect()
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.views().map(|v| v.urls.len()).sum()
    }

    /// Whether there is no endpoint.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Picks an endpoint at random, weighted by instance weight.
    pub fn select(&mut self) -> Option<ServiceUrl> {
        let total = *self.cumulative.last()?;
        if total == 0 {
            return None;
        }
        let pick = self.rng.gen_range(0..total);
        let mut index = self.cumulative.partition_point(|&c| c <= pick);
        for v in self.views() {
            if index < v.urls.len() {
                return Some(ServiceUrl::clone(&v.urls[index]));
            }
            index -= v.urls.len();
        }
        None
    }

    fn views(&self) -> impl Iterator<Item = &AppView> {
        self.apps.values().flatten()
    }

    /// What the directory can serve, and why.
    pub fn status(&self) -> DirectoryStatus {
        let endpoints = self.len();
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
            };
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
            .any(|s| matches!(s, None | Some(UpdateState::Pending)))
        {
            return DirectoryStatus::Empty(EmptyReason::Pending);
        }
        let mut not_serving: Option<NotServing> = None;
        for s in states.iter().flatten() {
            if let UpdateState::NotServing(n) = s {
                not_serving.get_or_insert_with(NotServing::default).merge(n);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ServiceInfo, ServiceInstance};
    use std::time::Instant;

    fn update(app: &str, gen: u64, ports: &[u16], state: UpdateState) -> DirectoryUpdate {
        let svc = ServiceInfo {
            name: "S".into(),
            group: None,
            version: None,
            protocol: "tri".into(),
            port: 1,
            path: "S".into(),
            params: Default::default(),
        };
        let urls = ports
            .iter()
            .map(|p| {
                Arc::new(ServiceUrl::build(
                    &ServiceInstance::new(app, "127.0.0.1", *p),
                    &svc,
                ))
            })
            .collect();
        DirectoryUpdate {
            app: app.into(),
            subscribe_key: "S:tri".into(),
            generation: gen,
            change: UrlChange::Full(urls),
            state,
            stale_since: None,
            held: None,
        }
    }

    #[test]
    fn merges_apps_and_explains_emptiness() {
        let apps = vec!["a".to_string(), "b".to_string()];
        let mut d = DirectoryMachine::new("S:tri", &apps, 1);
        assert_eq!(d.status(), DirectoryStatus::Empty(EmptyReason::Pending));
        assert!(d.apply(update("a", 1, &[1, 2], UpdateState::Resolved)));
        assert!(d.apply(update("b", 1, &[], UpdateState::RegistryEmpty)));
        assert_eq!(d.len(), 2);
        assert!(d.select().is_some());
        assert!(
            !d.apply(update("a", 0, &[], UpdateState::RegistryEmpty)),
            "older generation"
        );
        assert!(d.apply(update("a", 2, &[], UpdateState::RegistryEmpty)));
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::RegistryEmpty)
        );
        let u = Unresolved {
            revisions: vec!["r".into()],
            since: Instant::now(),
            attempts: 1,
            last_error: None,
        };
        assert!(d.apply(update("b", 2, &[], UpdateState::Unresolved(u.clone()))));
        assert_eq!(
            d.status(),
            DirectoryStatus::Empty(EmptyReason::Unresolved(u))
        );
        assert!(d.select().is_none());
    }
}
