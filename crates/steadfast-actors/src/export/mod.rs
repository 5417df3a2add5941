//! Provider export: from the services a provider exposes, compute the
//! revision, stamp the incarnation, publish the metadata, register the
//! instance (retrying until it lands), and shut down gracefully.

mod actor;
mod in_flight;
mod spec;

pub use actor::{ExportActor, ExportHandle, ShutdownReport};
pub(crate) use actor::{ExportParts, GracefulStop};
pub use in_flight::{InFlight, InFlightGuard};
pub use spec::{build_export, ExportSpec, EXPORT_VARS};
