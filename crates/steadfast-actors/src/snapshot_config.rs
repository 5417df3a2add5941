//! [`SnapshotConfig`]: where and how the engine keeps disk snapshots of its
//! subscribed apps for cold starts (see `docs/snapshot.md`).

use std::path::PathBuf;
use std::time::Duration;

use steadfast_core::snapshot::{
    DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, DEFAULT_WRITE_INTERVAL, HEADER_LEN,
};
use steadfast_core::MAX_BACKOFF;

use crate::config::{check_duration, ConfigError};

/// Largest `max_bytes` accepted: 1 GiB.
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024 * 1024;

/// Default deadline of one snapshot file read or write: 5 s.
pub const DEFAULT_IO_DEADLINE: Duration = Duration::from_secs(5);

/// Disk snapshot settings. Without a `dir` (the default) nothing is written
/// or read.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SnapshotConfig {
    /// Directory of the snapshot files, one per subscribed app (created
    /// when missing). `None`: no snapshots.
    pub dir: Option<PathBuf>,
    /// Oldest snapshot served at a cold start (default 24 h); an older one
    /// is refused and counted.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// Largest snapshot file written or read (default 64 MiB); a state
    /// that encodes larger is not written, a larger file is refused.
    pub max_bytes: usize,
    /// Shortest time between two writes of one app's snapshot (default
    /// 10 s): the first good state is written at once, a burst of changes
    /// after it once when the interval has passed.
    #[serde(with = "humantime_serde")]
    pub write_interval: Duration,
    /// Deadline of each file read or write, run off the actors' thread
    /// (default 5 s).
    #[serde(with = "humantime_serde")]
    pub io_deadline: Duration,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self {
            dir: None,
            max_age: DEFAULT_MAX_AGE,
            max_bytes: DEFAULT_MAX_BYTES,
            write_interval: DEFAULT_WRITE_INTERVAL,
            io_deadline: DEFAULT_IO_DEADLINE,
        }
    }
}

impl SnapshotConfig {
    /// Checks the values: durations above zero and at most a day (the max
    /// age up to 365 days), `max_bytes` between the header size and 1 GiB.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_duration("snapshot.write_interval", self.write_interval)?;
        check_duration("snapshot.io_deadline", self.io_deadline)?;
        let year = MAX_BACKOFF.saturating_mul(365);
        if self.max_age.is_zero() || self.max_age > year {
            return Err(ConfigError::Duration {
                field: "snapshot.max_age",
                value: self.max_age,
            });
        }
        if self.max_bytes <= HEADER_LEN || self.max_bytes > MAX_SNAPSHOT_BYTES {
            return Err(ConfigError::Size {
                field: "snapshot.max_bytes",
                value: self.max_bytes,
                min: HEADER_LEN + 1,
                max: MAX_SNAPSHOT_BYTES,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineConfig;

    #[test]
    fn snapshot_settings_are_checked() {
        assert!(SnapshotConfig::default().validate().is_ok());
        let mut c = EngineConfig::default();
        c.snapshot.max_bytes = 10;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Size {
                field: "snapshot.max_bytes",
                ..
            })
        ));
        let mut c = EngineConfig::default();
        c.snapshot.max_age = Duration::ZERO;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Duration {
                field: "snapshot.max_age",
                ..
            })
        ));
        let mut c = EngineConfig::default();
        c.snapshot.write_interval = Duration::ZERO;
        assert!(c.validate().is_err());
        c.snapshot.write_interval = Duration::from_secs(1);
        c.snapshot.max_age = Duration::from_secs(7 * 24 * 3600);
        assert!(c.validate().is_ok());
    }
}
