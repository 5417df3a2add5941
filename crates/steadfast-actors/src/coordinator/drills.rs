//! Drills of the supervision (feature `testkit`, and this crate's tests):
//! [`Engine::force_restart`] makes one actor crash-restart under its
//! supervisor, [`Engine::drill_panic`] makes its next real handler panic at
//! its drill point. Neither exists in a default build.

use actix::prelude::*;
use steadfast_core::Reference;

use super::Coordinator;
use crate::contain::DrillPanic;
use crate::engine::Engine;
use crate::error::EngineError;

/// Which actor a forced restart hits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartTarget {
    /// The registry subscription actor.
    Registry,
    /// The shared metadata cache actor.
    Cache,
    /// The resolver of one provider app.
    Resolver(String),
    /// The directory of one reference.
    Directory(Reference),
    /// The follower of one interface's mapping (references without apps).
    Mapping(String),
    /// The failback registrar.
    Registrar,
    /// One export (its `ExportHandle::id`).
    Export(u64),
    /// The engine's coordinator itself.
    Coordinator,
}

/// Makes a supervised actor stop so its supervisor restarts it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ForceRestart;

/// Force a supervised restart.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub(crate) struct Restart(pub RestartTarget);

/// Make one actor's handler panic (drills of the containment).
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub(crate) struct Panic(pub RestartTarget);

impl Handler<Restart> for Coordinator {
    type Result = Result<(), EngineError>;
    fn handle(&mut self, msg: Restart, ctx: &mut Self::Context) -> Self::Result {
        if self.lifetimes.is_shut_down() {
            return Err(EngineError::ShutDown);
        }
        let sent = match &msg.0 {
            RestartTarget::Coordinator => {
                ctx.stop();
                Some(())
            }
            RestartTarget::Registry => self.registry.as_ref().map(|a| a.do_send(ForceRestart)),
            RestartTarget::Cache => self.cache.as_ref().map(|a| a.do_send(ForceRestart)),
            RestartTarget::Resolver(app) => {
                self.resolvers.get(app).map(|a| a.do_send(ForceRestart))
            }
            RestartTarget::Directory(r) => self
                .directories
                .get(r)
                .map(|d| d.addr.do_send(ForceRestart)),
            RestartTarget::Mapping(i) => self.mapping_of(i).map(|a| a.do_send(ForceRestart)),
            RestartTarget::Registrar => self.registrar.as_ref().map(|a| a.do_send(ForceRestart)),
            RestartTarget::Export(id) => self.exports.get(id).map(|(a, _)| a.do_send(ForceRestart)),
        };
        sent.ok_or(EngineError::UnknownTarget(format!("{:?}", msg.0)))
    }
}

impl Handler<Panic> for Coordinator {
    type Result = Result<(), EngineError>;
    fn handle(&mut self, msg: Panic, _ctx: &mut Self::Context) -> Self::Result {
        if self.lifetimes.is_shut_down() {
            return Err(EngineError::ShutDown);
        }
        let sent = match &msg.0 {
            RestartTarget::Coordinator => {
                self.containment.arm_drill();
                Some(())
            }
            RestartTarget::Registry => self.registry.as_ref().map(|a| a.do_send(DrillPanic)),
            RestartTarget::Cache => self.cache.as_ref().map(|a| a.do_send(DrillPanic)),
            RestartTarget::Resolver(app) => self.resolvers.get(app).map(|a| a.do_send(DrillPanic)),
            RestartTarget::Directory(r) => {
                self.directories.get(r).map(|d| d.addr.do_send(DrillPanic))
            }
            RestartTarget::Mapping(i) => self.mapping_of(i).map(|a| a.do_send(DrillPanic)),
            RestartTarget::Registrar => self.registrar.as_ref().map(|a| a.do_send(DrillPanic)),
            RestartTarget::Export(id) => self.exports.get(id).map(|(a, _)| a.do_send(DrillPanic)),
        };
        sent.ok_or(EngineError::UnknownTarget(format!("{:?}", msg.0)))
    }
}

impl Engine {
    /// Makes one actor crash-restart under its supervisor (tests, drills).
    pub async fn force_restart(&self, target: RestartTarget) -> Result<(), EngineError> {
        self.life
            .coordinator
            .send(Restart(target))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Arms a drill (tests, drills): the next real handler of one actor
    /// panics at its drill point; the panic is contained, counted
    /// (`handler_panics`), and the actor restarts under its supervisor with
    /// its state resynced.
    pub async fn drill_panic(&self, target: RestartTarget) -> Result<(), EngineError> {
        self.life
            .coordinator
            .send(Panic(target))
            .await
            .map_err(|_| EngineError::ShutDown)?
    }
}
