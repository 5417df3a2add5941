//! References without apps: their directories follow the interface's
//! mapping. One [`MappingActor`] per interface watches the mapping, for as
//! long as [`Lifetimes`](steadfast_core::Lifetimes) counts a directory
//! following it. For each app the mapping reports, every follower is
//! attached to the app's resolver (the machine counts the attach on the
//! resolver); for each app that leaves the mapping they are detached (and
//! the resolver stops with its last need). The machine keeps each
//! follower's attached apps, so unsubscribe and shutdown release exactly
//! what was taken.

use std::collections::{BTreeSet, HashMap};

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::{MetadataInfo, Pending, RecoverPolicy, Reference};

use super::Coordinator;
use crate::contain::Contain;
use crate::directory_actor::mapped::{AddApp, MappingPending, RemoveApp};
use crate::mapping_actor::{MappingActor, MappingChanged, MappingParts};
use crate::messages::Shutdown;
use crate::registrar_actor::MapIntent;
use crate::stats::EngineStats;

/// One interface's followed mapping.
struct Followed {
    addr: Addr<MappingActor>,
    /// Apps the mapping lists now.
    apps: BTreeSet<String>,
    /// What a directory with no app says.
    pending: Option<Pending>,
}

/// Every followed mapping.
#[derive(Default)]
pub(crate) struct Follows {
    interfaces: HashMap<String, Followed>,
}

impl Coordinator {
    /// Starts following `interface`'s mapping (its first follower).
    pub(super) fn follow_interface(&mut self, interface: &str, me: WeakAddr<Coordinator>) {
        let id = self.id();
        let parts = MappingParts {
            interface: interface.to_string(),
            registry: self.registry_backend.clone(),
            policy: RecoverPolicy::new(self.config.registry_backoff),
            call_timeout: self.config.registry_call_timeout,
            seed: self.seed(id),
            coordinator: me,
        };
        let stats = self.stats.clone();
        let addr = Supervisor::start(move |_| MappingActor::new(parts, stats));
        self.follows.interfaces.insert(
            interface.to_string(),
            Followed {
                addr,
                apps: BTreeSet::new(),
                pending: Some(Pending::waiting()),
            },
        );
    }

    /// The follower of `interface`'s mapping, when it is followed.
    #[cfg(any(test, feature = "testkit"))]
    pub(super) fn mapping_of(&self, interface: &str) -> Option<&Addr<MappingActor>> {
        self.follows.interfaces.get(interface).map(|f| &f.addr)
    }

    /// Stops following `interface`'s mapping (its last follower left).
    pub(super) fn unfollow_interface(&mut self, interface: &str) {
        if let Some(f) = self.follows.interfaces.remove(interface) {
            f.addr.do_send(Shutdown);
        }
    }

    /// A new follower `reference` (its directory just started) attaches to
    /// the apps its interface's mapping lists already, and says what the
    /// mapping says.
    pub(super) fn attach_follower(&mut self, reference: &Reference) {
        let Some(f) = self.follows.interfaces.get(&reference.interface) else {
            return;
        };
        let (apps, pending) = (f.apps.clone(), f.pending.clone());
        self.attach_listed(reference, &apps);
        if let Some(d) = self.directories.get(reference) {
            d.addr.do_send(MappingPending(pending));
        }
    }

    /// Attaches the directory of `reference` to every app of `listed` it is
    /// not attached to yet. A failure is logged and counted; the app stays
    /// unattached (retried at the next mapping event), and the other apps
    /// are attached all the same.
    fn attach_listed(&mut self, reference: &Reference, listed: &BTreeSet<String>) {
        for app in listed {
            let Some(start) = self.lifetimes.attach_mapped(reference, app) else {
                continue;
            };
            let resolver = if start {
                self.start_resolver(app)
                    .and_then(|()| self.resolver_of(app))
            } else {
                self.resolver_of(app)
            };
            match resolver {
                Ok(resolver) => {
                    if let Some(d) = self.directories.get(reference) {
                        d.addr.do_send(AddApp {
                            app: app.to_string(),
                            resolver,
                        });
                    }
                }
                Err(error) => {
                    self.lifetimes.attach_failed(reference, app);
                    EngineStats::bump(&self.stats.mapping_attach_failures);
                    tracing::warn!(%app, interface = %reference.interface, %error,
                        "mapped app not attached; retried at the next mapping event");
                }
            }
        }
    }

    /// Detaches the directory of `reference` from `app`; its resolver stops
    /// when that was its last need.
    fn detach_mapped(&mut self, reference: &Reference, app: &str) {
        let Some(stop) = self.lifetimes.detach_mapped(reference, app) else {
            return;
        };
        if let Some(d) = self.directories.get(reference) {
            d.addr.do_send(RemoveApp(app.to_string()));
        }
        if stop {
            self.stop_resolver(app);
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
        for (_, f) in self.follows.interfaces.drain() {
            f.addr.do_send(Shutdown);
        }
    }

    fn mapping_changed(&mut self, msg: MappingChanged) {
        if self.lifetimes.is_shut_down() {
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
        let followers: Vec<Reference> = self.lifetimes.followers(&msg.interface).cloned().collect();
        for reference in &followers {
            for app in &msg.removed {
                self.detach_mapped(reference, app);
            }
            // Every listed app not attached yet, not only the added ones:
            // an attach that failed before is retried now.
            self.attach_listed(reference, &listed);
            if let Some(d) = self.directories.get(reference) {
                d.addr.do_send(MappingPending(msg.pending.clone()));
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
