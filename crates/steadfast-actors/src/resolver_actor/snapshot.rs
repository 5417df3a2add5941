//! The resolver's side of disk snapshots: at its first start it asks the
//! snapshot actor for its app's snapshot and seeds the machine with it
//! (only while the registry has delivered nothing; the metadata cache is
//! seeded with its revisions too); after each burst that changed the
//! state it tells the sans-IO [`WriteSchedule`] whether the state is worth
//! writing (authoritative, fresh, fully resolved) and sends the state to
//! the snapshot actor when the schedule says so. The data comes from the
//! machine the resolver owns: no call, no shared state.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakAddr;
use steadfast_core::snapshot::{WriteDecision, WriteSchedule};

use super::ResolverActor;
use crate::contain::Contain;
use crate::messages::SeedMetadata;
use crate::snapshot_actor::{unix_ms, LoadSnapshot, SnapshotActor, SnapshotLoaded, StoreSnapshot};
use crate::stats::EngineStats;
use crate::timer;

/// A resolver's link to the snapshot actor and its write schedule.
pub(crate) struct SnapshotLink {
    actor: WeakAddr<SnapshotActor>,
    schedule: WriteSchedule,
    timer: Option<SpawnHandle>,
    asked: bool,
}

impl SnapshotLink {
    /// The link of a re-created resolver: the same snapshot actor and
    /// interval, a fresh write schedule, and no load from disk (the disk
    /// seeds a cold start only; a replacement learns from the registry
    /// actor's state, which is newer).
    pub(super) fn recreate(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            schedule: WriteSchedule::new(self.schedule.interval()),
            timer: None,
            asked: true,
        }
    }
}

impl ResolverActor {
    /// Loads the app's snapshot at start and writes its good states
    /// through `actor`, at most once per `write_interval`.
    pub fn with_snapshot(
        mut self,
        actor: WeakAddr<SnapshotActor>,
        write_interval: Duration,
    ) -> Self {
        self.snapshot = Some(SnapshotLink {
            actor,
            schedule: WriteSchedule::new(write_interval),
            timer: None,
            asked: false,
        });
        self
    }

    /// First start: ask for the app's snapshot (once per actor).
    pub(super) fn snapshot_started(&mut self, ctx: &mut Context<Self>) {
        let Some(link) = self.snapshot.as_mut() else {
            return;
        };
        if std::mem::replace(&mut link.asked, true) {
            return;
        }
        if let Some(a) = link.actor.upgrade() {
            a.do_send(LoadSnapshot {
                app: self.machine.app().to_string(),
                reply: ctx.address().downgrade().recipient(),
            });
        }
    }

    /// After a burst of inputs: `changed` says whether it changed what the
    /// directories see.
    pub(super) fn snapshot_after_flush(&mut self, changed: bool, ctx: &mut Context<Self>) {
        // Without a snapshot directory there is nothing to decide: skip the
        // worthiness scan on this per-burst path.
        if !changed || self.terminated || self.snapshot.is_none() {
            return;
        }
        let good = self.machine.snapshot_worthy();
        let Some(link) = self.snapshot.as_mut() else {
            return;
        };
        match link.schedule.on_state(good, timer::now()) {
            WriteDecision::Write => self.snapshot_write(),
            WriteDecision::ArmTimer(delay) => {
                let h = ctx.run_later(delay, |act, ctx| {
                    act.contained(ctx, |act, _| {
                        let good = act.machine.snapshot_worthy();
                        let Some(link) = act.snapshot.as_mut() else {
                            return;
                        };
                        link.timer = None;
                        if link.schedule.on_timer(good, timer::now()) {
                            act.snapshot_write();
                        }
                    });
                });
                link.timer = Some(h);
            }
            WriteDecision::Wait => {}
        }
    }

    fn snapshot_write(&self) {
        let Some(link) = self.snapshot.as_ref() else {
            return;
        };
        let (Some(actor), Some(state)) =
            (link.actor.upgrade(), self.machine.snapshot_state(unix_ms()))
        else {
            return;
        };
        actor.do_send(StoreSnapshot(state));
    }
}

impl Handler<SnapshotLoaded> for ResolverActor {
    type Result = ();
    fn handle(&mut self, msg: SnapshotLoaded, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            if act.terminated {
                return;
            }
            let app = act.machine.app().to_string();
            let metadata: Vec<_> = msg
                .snapshot
                .metadata
                .iter()
                .map(|(rev, info)| (rev.clone(), Arc::new(info.clone())))
                .collect();
            let instances = msg.snapshot.instances.len();
            let Some(actions) = act
                .machine
                .seed_from_snapshot(msg.snapshot, msg.age, timer::now())
            else {
                tracing::debug!(
                    app,
                    "registry state arrived before the snapshot; not served"
                );
                return;
            };
            EngineStats::bump(&act.stats.snapshot_loaded);
            tracing::info!(
                app,
                instances,
                age_ms = u64::try_from(msg.age.as_millis()).unwrap_or(u64::MAX),
                "serving the disk snapshot until the registry delivers a state"
            );
            if let Some(cache) = act.cache.upgrade() {
                for (revision, info) in metadata {
                    cache.do_send(SeedMetadata {
                        key: (app.clone(), revision),
                        info,
                    });
                }
            }
            act.perform(actions, ctx);
        });
    }
}
