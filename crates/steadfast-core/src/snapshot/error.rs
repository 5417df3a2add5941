//! [`SnapshotError`]: why a snapshot file was refused (or not written).

use std::time::Duration;

use thiserror::Error;

/// Why a snapshot was refused, or could not be written. A refused file is
/// never served.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The file ends before the header or the payload it announces.
    #[error("snapshot truncated: {got} byte(s), expected {expected}")]
    Truncated {
        /// Bytes the header (or the header's own length) says there are.
        expected: u64,
        /// Bytes present.
        got: u64,
    },
    /// The bytes are ours but damaged: checksum mismatch, trailing bytes,
    /// or content that contradicts itself.
    #[error("snapshot corrupt: {reason}")]
    Corrupt {
        /// What is wrong.
        reason: String,
    },
    /// The checksum matched but the payload is not a snapshot (a writer
    /// bug, never a damaged file).
    #[error("snapshot payload malformed")]
    Malformed(#[source] serde_json::Error),
    /// Not a snapshot file (no magic), or the snapshot of another app.
    #[error("not a snapshot of {expected}: {found}")]
    Foreign {
        /// The app the file was read for.
        expected: String,
        /// What was found instead.
        found: String,
    },
    /// A format version this build does not read.
    #[error("snapshot format version {found} is not supported (this build reads {supported})")]
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// Version this build reads and writes.
        supported: u32,
    },
    /// Over the configured size bound (on read or on write).
    #[error("snapshot of {size} byte(s) exceeds the limit of {max}")]
    TooLarge {
        /// Size of the file or of the encoded snapshot.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// Written longer ago than the configured max age.
    #[error("snapshot is {} s old, older than the max age of {} s", age.as_secs(), max_age.as_secs())]
    TooOld {
        /// Its age.
        age: Duration,
        /// The limit.
        max_age: Duration,
    },
    /// Dated further in the future than [`super::MAX_SNAPSHOT_SKEW`]
    /// allows: the date cannot be trusted, so neither can its age.
    #[error("snapshot is dated {} s in the future, beyond the allowed clock skew of {} s", ahead.as_secs(), max_skew.as_secs())]
    FromTheFuture {
        /// How far ahead of now it is dated.
        ahead: Duration,
        /// The skew allowed.
        max_skew: Duration,
    },
    /// The file or its directory could have been written by someone else
    /// (writable by group or others, or another user's file): its checksum
    /// cannot tell a forgery, so it is not served.
    #[error("snapshot {path} not trusted: {reason}")]
    Untrusted {
        /// The file.
        path: String,
        /// Why.
        reason: &'static str,
    },
    /// Reading or writing the file failed.
    #[error("snapshot io on {path}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file operation did not finish within its deadline.
    #[error("snapshot io on {path} did not finish within {deadline:?}")]
    Deadline {
        /// The file.
        path: String,
        /// The deadline.
        deadline: Duration,
    },
}

impl SnapshotError {
    /// A short label for logs and counters (`truncated`, `corrupt`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            SnapshotError::Truncated { .. } => "truncated",
            SnapshotError::Corrupt { .. } | SnapshotError::Malformed(_) => "corrupt",
            SnapshotError::Foreign { .. } => "foreign",
            SnapshotError::UnsupportedVersion { .. } => "unsupported_version",
            SnapshotError::TooLarge { .. } => "too_large",
            SnapshotError::TooOld { .. } => "too_old",
            SnapshotError::FromTheFuture { .. } => "from_the_future",
            SnapshotError::Untrusted { .. } => "untrusted",
            SnapshotError::Io { .. } => "io",
            SnapshotError::Deadline { .. } => "deadline",
        }
    }

    pub(crate) fn corrupt(reason: impl Into<String>) -> Self {
        SnapshotError::Corrupt {
            reason: reason.into(),
        }
    }
}
