//! What the model follows of the event and feed paths, and the invariants
//! on them:
//!
//! - `[older]` an event or delivery that is not newer than the state held
//!   is never served: the subscription machine applies a stream event iff
//!   its version is newer than the version it holds (it reports the ones it
//!   ignores, with the version held, which never goes back), and a resync
//!   never rolls a newer state back; the resolver takes a Reset unless it
//!   is older than its generation and a Delta only on top of exactly its
//!   generation, asks for a Reset iff a newer Delta does not follow, and
//!   nothing else moves its generation; a directory applies an update as
//!   its contract says (older: ignored, a patch on top of another update:
//!   it asks for the full list), and the registry state behind what it
//!   holds never goes back to an older version.
//! - `[full]` once no message is in flight, every directory holds exactly
//!   what a directory rebuilt from its resolvers' full lists
//!   (`ResolverMachine::update_for`) holds: the same endpoints, the same
//!   status, at the same generation per app.

use std::collections::BTreeMap;
use std::sync::Arc;

use steadfast_core::subscription::{Delivery, Feed, SubscriptionAction};
use steadfast_core::{
    Applied, DirectoryUpdate, Instance, Listing, RegistryEvent, ResolverAction, UrlChange, Version,
};

use super::sim::{Msg, Sim};

/// The registry state the registry actor holds for one app, as the model
/// follows it from the events and listings the machine applied.
pub struct Received {
    /// Its version (it may lag the machine's after a resync that changed
    /// nothing; the machine's reports of what it ignores catch it up).
    pub version: Version,
    /// Its instances by id (held ones not included).
    pub by_id: BTreeMap<String, Arc<Instance>>,
}

/// Whether `actions` report `app`'s event as not newer, and the version held.
fn ignored(app: &str, actions: &[SubscriptionAction]) -> Option<(Version, Version)> {
    actions.iter().find_map(|a| match a {
        SubscriptionAction::IgnoredOlder {
            app: a,
            version,
            held,
        } if a == app => Some((*version, *held)),
        _ => None,
    })
}

impl Sim {
    /// The registry actor now holds `by_id` at `version` for `app`.
    fn set_received(
        &mut self,
        app: &str,
        by_id: BTreeMap<String, Arc<Instance>>,
        version: Version,
    ) {
        let now = self.now;
        if let Some(old) = self.track.received.get(app) {
            for id in old.by_id.keys().filter(|id| !by_id.contains_key(*id)) {
                self.track.removed_at.insert(id.clone(), now);
            }
        }
        for id in by_id.keys() {
            self.track.removed_at.remove(id);
        }
        let r = Received { version, by_id };
        self.track.received.insert(app.to_string(), r);
        self.track.urls_dirty = true;
    }

    /// The subscription machine took `event` of the current stream of
    /// `app` and answered `actions`.
    pub fn track_event(
        &mut self,
        app: &str,
        event: &RegistryEvent,
        actions: &[SubscriptionAction],
    ) {
        let version = event.version();
        let held = self.track.received.get(app).map(|r| r.version);
        if let Some((v, h)) = ignored(app, actions) {
            let wrong = if v != version || version > h {
                Some(format!(
                    "ignored the event at {version} as not newer than {h}"
                ))
            } else if held.is_some_and(|t| h < t) || held.is_none() {
                Some(format!("holds {h}, after {held:?}"))
            } else {
                None
            };
            if let Some(w) = wrong {
                self.violate(format!("[older] the registry actor of {app} {w}"));
            }
            if let Some(r) = self.track.received.get_mut(app) {
                r.version = h;
            }
            return;
        }
        if let Some(t) = held.filter(|t| version <= *t) {
            self.violate(format!(
                "[older] the registry actor of {app} applied the event at {version}, not newer \
                 than the state at {t} it holds"
            ));
        }
        let mut by_id = match event {
            RegistryEvent::Reset { .. } => BTreeMap::new(),
            RegistryEvent::Delta { .. } => self
                .track
                .received
                .get(app)
                .map(|r| r.by_id.clone())
                .unwrap_or_default(),
        };
        match event {
            RegistryEvent::Reset { instances, .. } => {
                by_id.extend(instances.iter().map(|i| (i.id().to_string(), i.clone())));
            }
            RegistryEvent::Delta {
                upserts, removals, ..
            } => {
                for id in removals {
                    by_id.remove(id.as_ref());
                }
                by_id.extend(upserts.iter().map(|i| (i.id().to_string(), i.clone())));
            }
        }
        self.set_received(app, by_id, version);
    }

    /// A resync's `listing` of `app` came back and the machine answered
    /// `actions`: a listing that differs from the state held is applied
    /// (and reported), one that does not changes nothing.
    pub fn track_listing(&mut self, app: &str, listing: &Listing, actions: &[SubscriptionAction]) {
        let reconciled = actions
            .iter()
            .any(|a| matches!(a, SubscriptionAction::Reconciled { app: a, .. } if a == app));
        if !reconciled {
            return;
        }
        let held = self.track.received.get(app).map(|r| r.version);
        if let Some(t) = held.filter(|t| listing.version < *t) {
            self.violate(format!(
                "[older] a resync of {app} rolled the state at {t} back to the listing at {}",
                listing.version
            ));
        }
        let by_id = listing
            .instances
            .iter()
            .map(|i| (i.id().to_string(), i.clone()))
            .collect();
        self.set_received(app, by_id, listing.version);
    }

    /// `InstancesChanged` to resolver `to`. The shell reassembles what the
    /// machine holds and checks the feed contract (`[older]`): a Reset
    /// applies unless older than the generation held, a Delta only on top of
    /// exactly that generation; a Delta that does not follow and is newer
    /// asks for a Reset; nothing else moves the generation.
    pub fn res_delivery(&mut self, to: u64, delivery: Delivery) {
        let now = self.at();
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        let before = r.m.generation();
        let generation = delivery.generation;
        let follows = match &delivery.feed {
            Feed::Reset(_) => r.instances.is_none() || generation >= before,
            Feed::Delta { base, .. } => r.instances.is_some() && *base == before,
        };
        let lost = !follows
            && !r.reset_asked
            && generation > before
            && matches!(delivery.feed, Feed::Delta { .. });
        // As the resolver actor does: staleness and hold travel with it.
        let actions = r.m.on_delivery(
            generation,
            delivery.feed.clone(),
            delivery.stale_since,
            delivery.held,
            now,
        );
        let after = r.m.generation();
        let asked = actions
            .iter()
            .any(|a| matches!(a, ResolverAction::RequestReset));
        let app = r.app.clone();
        let kind = match &delivery.feed {
            Feed::Reset(_) => "Reset".to_string(),
            Feed::Delta { base, .. } => format!("Delta on {base}"),
        };
        let wrong = if follows && after != generation {
            Some(format!(
                "did not apply the {kind} at {generation} on top of {before}"
            ))
        } else if !follows && after != before {
            Some(format!(
                "applied the {kind} at {generation} on top of {before}"
            ))
        } else if asked != lost {
            Some(format!(
                "asked for a Reset: {asked}, after the {kind} at {generation} on top of {before}"
            ))
        } else {
            None
        };
        if let Some(w) = wrong {
            self.violate(format!("[older] resolver {app}#{to} {w}"));
        }
        if let Some(r) = self.resolvers.get_mut(&to) {
            if asked {
                r.reset_asked = true;
            } else if follows && matches!(delivery.feed, Feed::Reset(_)) {
                r.reset_asked = false;
            }
        }
        if follows {
            let Some(r) = self.resolvers.get_mut(&to) else {
                return;
            };
            let held = r.instances.get_or_insert_with(BTreeMap::new);
            match delivery.feed {
                Feed::Reset(all) => {
                    *held = all.into_iter().map(|i| (i.id().to_string(), i)).collect();
                }
                Feed::Delta {
                    upserts, removals, ..
                } => {
                    for id in removals {
                        held.remove(id.as_ref());
                    }
                    for i in upserts {
                        held.insert(i.id().to_string(), i);
                    }
                }
            }
            r.revs = held
                .values()
                .filter_map(|i| i.revision().map(String::from))
                .collect();
            let revs = r.revs.clone();
            self.track.urls_dirty = true;
            self.track_snapshot_applied(to, &revs);
        }
        self.res_perform(to, actions);
    }

    /// The registry actor sends `delivery` of `app`: the registry state
    /// behind its generation is the one held now.
    pub fn track_delivered(&mut self, app: &str, delivery: &Delivery) {
        let version = self
            .track
            .received
            .get(app)
            .map(|r| r.version)
            .unwrap_or_default();
        self.track
            .gen_version
            .entry(delivery.generation)
            .or_insert(version);
    }

    /// The registry version behind delivery generation `g`.
    fn version_of(&self, g: u64) -> Version {
        self.track.gen_version.get(&g).copied().unwrap_or_default()
    }

    /// An update reaches directory `to`; a patch it cannot apply makes it
    /// re-attach, as the directory actor does.
    pub fn dir_update(&mut self, to: u64, update: DirectoryUpdate) {
        let Some(d) = self.dirs.values().find(|d| d.id == to) else {
            return;
        };
        let app = update.app.clone();
        let key = d.m.subscribe_key().to_string();
        let held = d.gens.get(&app).copied();
        let expect = match (&update.change, held) {
            _ if update.subscribe_key != key || !d.resolvers.contains_key(&app) => Applied::Ignored,
            (_, Some(g)) if g > update.generation => Applied::Ignored,
            (UrlChange::Full(_), _) => Applied::Yes,
            (UrlChange::Patch { base, .. }, Some(g)) if g == *base => Applied::Yes,
            (UrlChange::Patch { .. }, _) => Applied::NeedFull,
        };
        let generation = update.generation;
        let (from, now_at) = (
            held.map(|g| self.version_of(g)),
            self.version_of(generation),
        );
        let Some(d) = self.dirs.values_mut().find(|d| d.id == to) else {
            return;
        };
        let got = d.m.apply(update);
        let mut reattach = Vec::new();
        match got {
            Applied::Yes => {
                d.gens.insert(app.clone(), generation);
                d.urls = d.m.list();
                self.track.urls_dirty = true;
            }
            Applied::NeedFull => {
                reattach = d
                    .resolvers
                    .values()
                    .map(|rid| Msg::Attach {
                        to: *rid,
                        key: key.clone(),
                        directory: to,
                    })
                    .collect();
            }
            Applied::Ignored => {}
        }
        if got != expect {
            self.violate(format!(
                "[older] directory {key}: the update of {app} at {generation} (held: {held:?}) \
                 was {got:?}, its contract says {expect:?}"
            ));
        }
        if got == Applied::Yes && from.is_some_and(|f| now_at < f) {
            self.violate(format!(
                "[older] directory {key} went back from the registry state of {app} at {from:?} \
                 to the one at {now_at}"
            ));
        }
        if !reattach.is_empty() {
            self.stats.need_full += 1;
        }
        for msg in reattach {
            self.send(msg);
        }
    }

    /// `[full]`: with no message in flight, every directory equals one
    /// rebuilt from its resolvers' full lists.
    pub fn check_full(&mut self) -> Option<String> {
        for d in self.dirs.values_mut() {
            let key = d.m.subscribe_key();
            for (app, rid) in &d.resolvers {
                let Some(r) = self.resolvers.get(rid).filter(|r| !r.terminated) else {
                    return Some(format!(
                        "[full] directory {key}: the resolver of {app} is gone"
                    ));
                };
                if !r.directories.contains_key(&d.id) {
                    return Some(format!(
                        "[full] directory {key} is not attached to the resolver of {app}"
                    ));
                }
                let full = r.m.update_for(key);
                if d.gens.get(app) != Some(&full.generation) {
                    return Some(format!(
                        "[full] directory {key} holds {app} at generation {:?}, its resolver's \
                         full list is at {}",
                        d.gens.get(app),
                        full.generation
                    ));
                }
                // Full lists of a key come at growing generations: each one
                // replaces the app's part of the rebuild.
                if d.rebuilt.apply(full) != Applied::Yes {
                    return Some(format!(
                        "[full] directory {key}: the full list of {app} went back in generation"
                    ));
                }
            }
            let rebuilt = &d.rebuilt;
            let mut got = d.m.list();
            got.sort();
            let mut want = rebuilt.list();
            want.sort();
            if got != want {
                let ids = |u: &[steadfast_core::ServiceUrl]| -> Vec<String> {
                    u.iter()
                        .map(|u| format!("{}:{} w{}", u.instance_id(), u.port(), u.weight()))
                        .collect()
                };
                return Some(format!(
                    "[full] directory {key} serves {:?}, a rebuild from its resolvers' full \
                     lists serves {:?}",
                    ids(&got),
                    ids(&want)
                ));
            }
            let (s, w) = (d.m.status(), rebuilt.status());
            if s != w {
                return Some(format!(
                    "[full] directory {key} says {s:?}, a rebuild from its resolvers' full lists \
                     says {w:?}"
                ));
            }
        }
        None
    }
}
