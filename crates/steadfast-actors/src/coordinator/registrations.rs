//! The coordinator's side of `Engine::register` / `unregister` /
//! `registrations`: it forwards intents to the engine's registrar.

use actix::prelude::*;
use steadfast_core::{RegistrationKey, RegistrationState, ServiceInstance};

use super::Coordinator;
use crate::error::EngineError;
use crate::registrar_actor::{RegisterIntent, Registrations, UnregisterIntent};

/// Wants an instance registered (fire and forget).
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub(crate) struct RegisterInstance(pub ServiceInstance);

/// Wants an instance unregistered (fire and forget).
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub(crate) struct UnregisterInstance(pub ServiceInstance);

/// Every registration the registrar keeps, with where it stands.
#[derive(Message)]
#[rtype(result = "Result<Vec<(RegistrationKey, RegistrationState)>, EngineError>")]
pub(crate) struct ListRegistrations;

impl Handler<RegisterInstance> for Coordinator {
    type Result = Result<(), EngineError>;
    fn handle(&mut self, msg: RegisterInstance, _ctx: &mut Self::Context) -> Self::Result {
        match (&self.registrar, self.lifetimes.is_shut_down()) {
            (Some(r), false) => {
                r.do_send(RegisterIntent(msg.0));
                Ok(())
            }
            _ => Err(EngineError::ShutDown),
        }
    }
}

impl Handler<UnregisterInstance> for Coordinator {
    type Result = Result<(), EngineError>;
    fn handle(&mut self, msg: UnregisterInstance, _ctx: &mut Self::Context) -> Self::Result {
        match (&self.registrar, self.lifetimes.is_shut_down()) {
            (Some(r), false) => {
                r.do_send(UnregisterIntent(msg.0));
                Ok(())
            }
            _ => Err(EngineError::ShutDown),
        }
    }
}

impl Handler<ListRegistrations> for Coordinator {
    type Result = ResponseFuture<Result<Vec<(RegistrationKey, RegistrationState)>, EngineError>>;
    fn handle(&mut self, _: ListRegistrations, _ctx: &mut Self::Context) -> Self::Result {
        let registrar = self.registrar.clone();
        Box::pin(async move {
            let r = registrar.ok_or(EngineError::ShutDown)?;
            r.send(Registrations)
                .await
                .map_err(|_| EngineError::ShutDown)
        })
    }
}
