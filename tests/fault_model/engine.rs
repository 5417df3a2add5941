//! The resolver and directory actors' shells and the coordinator, as in
//! `steadfast-actors/src/{resolver_actor,directory_actor,coordinator}.rs`:
//! one resolver per provider app (reference-counted), one directory per
//! reference, updates published once per burst (a `Flush` queued behind it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use steadfast_core::{
    DirectoryMachine, FetchError, Instance, MetadataInfo, ResolverAction, ResolverMachine,
    ServiceUrl, Token,
};

use super::sim::{Event, Msg, Sim};
use super::steps::Target;
use super::world::{APPS, REFS};

/// A resolver actor.
pub struct ResShell {
    /// Provider app.
    pub app: String,
    /// The machine.
    pub m: ResolverMachine,
    /// Attached directories and their subscribe keys.
    pub directories: BTreeMap<u64, String>,
    /// Armed retry timers: token -> revision.
    pub timers: BTreeMap<Token, String>,
    /// Fetches asked of the cache and not answered or abandoned.
    pub fetches: BTreeMap<Token, String>,
    /// A `Flush` is queued.
    pub flush_scheduled: bool,
    /// Shut down.
    pub terminated: bool,
    /// The instances the machine holds, reassembled from the deliveries it
    /// applied (`None` before the first).
    pub instances: Option<BTreeMap<String, Arc<Instance>>>,
    /// The revisions of those instances.
    pub revs: BTreeSet<String>,
    /// Had an input since the invariants last looked.
    pub dirty: bool,
    /// A Reset was asked for and none has been applied since (one Reset
    /// answers every delta that does not follow: asked once).
    pub reset_asked: bool,
    /// When the machine last asked for a Reset (asks are at most one per
    /// `RESET_ASK_INTERVAL`).
    pub asked_at: Option<std::time::Duration>,
    /// On a replacement, until its first delivery: its predecessor's
    /// tokens are below this one.
    pub orphans_below: Option<Token>,
}

/// A directory actor.
pub struct DirShell {
    /// Its id.
    pub id: u64,
    /// The machine.
    pub m: DirectoryMachine,
    /// The resolver of each of its apps (fixed at creation, like its weak
    /// addresses).
    pub resolvers: BTreeMap<String, u64>,
    /// Its endpoints, as of its latest update.
    pub urls: Vec<ServiceUrl>,
    /// Version of the latest update it applied, per app.
    pub gens: BTreeMap<String, steadfast_core::Version>,
    /// A directory rebuilt from its resolvers' full lists only (`[full]`).
    pub rebuilt: DirectoryMachine,
    /// When its tombstone-expiry timer is armed for, as the actor arms one
    /// at the machine's next deadline.
    pub tomb_at: Option<std::time::Instant>,
}

/// The coordinator's bookkeeping.
#[derive(Default)]
pub struct Coord {
    /// Subscriptions per reference.
    pub refs: [usize; 3],
    /// The current resolver of each app and its reference count.
    pub apps: BTreeMap<String, (u64, usize)>,
    /// Next actor id.
    pub next_id: u64,
    /// `Engine::shutdown` ran.
    pub shut_down: bool,
}

impl Sim {
    fn next_id(&mut self) -> u64 {
        self.coord.next_id += 1;
        self.coord.next_id
    }

    /// `engine.subscribe(reference n)`.
    pub fn subscribe(&mut self, n: usize) {
        let n = n % REFS.len();
        if self.coord.shut_down {
            return;
        }
        if self.dirs.contains_key(&n) {
            self.coord.refs[n] += 1;
            return;
        }
        let spec = &REFS[n];
        let mut resolvers = BTreeMap::new();
        for app in spec.apps {
            let id = self.resolver_for(app);
            resolvers.insert(app.to_string(), id);
        }
        let id = self.next_id();
        let apps: Vec<String> = spec.apps.iter().map(|a| a.to_string()).collect();
        let m = DirectoryMachine::new(spec.key, &apps, self.seed_for(id));
        let rebuilt = DirectoryMachine::new(spec.key, &apps, 0);
        for rid in resolvers.values() {
            self.send(Msg::Attach {
                to: *rid,
                key: spec.key.into(),
                directory: id,
            });
        }
        let urls = Vec::new();
        self.dirs.insert(
            n,
            DirShell {
                id,
                m,
                resolvers,
                urls,
                gens: BTreeMap::new(),
                rebuilt,
                tomb_at: None,
            },
        );
        self.coord.refs[n] = 1;
    }

    fn resolver_for(&mut self, app: &str) -> u64 {
        if let Some((id, refs)) = self.coord.apps.get_mut(app) {
            *refs += 1;
            return *id;
        }
        let id = self.next_id();
        let m = ResolverMachine::new(app, self.cfg.backoff, self.seed_for(id));
        self.resolvers.insert(
            id,
            ResShell {
                app: app.into(),
                m,
                directories: BTreeMap::new(),
                timers: BTreeMap::new(),
                fetches: BTreeMap::new(),
                flush_scheduled: false,
                reset_asked: false,
                asked_at: None,
                orphans_below: None,
                terminated: false,
                instances: None,
                revs: BTreeSet::new(),
                dirty: true,
            },
        );
        self.coord.apps.insert(app.into(), (id, 1));
        let app = app.to_string();
        self.send(Msg::WatchApp { app, id });
        id
    }

    /// `engine.unsubscribe(reference n)`.
    pub fn unsubscribe(&mut self, n: usize) {
        let n = n % REFS.len();
        if self.coord.shut_down || !self.dirs.contains_key(&n) {
            return;
        }
        self.coord.refs[n] -= 1;
        if self.coord.refs[n] > 0 {
            return;
        }
        if let Some(d) = self.dirs.remove(&n) {
            self.close_directory(&d);
        }
        for app in REFS[n].apps {
            if let Some((id, refs)) = self.coord.apps.get_mut(*app) {
                *refs -= 1;
                if *refs == 0 {
                    let id = *id;
                    self.coord.apps.remove(*app);
                    self.send(Msg::ResShutdown { to: id });
                }
            }
        }
    }

    fn close_directory(&mut self, d: &DirShell) {
        for rid in d.resolvers.values() {
            self.send(Msg::Detach {
                to: *rid,
                key: d.m.subscribe_key().into(),
                directory: d.id,
            });
        }
    }

    /// `Engine::shutdown`: every directory, resolver, the registry actor and
    /// the cache get `Shutdown`; afterwards nothing may happen.
    pub fn shutdown(&mut self) {
        if self.coord.shut_down {
            return;
        }
        self.coord.shut_down = true;
        for (_, d) in std::mem::take(&mut self.dirs) {
            self.close_directory(&d);
        }
        for (_, (id, _)) in std::mem::take(&mut self.coord.apps) {
            self.send(Msg::ResShutdown { to: id });
        }
        self.send(Msg::RegShutdown);
        self.send(Msg::CacheShutdown);
        self.settle();
        self.track.all_closed = true;
        if !self.resolvers.is_empty() || !self.cache.flights.is_empty() {
            self.violate("[after-shutdown] an actor outlived shutdown".into());
        }
    }

    /// A supervised restart of `target`.
    pub fn restart(&mut self, target: Target) {
        if self.coord.shut_down {
            return;
        }
        match target {
            Target::Registry => {
                self.stats.restarts += u64::from(!self.reg.terminated);
                self.reg_restart();
            }
            Target::Cache => {
                self.stats.restarts += u64::from(!self.cache.terminated);
                self.cache_restart();
            }
            Target::Resolver(a) => {
                let app = APPS[a % APPS.len()];
                if let Some((id, _)) = self.coord.apps.get(app).copied() {
                    self.restart_resolver(id);
                }
            }
            Target::Directory(n) => {
                if let Some(id) = self.dirs.get(&(n % REFS.len())).map(|d| d.id) {
                    self.restart_directory(id);
                }
            }
        }
    }

    /// The next delivery to the resolver (or update to the directory) that
    /// `target` names is lost to a handler panic.
    pub fn lose_next(&mut self, target: Target) {
        if self.coord.shut_down {
            return;
        }
        let id = match target {
            Target::Resolver(a) => self.coord.apps.get(APPS[a % APPS.len()]).map(|(id, _)| *id),
            Target::Directory(n) => self.dirs.get(&(n % REFS.len())).map(|d| d.id),
            Target::Registry | Target::Cache => None,
        };
        self.lose.extend(id);
    }

    /// A supervised restart of resolver `id`, as the actor does it: re-created
    /// from its inputs (a fresh machine resuming after the old one's
    /// watermarks), keeping only its attached directories; their keys
    /// subscribe again and it subscribes to the registry again. The old
    /// machine's fetches may still run in the cache.
    pub fn restart_resolver(&mut self, id: u64) {
        let now = self.at();
        let (backoff, seed) = (self.cfg.backoff, self.seed_for(id));
        let Some(r) = self.resolvers.get_mut(&id).filter(|r| !r.terminated) else {
            return;
        };
        let at = r.m.resume_point();
        r.m = ResolverMachine::new(&r.app, backoff, seed).resuming(at);
        r.orphans_below = Some(r.m.next_token());
        r.timers.clear();
        r.fetches.clear();
        r.flush_scheduled = false;
        r.reset_asked = false;
        r.asked_at = None;
        r.instances = None;
        r.revs.clear();
        r.dirty = true;
        let app = r.app.clone();
        let keys: Vec<String> = r.directories.values().cloned().collect();
        let actions = keys.iter().flat_map(|k| r.m.subscribe_at(k, now)).collect();
        // It recalls the metadata cache before it subscribes (one hop in
        // the actor; a cache that is shut down recalls nothing).
        if !self.cache.terminated {
            r.m.on_recalled(self.cache.cache.of_app(&app));
        }
        self.track_resolver_recreated(id);
        self.stats.restarts += 1;
        self.res_perform(id, actions);
        self.send(Msg::WatchApp { app, id });
    }

    /// A supervised restart of directory `id`, as the actor does it:
    /// re-created from its inputs (a fresh machine resuming from the old
    /// one's resume point: version, tombstones, the apps that answered),
    /// publishing nothing until those apps answer its attaches again.
    pub fn restart_directory(&mut self, id: u64) {
        let now = self.at();
        let seed = self.seed_for(id.rotate_left(32) ^ self.stats.restarts);
        let Some(d) = self.dirs.values_mut().find(|d| d.id == id) else {
            return;
        };
        let key = d.m.subscribe_key().to_string();
        let apps: Vec<String> = d.resolvers.keys().cloned().collect();
        let point = d.m.resume_point();
        d.m = DirectoryMachine::new(key.clone(), &apps, seed).resuming(point, now);
        d.gens.clear();
        d.tomb_at = None;
        let attach: Vec<Msg> = d
            .resolvers
            .values()
            .map(|rid| Msg::Attach {
                to: *rid,
                key: key.clone(),
                directory: id,
            })
            .collect();
        self.stats.restarts += 1;
        self.arm_tomb_timer(id);
        for msg in attach {
            self.send(msg);
        }
    }

    /// Performs resolver `id`'s actions, then queues its `Flush`.
    pub fn res_perform(&mut self, id: u64, actions: Vec<ResolverAction>) {
        if self.track.all_closed && !actions.is_empty() {
            self.violate(format!("[after-shutdown] resolver acted: {actions:?}"));
        }
        let Some(app) = self.resolvers.get_mut(&id).map(|r| {
            r.dirty = true;
            r.app.clone()
        }) else {
            return;
        };
        for action in actions {
            self.note(|| format!("  resolver {app}#{id}: {action:?}"));
            match action {
                // The simulated cache answers every request it gets, within
                // its own deadline: the resolver's fetch deadline never fires.
                ResolverAction::Fetch {
                    revision,
                    candidates,
                    token,
                    deadline: _,
                } => {
                    self.stats.fetches += 1;
                    self.check_fetch_due(id, &app, &revision);
                    self.track.issued_res(&revision, token);
                    if let Some(r) = self.resolvers.get_mut(&id) {
                        r.fetches.insert(token, revision.clone());
                    }
                    self.send(Msg::FetchReq {
                        key: (app.clone(), revision),
                        candidates,
                        resolver: id,
                        token,
                    });
                }
                ResolverAction::AbandonFetch { revision, token } => {
                    if let Some(r) = self.resolvers.get_mut(&id) {
                        r.fetches.remove(&token);
                    }
                    self.send(Msg::Abandon {
                        key: Some((app.clone(), revision)),
                        resolver: id,
                        tokens: token..token.saturating_add(1),
                    });
                }
                ResolverAction::ArmTimer {
                    revision,
                    token,
                    delay,
                } => {
                    self.track.issued_res(&revision, token);
                    if let Some(r) = self.resolvers.get_mut(&id) {
                        r.timers.insert(token, revision.clone());
                    }
                    let ev = Event::ResTimer {
                        to: id,
                        revision,
                        token,
                    };
                    self.schedule(self.now + delay, ev);
                }
                ResolverAction::CancelTimer { token } => {
                    if let Some(r) = self.resolvers.get_mut(&id) {
                        r.timers.remove(&token);
                    }
                }
                ResolverAction::RequestReset => {
                    // As the actor does: subscribing again (idempotent)
                    // makes the registry actor send the whole state.
                    self.stats.resets_requested += 1;
                    let app = app.clone();
                    self.send(Msg::WatchApp { app, id });
                }
            }
        }
        if let Some(r) = self.resolvers.get_mut(&id) {
            if !r.flush_scheduled && !r.terminated {
                r.flush_scheduled = true;
                self.send(Msg::Flush { to: id });
            }
        }
    }

    /// `RegistryHealth` to resolver `to`.
    pub fn res_health(&mut self, to: u64, stale_since: Option<std::time::Instant>) {
        if let Some(r) = self.resolvers.get_mut(&to) {
            r.m.set_registry_stale(stale_since);
            self.res_perform(to, Vec::new());
        }
    }

    /// `MetadataFetched` to resolver `to`.
    pub fn res_fetched(
        &mut self,
        to: u64,
        revision: String,
        token: Token,
        result: Result<Arc<MetadataInfo>, FetchError>,
    ) {
        let now = self.at();
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        let current = r.fetches.remove(&token).is_some();
        let outcome = result.as_ref().map(|_| ()).map_err(FetchError::class);
        let actions = r.m.on_fetch_result(&revision, token, result, now);
        if current {
            self.track_fetch_result(to, &revision, outcome);
        }
        self.res_perform(to, actions);
    }

    /// A resolver's retry timer fired.
    pub fn res_timer(&mut self, to: u64, revision: String, token: Token) {
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        if r.timers.remove(&token).is_none() {
            return;
        }
        let actions = r.m.on_retry_due(&revision, token);
        self.res_perform(to, actions);
    }

    /// The resolver's `Flush`: publish its updates to attached directories.
    pub fn res_flush(&mut self, to: u64) {
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        r.flush_scheduled = false;
        let updates = r.m.take_updates();
        let dirs: Vec<(u64, String)> = r.directories.iter().map(|(d, k)| (*d, k.clone())).collect();
        if self.track.all_closed && !updates.is_empty() {
            self.violate("[after-shutdown] a resolver published an update".into());
        }
        for u in updates {
            for (dir, key) in &dirs {
                if *key == u.subscribe_key {
                    let update = u.clone();
                    self.send(Msg::Update { to: *dir, update });
                }
            }
        }
    }

    /// A directory's `Attach` (a known directory gets its state resent), as
    /// the actor does it: what is pending goes to the key's other
    /// directories first, then the attaching one gets everything so far at
    /// the version the key was last sent (its next patch applies on top of
    /// it).
    pub fn res_attach(&mut self, to: u64, key: String, directory: u64) {
        let now = self.at();
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        if r.terminated {
            return;
        }
        let known = r.directories.remove(&directory).is_some();
        let actions = if known {
            Vec::new()
        } else {
            r.m.subscribe_at(&key, now)
        };
        let attach = r.m.attach_update(&key);
        let dirs: Vec<(u64, String)> = r.directories.iter().map(|(d, k)| (*d, k.clone())).collect();
        r.directories.insert(directory, key.clone());
        if self.track.all_closed && !attach.pending.is_empty() {
            self.violate("[after-shutdown] a resolver published an update".into());
        }
        for u in attach.pending {
            for (dir, k) in &dirs {
                if *k == u.subscribe_key {
                    let update = u.clone();
                    self.send(Msg::Update { to: *dir, update });
                }
            }
        }
        if let Some(update) = attach.reset {
            self.send(Msg::Update {
                to: directory,
                update,
            });
        }
        if !known {
            self.res_perform(to, actions);
        }
    }

    /// A directory's `Detach`.
    pub fn res_detach(&mut self, to: u64, key: String, directory: u64) {
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        if r.directories.remove(&directory).is_some() {
            let actions = r.m.unsubscribe(&key);
            self.res_perform(to, actions);
        }
    }

    /// The coordinator's `Shutdown` to resolver `to`: close, then the
    /// closed machine must ignore everything.
    pub fn res_shutdown(&mut self, to: u64) {
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        r.terminated = true;
        let actions = r.m.close();
        self.res_perform(to, actions);
        let Some(mut r) = self.resolvers.remove(&to) else {
            return;
        };
        if !r.timers.is_empty() || !r.fetches.is_empty() {
            self.violate(format!(
                "[after-shutdown] close of resolver {} left timers {:?} and fetches {:?}",
                r.app, r.timers, r.fetches
            ));
        }
        let app = r.app.clone();
        self.send(Msg::UnwatchApp { app, id: to });
        self.poke_resolver(&mut r.m);
        self.graveyard.push(r.m);
        if self.graveyard.len() > 2 {
            self.graveyard.remove(0);
        }
    }
}
