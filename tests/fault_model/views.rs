//! What the model follows of the event and feed paths, and the invariants
//! on them:
//!
//! - `[older]` the one gap rule of the data path (`Change::fit`) holds at
//!   every stage: the subscription machine applies a stream event iff it
//!   fits the version it holds (an older one is reported ignored, a delta
//!   that does not follow is reported as a gap and never applied), and a
//!   resync never rolls a newer state back; the resolver applies a
//!   delivery iff it fits its version, asks for a Reset exactly when a
//!   delivery is a gap and no ask was made within the last
//!   `RESET_ASK_INTERVAL`, and nothing else moves its version; a directory
//!   applies an update iff it fits the version held for its app (a gap: it
//!   asks its resolver for the whole state), and the versions it holds
//!   never go back.
//! - `[full]` once no message is in flight, every directory holds exactly
//!   what a directory rebuilt from its resolvers' whole states
//!   (`ResolverMachine::update_for`) holds: the same endpoints, the same
//!   status, at the same version per app (a rebuild and the incremental
//!   path give the same directory).

use std::collections::BTreeMap;
use std::sync::Arc;

use steadfast_core::{
    Applied, DirectoryUpdate, Fit, Instance, Listing, RegistryEvent, ResolverAction, Version,
    RESET_ASK_INTERVAL,
};
use steadfast_core::{Delivery, Feed, SubscriptionAction};

use super::sim::{Event, Msg, Sim};

/// The tombstone TTL the simulated directories apply updates with (the
/// engine default).
const TOMBSTONE_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// The registry state the registry actor holds for one app, as the model
/// follows it from the events and listings the machine applied.
pub struct Received {
    /// Its version (it may lag the machine's after a resync that changed
    /// nothing; the machine's reports of what it ignores catch it up).
    pub version: Version,
    /// Its instances by id (held ones not included).
    pub by_id: BTreeMap<String, Arc<Instance>>,
}

/// Whether `actions` report `app`'s event as not newer, or as a gap.
fn reported(app: &str, actions: &[SubscriptionAction]) -> Option<Fit> {
    actions.iter().find_map(|a| match a {
        SubscriptionAction::IgnoredOlder { app: a, .. } if a == app => Some(Fit::Older),
        SubscriptionAction::Gap { app: a, .. } if a == app => Some(Fit::Gap),
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

    /// The registry state the subscription machine holds for `app`, before
    /// an input (for [`Sim::track_event`]).
    pub fn reg_version(&self, app: &str) -> Option<Version> {
        self.reg.m.registry_state(app).map(|l| l.version)
    }

    /// Follows what the subscription machine now holds for `app` (the
    /// deltas it kept during a gap included), checking that its version
    /// never goes back.
    fn sync_received(&mut self, app: &str) {
        let Some(listing) = self.reg.m.registry_state(app) else {
            return;
        };
        let held = self.track.received.get(app).map(|r| r.version);
        if held.is_some_and(|h| listing.version < h) {
            self.violate(format!(
                "[older] the registry actor of {app} went back from {held:?} to {}",
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

    /// The subscription machine, holding `before`, took `event` of the
    /// current stream of `app` and answered `actions`: it applied it iff it
    /// fits (`[older]`).
    pub fn track_event(
        &mut self,
        app: &str,
        before: Option<Version>,
        event: &RegistryEvent,
        actions: &[SubscriptionAction],
    ) {
        let want = event.fit(before);
        let got = reported(app, actions).unwrap_or(Fit::Apply);
        let after = self.reg_version(app);
        let moved = match got {
            Fit::Apply => after >= Some(event.version()),
            _ => after == before,
        };
        if got != want || !moved {
            self.violate(format!(
                "[older] the registry actor of {app}, at {before:?}, took the event at {} as \
                 {got:?} (the rule says {want:?}); it holds {after:?} now",
                event.version()
            ));
        }
        self.sync_received(app);
    }

    /// A resync's `listing` of `app` came back and the machine answered
    /// `actions`: a listing is applied only if not older than the state
    /// held (a resync never rolls a newer pushed state back).
    pub fn track_listing(
        &mut self,
        app: &str,
        before: Option<Version>,
        listing: &Listing,
        actions: &[SubscriptionAction],
    ) {
        let reconciled = actions
            .iter()
            .any(|a| matches!(a, SubscriptionAction::Reconciled { app: a, .. } if a == app));
        if let Some(t) = before.filter(|t| reconciled && listing.version < *t) {
            self.violate(format!(
                "[older] a resync of {app} rolled the state at {t} back to the listing at {}",
                listing.version
            ));
        }
        self.sync_received(app);
    }

    /// A delivery to resolver `to`. The shell reassembles what the machine
    /// holds and checks the gap rule (`[older]`): a delivery applies iff it
    /// fits the version held; a gap asks for a Reset unless one was asked
    /// within the last `RESET_ASK_INTERVAL`; nothing else moves the version.
    pub fn res_delivery(&mut self, to: u64, delivery: Delivery) {
        let now = self.at();
        let clock = self.now;
        let Some(r) = self.resolvers.get_mut(&to) else {
            return;
        };
        let before = r.m.version();
        let held = r.instances.is_some().then_some(before);
        let fit = delivery.feed.fit(held);
        let follows = fit == Fit::Apply;
        let due = r
            .asked_at
            .is_none_or(|t| clock.saturating_sub(t) >= RESET_ASK_INTERVAL);
        let lost = fit == Fit::Gap && due;
        let version = delivery.version();
        // As the resolver actor does: staleness and hold travel with it.
        let actions = r.m.on_delivery(delivery.clone(), now);
        let after = r.m.version();
        let asked = actions
            .iter()
            .any(|a| matches!(a, ResolverAction::RequestReset));
        let app = r.app.clone();
        let kind = match &delivery.feed {
            Feed::Reset { .. } => "Reset".to_string(),
            Feed::Delta { base, .. } => format!("Delta on {base}"),
        };
        let wrong = if follows && after != version {
            Some(format!(
                "did not apply the {kind} at {version} on top of {before}"
            ))
        } else if !follows && after != before {
            Some(format!(
                "applied the {kind} at {version} on top of {before}"
            ))
        } else if asked != lost {
            Some(format!(
                "asked for a Reset: {asked}, after the {kind} at {version} on top of {before}"
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
                r.asked_at = Some(clock);
            } else if follows && delivery.feed.is_reset() {
                r.reset_asked = false;
            }
        }
        if follows {
            let Some(r) = self.resolvers.get_mut(&to) else {
                return;
            };
            let held = r.instances.get_or_insert_with(BTreeMap::new);
            match delivery.feed {
                Feed::Reset { items, .. } => {
                    *held = items.into_iter().map(|i| (i.id().to_string(), i)).collect();
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
        // As the resolver actor does: a replacement that applied its first
        // delivery has asked for what it needs; its predecessor's requests
        // are let go.
        if let Some(below) = self
            .resolvers
            .get_mut(&to)
            .and_then(|r| r.orphans_below.take())
        {
            self.send(Msg::Abandon {
                key: None,
                resolver: to,
                tokens: 0..below,
            });
        }
    }

    /// An update reaches directory `to`; one that does not follow makes it
    /// re-attach, as the directory actor does.
    pub fn dir_update(&mut self, to: u64, update: DirectoryUpdate) {
        let at = self.at();
        let Some(d) = self.dirs.values().find(|d| d.id == to) else {
            return;
        };
        let app = update.app.clone();
        let key = d.m.subscribe_key().to_string();
        let held = d.gens.get(&app).copied();
        let expect = if update.subscribe_key != key || !d.resolvers.contains_key(&app) {
            Applied::Ignored
        } else {
            match update.change.fit(held) {
                Fit::Apply => Applied::Yes,
                Fit::Older => Applied::Ignored,
                Fit::Gap => Applied::Gap,
            }
        };
        let version = update.version();
        let Some(d) = self.dirs.values_mut().find(|d| d.id == to) else {
            return;
        };
        let got = d.m.apply_at(update, at, TOMBSTONE_TTL).0;
        let mut reattach = Vec::new();
        match got {
            Applied::Yes => {
                d.gens.insert(app.clone(), version);
                d.urls = d.m.list();
                self.track.urls_dirty = true;
            }
            Applied::Gap => {
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
        // A gap within a second of the last one asked is not asked again.
        let paced = expect == Applied::Gap && got == Applied::Ignored;
        if got != expect && !paced {
            self.violate(format!(
                "[older] directory {key}: the update of {app} at {version} (held: {held:?}) \
                 was {got:?}, its contract says {expect:?}"
            ));
        }
        if got == Applied::Yes && held.is_some_and(|h| version < h) {
            self.violate(format!(
                "[older] directory {key} went back from {app} at {held:?} to {version}"
            ));
        }
        self.arm_tomb_timer(to);
        if !reattach.is_empty() {
            self.stats.need_full += 1;
        }
        for msg in reattach {
            self.send(msg);
        }
    }

    /// (Re)arms directory `to`'s tombstone-expiry timer at its machine's
    /// next deadline, as the directory actor does after every change.
    pub fn arm_tomb_timer(&mut self, to: u64) {
        let t0 = self.t0;
        let Some(d) = self.dirs.values_mut().find(|d| d.id == to) else {
            return;
        };
        let want = d.m.next_deadline();
        if want == d.tomb_at {
            return;
        }
        d.tomb_at = want;
        if let Some(at) = want {
            self.schedule(at.saturating_duration_since(t0), Event::TombTimer { to });
        }
    }

    /// Directory `to`'s tombstone-expiry timer fired.
    pub fn tomb_timer(&mut self, to: u64) {
        let at = self.at();
        let Some(d) = self.dirs.values_mut().find(|d| d.id == to) else {
            return;
        };
        // A timer re-armed for another deadline since: this one is stale.
        if d.tomb_at.is_none_or(|t| t > at) {
            return;
        }
        d.tomb_at = None;
        if d.m.on_timeout(at).applied() {
            d.urls = d.m.list();
            self.track.urls_dirty = true;
        }
        self.arm_tomb_timer(to);
    }

    /// `[full]`: with no message in flight, every directory equals one
    /// rebuilt from its resolvers' full lists (not while one of them is a
    /// replacement still resyncing: the directory holds what it had).
    pub fn check_full(&mut self) -> Option<String> {
        let at = self.at();
        for d in self.dirs.values_mut() {
            let key = d.m.subscribe_key();
            let resyncing = d
                .resolvers
                .values()
                .any(|rid| self.resolvers.get(rid).is_some_and(|r| r.m.is_resyncing()));
            // A replacement directory serves an app it waits for from what
            // it published last.
            if resyncing || d.resolvers.keys().any(|a| d.m.awaits(a)) {
                continue;
            }
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
                if d.gens.get(app) != Some(&full.version()) {
                    return Some(format!(
                        "[full] directory {key} holds {app} at {:?}, its resolver's whole \
                         state is at {}",
                        d.gens.get(app),
                        full.version()
                    ));
                }
                // Whole states of a key come at growing versions: each one
                // replaces the app's part of the rebuild.
                if d.rebuilt.apply_at(full, at, TOMBSTONE_TTL).0 != Applied::Yes {
                    return Some(format!(
                        "[full] directory {key}: the whole state of {app} went back in version"
                    ));
                }
            }
            // A tombstone vetoes what the full lists hold, for its TTL: the
            // directory's content then depends on the closings it saw, which
            // a rebuild from full lists cannot know. The comparison waits
            // until both hold none (tombstones have their own tests).
            d.rebuilt.on_timeout(at);
            if d.m.tombstones() > 0 || d.rebuilt.tombstones() > 0 {
                continue;
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
