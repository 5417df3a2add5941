//! The resolver's part of an engine inspection: its app's instances and
//! revisions with their resolution state (read-only, nothing scheduled).

use actix::prelude::*;
use steadfast_core::AppInspection;

use super::ResolverActor;
use crate::inspect::collect::InspectApp;
use crate::timer;

impl Handler<InspectApp> for ResolverActor {
    type Result = Option<AppInspection>;
    fn handle(&mut self, _: InspectApp, _: &mut Self::Context) -> Self::Result {
        if self.terminated {
            return None;
        }
        Some(self.machine.inspect(timer::now()))
    }
}
