//! Incarnation: the export time (ms) and a random boot id stamped on every
//! exported instance; both reach the service URLs so a directory can tell a
//! genuine restart from a stale snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::Rng;

/// Metadata key holding the export time in milliseconds since the Unix epoch.
pub const EXPORT_MS_KEY: &str = "steadfast.export-ms";
/// Metadata key holding the random boot id.
pub const BOOT_ID_KEY: &str = "steadfast.boot-id";

/// When and in which boot an instance was exported.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Incarnation {
    /// Export time, milliseconds since the Unix epoch.
    pub export_ms: u64,
    /// Random id chosen once per process boot (shared, not copied, by every
    /// URL of the instance).
    pub boot_id: Arc<str>,
}

impl Incarnation {
    /// A new incarnation at `export_ms` with a boot id drawn from `rng`.
    pub fn new(export_ms: u64, rng: &mut impl Rng) -> Self {
        Self {
            export_ms,
            boot_id: Arc::from(format!("{:016x}", rng.gen::<u64>())),
        }
    }

    /// Reads the incarnation from instance metadata.
    pub fn from_metadata(meta: &BTreeMap<String, String>) -> Option<Self> {
        Some(Self {
            export_ms: meta.get(EXPORT_MS_KEY)?.parse().ok()?,
            boot_id: Arc::from(meta.get(BOOT_ID_KEY)?.as_str()),
        })
    }

    /// Writes the incarnation into instance metadata.
    pub fn stamp(&self, meta: &mut BTreeMap<String, String>) {
        meta.insert(EXPORT_MS_KEY.into(), self.export_ms.to_string());
        meta.insert(BOOT_ID_KEY.into(), self.boot_id.to_string());
    }
}
