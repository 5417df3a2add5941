//! Whether a loaded snapshot may be served, and how a served one is named
//! in updates and statuses.

use std::fmt;
use std::time::Duration;

use super::SnapshotError;
use crate::freshness::{Freshness, Source};
use crate::pending::RegistryFailure;

/// How far in the future a snapshot's write time may lie and still be
/// read as written "now" (clock steps between the run that wrote it and
/// this one). Beyond it the date is not believable, and a file dated far
/// ahead would otherwise never age past `snapshot_max_age`.
pub const MAX_SNAPSHOT_SKEW: Duration = Duration::from_secs(60);

/// The age of a snapshot written at `written_at_ms` (Unix ms) at `now_ms`,
/// if it is at most `max_age` old; [`SnapshotError::TooOld`] otherwise. A
/// snapshot up to [`MAX_SNAPSHOT_SKEW`] in the future counts as age zero;
/// one further ahead is [`SnapshotError::FromTheFuture`].
pub fn check_age(
    written_at_ms: u64,
    now_ms: u64,
    max_age: Duration,
) -> Result<Duration, SnapshotError> {
    let ahead = Duration::from_millis(written_at_ms.saturating_sub(now_ms));
    if ahead > MAX_SNAPSHOT_SKEW {
        return Err(SnapshotError::FromTheFuture {
            ahead,
            max_skew: MAX_SNAPSHOT_SKEW,
        });
    }
    let age = Duration::from_millis(now_ms.saturating_sub(written_at_ms));
    if age > max_age {
        return Err(SnapshotError::TooOld { age, max_age });
    }
    Ok(age)
}

/// Where an update's URLs came from when they came from a disk snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotOrigin {
    /// When the snapshot was written (Unix ms).
    pub written_at_ms: u64,
    /// Its age when the update was built.
    pub age: Duration,
    /// The app's registry subscription keeps failing (`Some`, with its
    /// attempts and latest error) while the snapshot is served.
    pub subscribe: Option<RegistryFailure>,
}

/// Part of a ready directory's status: some of its endpoints come from a
/// disk snapshot, because the registry has not delivered a state yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedFromSnapshot {
    /// The apps whose endpoints come from a snapshot.
    pub apps: Vec<String>,
    /// `Stale { age }`: the age of the oldest of those snapshots.
    pub freshness: Freshness,
    /// Always [`Source::Snapshot`].
    pub source: Source,
    /// A subscription of one of those apps keeps failing (the one with the
    /// most attempts): why the registry has not answered yet.
    pub subscribe: Option<RegistryFailure>,
}

impl ServedFromSnapshot {
    /// The age of the oldest snapshot served.
    pub fn age(&self) -> Duration {
        match self.freshness {
            Freshness::Stale { age } => age,
            Freshness::Fresh => Duration::ZERO,
        }
    }
}

impl fmt::Display for ServedFromSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "served from the {} of {}, {}, until the registry answers",
            self.source,
            self.apps.join(","),
            self.freshness
        )?;
        match &self.subscribe {
            Some(failure) => write!(f, "; subscribe {failure}"),
            None => Ok(()),
        }
    }
}
