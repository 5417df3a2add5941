//! The directory's part of an engine inspection: its tombstoned endpoints.

use actix::prelude::*;

use super::DirectoryActor;
use crate::inspect::collect::InspectTombstones;

impl Handler<InspectTombstones> for DirectoryActor {
    type Result = MessageResult<InspectTombstones>;
    fn handle(&mut self, _: InspectTombstones, _: &mut Self::Context) -> Self::Result {
        let (asked, since) = self.machine.reset_asks();
        MessageResult((self.machine.tombstoned(), asked, since))
    }
}
