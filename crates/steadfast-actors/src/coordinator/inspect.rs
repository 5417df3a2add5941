//! The coordinator's side of [`Engine::inspect`](crate::Engine::inspect):
//! it renders every reference from its directory's published snapshot
//! (lock-free) and hands the addresses of the directories, resolvers,
//! registry actor and registrar to the bounded fan-out
//! (`inspect/collect.rs`). The handler itself awaits nothing.

use actix::prelude::*;

use super::Coordinator;
use crate::error::EngineError;
use crate::inspect::collect::{gather, InspectEngine, Parts};
use crate::inspect::render;
use crate::inspect::EngineReport;
use crate::timer;

impl Handler<InspectEngine> for Coordinator {
    type Result = ResponseFuture<Result<EngineReport, EngineError>>;
    fn handle(&mut self, _: InspectEngine, _: &mut Self::Context) -> Self::Result {
        if self.lifetimes.is_shut_down() {
            return Box::pin(async { Err(EngineError::ShutDown) });
        }
        let now = timer::now();
        let ewma = self.live.balance().peak_ewma;
        let mut unreadable = Vec::new();
        let references = self
            .directories
            .iter()
            .filter_map(|(reference, d)| match d.handle.snapshot() {
                Ok(snapshot) => {
                    let report = render::reference(reference, &snapshot, now, &ewma);
                    Some((report, d.addr.clone()))
                }
                Err(_) => {
                    // Named in `missing`, so the report never looks
                    // complete without it.
                    unreadable.push(reference.subscribe_key());
                    None
                }
            })
            .collect();
        let resolvers = self
            .resolvers
            .iter()
            .map(|(app, a)| (app.clone(), a.clone()))
            .collect();
        let parts = Parts {
            references,
            unreadable,
            resolvers,
            registry: self.registry.clone(),
            backend: self.registry_backend.describe(),
            registrar: self.registrar.clone(),
            now,
        };
        Box::pin(async move { Ok(gather(parts).await) })
    }
}
