//! Incarnation: the export time (ms) and a random boot id stamped on every
//! exported instance, plus the registry's own creation marker of the record
//! where it has one (etcd `create_revision`); all reach the service URLs so
//! a directory can tell a genuine restart from a stale snapshot.

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::sync::Arc;

use rand::Rng;

/// Metadata key holding the export time in milliseconds since the Unix epoch.
pub const EXPORT_MS_KEY: &str = "steadfast.export-ms";
/// Metadata key holding the random boot id.
pub const BOOT_ID_KEY: &str = "steadfast.boot-id";

/// A random id chosen once per process boot. The form Steadfast stamps (16
/// lowercase hex digits) is held as its number; any other text as a shared
/// string. Compare and show it as the text it was read from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BootId {
    /// 16 lowercase hex digits, as a number.
    Hex(u64),
    /// Any other text (shared, not copied, by every URL of the instance;
    /// behind a thin pointer, so a boot id costs 16 bytes in every record).
    Text(Arc<Box<str>>),
}

impl BootId {
    /// The boot id read from `text`.
    pub fn parse(text: &str) -> Self {
        let canonical = text.len() == 16
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match u64::from_str_radix(text, 16) {
            Ok(n) if canonical => BootId::Hex(n),
            _ => BootId::Text(Arc::new(Box::from(text))),
        }
    }
}

impl From<&str> for BootId {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for BootId {
    fn from(text: String) -> Self {
        Self::parse(&text)
    }
}

impl std::fmt::Display for BootId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BootId::Hex(n) => write!(f, "{n:016x}"),
            BootId::Text(t) => f.write_str(t),
        }
    }
}

/// When and in which boot an instance was exported. Two incarnations are
/// the same boot only when every field is equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Incarnation {
    /// Export time, milliseconds since the Unix epoch.
    pub export_ms: u64,
    /// Random id chosen once per process boot.
    pub boot_id: BootId,
    /// The registry's own creation marker of the record, where it has one
    /// (etcd: the key's `create_revision`): a record the registry replays
    /// keeps it, a new registration gets a new one. Never written into the
    /// record's metadata (the registry sets it when the record is read).
    pub created: Option<NonZeroU64>,
}

impl Incarnation {
    /// A new incarnation at `export_ms` with a boot id drawn from `rng`.
    pub fn new(export_ms: u64, rng: &mut impl Rng) -> Self {
        Self {
            export_ms,
            boot_id: BootId::Hex(rng.gen::<u64>()),
            created: None,
        }
    }

    /// This incarnation with the registry's creation marker `created` (0:
    /// none).
    pub fn with_created(mut self, created: u64) -> Self {
        self.created = NonZeroU64::new(created);
        self
    }

    /// Reads the incarnation from instance metadata.
    pub fn from_metadata(meta: &BTreeMap<String, String>) -> Option<Self> {
        Some(Self {
            export_ms: meta.get(EXPORT_MS_KEY)?.parse().ok()?,
            boot_id: BootId::parse(meta.get(BOOT_ID_KEY)?),
            created: None,
        })
    }

    /// Writes the incarnation into instance metadata (export time and boot
    /// id; the creation marker is the registry's, not the record's).
    pub fn stamp(&self, meta: &mut BTreeMap<String, String>) {
        meta.insert(EXPORT_MS_KEY.into(), self.export_ms.to_string());
        meta.insert(BOOT_ID_KEY.into(), self.boot_id.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_ids_read_back_as_written() {
        for text in [
            "00000000000000ff",
            "deadbeefdeadbeef",
            "DEADBEEFDEADBEEF",
            "b1",
            "",
            "é",
            "+000000000000001",
        ] {
            assert_eq!(BootId::parse(text).to_string(), text);
        }
        assert_eq!(BootId::parse("00000000000000ff"), BootId::Hex(255));
        assert!(matches!(BootId::parse("+000000000000001"), BootId::Text(_)));
    }
}
