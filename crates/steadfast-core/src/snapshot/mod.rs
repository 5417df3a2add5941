//! Disk snapshots for cold starts, sans-IO: the versioned file format of
//! one subscribed app's last good state (its instances and the resolved
//! [`MetadataInfo`](crate::model::MetadataInfo) of each revision), a
//! decoder that never panics and names what is wrong with a file
//! ([`SnapshotError`]), and the two decisions around it: when to write
//! ([`WriteSchedule`], time as an input) and whether a loaded snapshot may
//! be served ([`check_age`]). The actor shell does the file IO.
//!
//! File layout (all integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `STFSNAP\n` |
//! | 4 | format version (1) |
//! | 8 | payload length |
//! | 32 | SHA-256 over the 20 bytes above and the payload |
//! | n | payload: JSON of [`AppSnapshot`] |
//!
//! The checksum covers the header too, so any flipped, missing or added
//! byte is refused, even one that would still parse.

mod error;
mod format;
mod name;
mod schedule;
pub(crate) mod serve;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use error::SnapshotError;
pub use format::{decode, encode, AppSnapshot, FORMAT_VERSION, HEADER_LEN, MAGIC};
pub use name::{file_name, SNAPSHOT_EXTENSION};
pub use schedule::{WriteDecision, WriteSchedule};
pub use serve::{check_age, MAX_SNAPSHOT_SKEW};

/// Default largest snapshot file written or read: 64 MiB (about 200k
/// instances).
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Default oldest snapshot served at a cold start: 24 h.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// Default shortest time between two writes of one app's snapshot: 10 s.
pub const DEFAULT_WRITE_INTERVAL: Duration = Duration::from_secs(10);
