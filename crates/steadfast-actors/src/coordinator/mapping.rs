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
        for app in &apps {
            self.attach_mapped(reference, app)?;
        }
        if let Some(d) = self.directories.get(reference) {
            d.counted.addr.do_send(MappingPending(pending));
        }
        Ok(())
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

    fn mapping_changed(&mut self, msg: MappingChanged) -> Result<(), EngineError> {
        if self.shut_down {
            return Ok(());
        }
        let Some(f) = self.follows.interfaces.get_mut(&msg.interface) else {
            return Ok(());
        };
        for app in &msg.removed {
            f.apps.remove(app);
        }
        f.apps.extend(msg.added.iter().cloned());
        f.pending = msg.pending.clone();
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
            for app in &msg.added {
                self.attach_mapped(reference, app)?;
            }
            if let Some(d) = self.directories.get(reference) {
                d.counted.addr.do_send(MappingPending(msg.pending.clone()));
            }
        }
        Ok(())
    }
}

impl Handler<MappingChanged> for Coordinator {
    type Result = ();
    fn handle(&mut self, msg: MappingChanged, ctx: &mut Self::Context) {
        self.contained(ctx, |act, _| {
            if let Err(e) = act.mapping_changed(msg) {
                tracing::warn!(error = %e, "interface mapping change not applied");
            }
        });
    }
}
