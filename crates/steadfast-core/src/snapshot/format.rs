//! Encoding and decoding one app's snapshot file. The decoder checks, in
//! order: size bound, magic, version, header length, payload length,
//! checksum, payload, and that everything in it belongs to the app asked
//! for. It never panics and never slices by an unchecked index.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::SnapshotError;
use crate::model::{MetadataInfo, ServiceInstance};

/// First bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"STFSNAP\n";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes before the payload: magic, version, payload length, checksum.
pub const HEADER_LEN: usize = 8 + 4 + 8 + 32;
/// Bytes the checksum covers before the payload.
const PREFIX_LEN: usize = 8 + 4 + 8;

/// The last good state of one subscribed app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppSnapshot {
    /// The provider app.
    pub app: String,
    /// When the state was written, in milliseconds since the Unix epoch.
    pub written_at_ms: u64,
    /// The app's instances, as registered.
    pub instances: Vec<ServiceInstance>,
    /// The resolved metadata of every revision the instances advertise,
    /// keyed by revision.
    pub metadata: BTreeMap<String, MetadataInfo>,
}

fn checksum(prefix: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prefix);
    h.update(payload);
    h.finalize().into()
}

/// Encodes `snapshot`; refuses a file over `max_bytes`.
pub fn encode(snapshot: &AppSnapshot, max_bytes: usize) -> Result<Vec<u8>, SnapshotError> {
    let payload = serde_json::to_vec(snapshot).map_err(SnapshotError::Malformed)?;
    let size = payload.len().saturating_add(HEADER_LEN);
    if size > max_bytes {
        return Err(SnapshotError::TooLarge {
            size: size as u64,
            max: max_bytes as u64,
        });
    }
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let sum = checksum(&out, &payload);
    out.extend_from_slice(&sum);
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes the snapshot file `bytes` of `app`, refusing anything over
/// `max_bytes`, damaged, of another format or version, or of another app.
pub fn decode(bytes: &[u8], app: &str, max_bytes: usize) -> Result<AppSnapshot, SnapshotError> {
    let got = bytes.len() as u64;
    if bytes.len() > max_bytes {
        return Err(SnapshotError::TooLarge {
            size: got,
            max: max_bytes as u64,
        });
    }
    let foreign = |found: &str| SnapshotError::Foreign {
        expected: app.to_string(),
        found: found.to_string(),
    };
    // A file shorter than the magic must still start like it (then it is
    // truncated, said below); no slicing by index.
    let magic_ok = bytes.iter().zip(MAGIC.iter()).all(|(a, b)| a == b);
    if !magic_ok {
        return Err(foreign("a file without the snapshot magic"));
    }
    let truncated = |expected: usize| SnapshotError::Truncated {
        expected: expected as u64,
        got,
    };
    let version = bytes
        .get(8..12)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| truncated(HEADER_LEN))?;
    if version != FORMAT_VERSION {
        return Err(SnapshotError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let (Some(prefix), Some(sum), Some(payload)) = (
        bytes.get(..PREFIX_LEN),
        bytes.get(PREFIX_LEN..HEADER_LEN),
        bytes.get(HEADER_LEN..),
    ) else {
        return Err(truncated(HEADER_LEN));
    };
    let len = prefix
        .get(12..20)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .unwrap_or(u64::MAX);
    let expected = len.saturating_add(HEADER_LEN as u64);
    if expected > max_bytes as u64 {
        return Err(SnapshotError::TooLarge {
            size: expected,
            max: max_bytes as u64,
        });
    }
    match (payload.len() as u64).cmp(&len) {
        std::cmp::Ordering::Less => {
            return Err(SnapshotError::Truncated { expected, got });
        }
        std::cmp::Ordering::Greater => {
            return Err(SnapshotError::corrupt(format!(
                "{} byte(s) after the payload",
                (payload.len() as u64).saturating_sub(len)
            )));
        }
        std::cmp::Ordering::Equal => {}
    }
    if checksum(prefix, payload) != sum {
        return Err(SnapshotError::corrupt("checksum mismatch"));
    }
    let snap: AppSnapshot = serde_json::from_slice(payload).map_err(SnapshotError::Malformed)?;
    validate(&snap, app)?;
    Ok(snap)
}

/// Everything in `snap` belongs to `app`, and every revision an instance
/// advertises has its metadata, keyed by that revision.
fn validate(snap: &AppSnapshot, app: &str) -> Result<(), SnapshotError> {
    let foreign = |found: String| SnapshotError::Foreign {
        expected: app.to_string(),
        found,
    };
    if snap.app != app {
        return Err(foreign(format!("the snapshot of {}", snap.app)));
    }
    if let Some(i) = snap.instances.iter().find(|i| i.app != app) {
        return Err(foreign(format!("an instance of {}", i.app)));
    }
    for (rev, info) in &snap.metadata {
        if info.app != app || info.revision != *rev {
            return Err(SnapshotError::corrupt(format!(
                "metadata of {}@{} filed under revision {rev}",
                info.app, info.revision
            )));
        }
    }
    let mut ids = std::collections::HashSet::new();
    for i in &snap.instances {
        if !ids.insert(i.id.as_str()) {
            return Err(SnapshotError::corrupt(format!("instance {} twice", i.id)));
        }
        if let Some(rev) = i.revision() {
            if !snap.metadata.contains_key(rev) {
                return Err(SnapshotError::corrupt(format!(
                    "instance {} advertises revision {rev} without its metadata",
                    i.id
                )));
            }
        }
    }
    Ok(())
}
