//! References without apps: their directories follow the interface's
//! mapping. One [`MappingActor`] per interface (reference-counted by the
//! directories following it) watches the mapping; for each app it reports,
//! the coordinator takes a counted reference on the app's resolver and
//! attaches every directory of the interface to it, and for each app that
//! leaves the mapping it detaches them and releases the resolver. Each
//! directory's attached apps are kept here, so unsubscribe and shutdown
//! release exactly the resolver references taken.

use std::collections::{BTreeSet, HashMap};

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::{MetadataInfo, Pending, RecoverPolicy, Reference};

use super::Coordinator;
use crate::contain::Contain;
use crate::directory_actor::mapped::{AddApp, MappingPending, RemoveApp};
use crate::error::EngineError;
use crate::mapping_actor::{MappingActor, MappingChanged, MappingParts};
use crate::messages::Shutdown;
use crate::registrar_actor::MapIntent;
use crate::stats::EngineStats;

/// One interface's followed mapping.
struct Followed {
    addr: Addr<MappingActor>,
    /// Directories following it.
    refs: usize,
    /// Apps the mapping lists now.
    apps: BTreeSet<String>,
    /// What a directory with no app says.
    pending: Option<Pending>,
}

/// Every followed mapping, and the apps each mapping-following directory is
/// attached to (one resolver reference each).
#[derive(Default)]
pub(crate) struct Follows {
    interfaces: HashMap<String, Followed>,
    attached: HashMap<Reference, BTreeSet<String>>,
}

/// The apps a follower still has to attach: those the mapping lists that
/// are not attached yet (a failed attach is not recorded, so it is here
/// again at the next mapping event).
fn to_attach(listed: &BTreeSet<String>, attached: Option<&BTreeSet<String>>) -> Vec<String> {
    match attached {
        Some(a) => listed.difference(a).cloned().collect(),
        None => Vec::new(),
    }
}

/// Runs `attach` for every app, each failure on its own: the failed app is
/// returned with its error and the remaining apps are still attached.
fn attach_each(
    apps: &[String],
    mut attach: impl FnMut(&str) -> Result<(), EngineError>,
) -> Vec<(String, EngineError)> {
    let mut failed = Vec::new();
    for app in apps {
        if let Err(e) = attach(app) {
            failed.push((app.clone(), e));
        }
    }
    failed
}

impl Coordinator {
    /// `reference` (no apps; its directory just started) follows its
    /// interface's mapping: the interface's actor starts if needed, and the
    /// directory attaches to the apps already known.
    pub(super) fn follow_mapping(
        &mut self,
        reference: &Reference,
        me: WeakAddr<Coordinator>,
    ) -> Result<(), EngineError> {
        let interface = reference.interface.clone();
        if !self.follows.interfaces.contains_key(&interface) {
            let id = self.id();
            let parts = MappingParts {
                interface: interface.clone(),
                registry: self.registry_backend.clone(),
                policy: RecoverPolicy::new(self.config.registry_backoff),
                call_timeout: self.config.registry_call_timeout,
                seed: self.seed(id),
                coordinator: me,
            };
            let stats = self.stats.clone();
            let addr = Supervisor::start(move |_| MappingActor::new(parts, stats));
            self.follows.interfaces.insert(
                interface.clone(),
                Followed {
                    addr,
                    refs: 0,
                    apps: BTreeSet::new(),
                    pending: Some(Pending::waiting()),
                },
            );
        }
        let f = self
            .follows
            .interfaces
            .get_mut(&interface)
            .expect("present above");
        f.refs += 1;
        let (apps, pending) = (f.apps.clone(), f.pending.clone());
        self.follows.attached.entry(reference.clone()).or_default();
        self.attach_listed(reference, &apps);
        if let Some(d) = self.directories.get(reference) {
            d.counted.addr.do_send(MappingPending(pending));
        }
        Ok(())
    }

    /// Attaches the directory of `reference` to every app of `listed` it is
    /// not attached to yet; a failure is logged and counted, the app stays
    /// unattached (retried at the next mapping event), and the other apps
    /// are attached all the same.
    fn attach_listed(&mut self, reference: &Reference, listed: &BTreeSet<String>) {
        let todo = to_attach(listed, self.follows.attached.get(reference));
        let failed = attach_each(&todo, |app| self.attach_mapped(reference, app));
        for (app, error) in failed {
            EngineStats::bump(&self.stats.mapping_attach_failures);
            tracing::warn!(%app, interface = %reference.interface, %error,
                "mapped app not attached; retried at the next mapping event");
        }
    }

    /// The directory of `reference` (following a mapping) goes away: its
    /// resolver references are released, and the interface's actor stops
    /// with its last follower.
    pub(super) fn unfollow_mapping(&mut self, reference: &Reference) {
        if let Some(apps) = self.follows.attached.remove(reference) {
            for app in apps {
                self.release_resolver(&app);
            }
        }
        if let Some(f) = self.follows.interfaces.get_mut(&reference.interface) {
            f.refs = f.refs.saturating_sub(1);
            if f.refs == 0 {
                let f = self
                    .follows
                    .interfaces
                    .remove(&reference.interface)
                    .expect("present above");
                f.addr.do_send(Shutdown);
            }
        }
    }

    /// Provider side, the hook of `Coordinator::export`: records `info.app`
    /// for every interface the export serves. Each entry is a key of the
    /// failback registrar (retried until it lands, restored after a session
    /// loss); the mapping is persistent, as Dubbo's is, so stopping the
    /// export leaves it (other instances of the app may still serve the
    /// interface).
    pub(super) fn write_mappings(&mut self, info: &MetadataInfo) {
        let Some(registrar) = &self.registrar else {
            return;
        };
        let interfaces: BTreeSet<&String> = info.services.values().map(|s| &s.name).collect();
        for interface in interfaces {
            registrar.do_send(MapIntent {
                interface: interface.clone(),
                app: info.app.clone(),
            });
        }
    }

    /// Stops every mapping actor (shutdown).
    pub(super) fn stop_mappings(&mut self) {
        self.follows.attached.clear();
        for (_, f) in self.follows.interfaces.drain() {
            f.addr.do_send(Shutdown);
        }
    }

    /// Attaches the directory of `reference` to `app` (once).
    fn attach_mapped(&mut self, reference: &Reference, app: &str) -> Result<(), EngineError> {
        let Some(attached) = self.follows.attached.get(reference) else {
            return Ok(());
        };
        if attached.contains(app) {
            return Ok(());
        }
        let Some(dir) = self
            .directories
            .get(reference)
            .map(|d| d.counted.addr.clone())
        else {
            return Ok(());
        };
        let resolver = self.resolver_for(app)?;
        if let Some(a) = self.follows.attached.get_mut(reference) {
            a.insert(app.to_string());
        }
        dir.do_send(AddApp {
            app: app.to_string(),
            resolver,
        });
        Ok(())
    }

    /// Detaches the directory of `reference` from `app` and releases the
    /// resolver reference it held.
    fn detach_mapped(&mut self, reference: &Reference, app: &str) {
        let removed = self
            .follows
            .attached
            .get_mut(reference)
            .is_some_and(|a| a.remove(app));
        if !removed {
            return;
        }
        if let Some(d) = self.directories.get(reference) {
            d.counted.addr.do_send(RemoveApp(app.to_string()));
        }
        self.release_resolver(app);
    }

    fn mapping_changed(&mut self, msg: MappingChanged) {
        if self.shut_down {
            return;
        }
        let Some(f) = self.follows.interfaces.get_mut(&msg.interface) else {
            return;
        };
        for app in &msg.removed {
            f.apps.remove(app);
        }
        f.apps.extend(msg.added.iter().cloned());
        f.pending = msg.pending.clone();
        let listed = f.apps.clone();
        let followers: Vec<Reference> = self
            .follows
            .attached
            .keys()
            .filter(|r| r.interface == msg.interface)
            .cloned()
            .collect();
        for reference in &followers {
            for app in &msg.removed {
                self.detach_mapped(reference, app);
            }
            // Every listed app not attached yet, not only the added ones:
            // an attach that failed before is retried now.
            self.attach_listed(reference, &listed);
            if let Some(d) = self.directories.get(reference) {
                d.counted.addr.do_send(MappingPending(msg.pending.clone()));
            }
        }
    }
}

impl Handler<MappingChanged> for Coordinator {
    type Result = ();
    fn handle(&mut self, msg: MappingChanged, ctx: &mut Self::Context) {
        self.contained(ctx, |act, _| act.mapping_changed(msg));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(apps: &[&str]) -> BTreeSet<String> {
        apps.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn one_failed_attach_does_not_skip_the_others_and_is_retried_later() {
        let listed = set(&["a", "b", "c"]);
        let mut attached = BTreeSet::new();
        let todo = to_attach(&listed, Some(&attached));
        let failed = attach_each(&todo, |app| {
            if app == "a" {
                return Err(EngineError::ShutDown);
            }
            attached.insert(app.to_string());
            Ok(())
        });
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, "a");
        // The apps after the failed one are attached all the same.
        assert_eq!(attached, set(&["b", "c"]));
        // The next mapping event (even one adding nothing) retries "a" only.
        assert_eq!(to_attach(&listed, Some(&attached)), vec!["a".to_string()]);
        // A reference not following the mapping attaches nothing.
        assert!(to_attach(&listed, None).is_empty());
    }
}
