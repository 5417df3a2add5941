//! Blocking file IO of snapshots, run on tokio's blocking pool: an atomic
//! write (temp file in the same directory, fsync, rename, fsync of the
//! directory) and a size-bounded read.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use steadfast_core::snapshot::{file_name, SnapshotError};

/// Distinguishes temp files of concurrent writes in one process.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The snapshot file of `app` in `dir`.
pub(crate) fn path_of(dir: &Path, app: &str) -> PathBuf {
    dir.join(file_name(app))
}

/// Writes `bytes` as `app`'s snapshot in `dir`: readers see the old file or
/// the new one, never a part of it.
pub(crate) fn write_atomic(dir: &Path, app: &str, bytes: &[u8]) -> Result<PathBuf, SnapshotError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let target = path_of(dir, app);
    let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(
        ".{}.tmp.{}.{seq}",
        file_name(app),
        std::process::id()
    ));
    let written = (|| {
        let mut f = File::create(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&temp, &target)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(io_err(&target)(e));
    }
    // The rename itself is durable once the directory is synced; not every
    // platform can open a directory, so this is best effort.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(target)
}

/// Reads `app`'s snapshot in `dir`, at most `max_bytes` (`None`: there is
/// none). A larger file is refused without reading it whole.
pub(crate) fn read_bounded(
    dir: &Path,
    app: &str,
    max_bytes: usize,
) -> Result<Option<Vec<u8>>, SnapshotError> {
    let path = path_of(dir, app);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    let too_large = |size: u64| SnapshotError::TooLarge {
        size,
        max: max_bytes as u64,
    };
    let len = f.metadata().map_err(io_err(&path))?.len();
    if len > max_bytes as u64 {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(max_bytes));
    f.take((max_bytes as u64).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_err(&path))?;
    if bytes.len() > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "steadfast-snapshot-io-{name}-{}-{}",
            std::process::id(),
            TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_no_temp_file() {
        let dir = temp("write");
        assert!(
            read_bounded(&dir, "a", 100).unwrap().is_none(),
            "no dir yet"
        );
        write_atomic(&dir, "a", b"first").unwrap();
        write_atomic(&dir, "a", b"second").unwrap();
        assert_eq!(read_bounded(&dir, "a", 100).unwrap().unwrap(), b"second");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(matches!(
            read_bounded(&dir, "a", 3),
            Err(SnapshotError::TooLarge { size: 6, max: 3 })
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_into_an_unusable_directory_is_an_io_error() {
        let dir = temp("file");
        fs::write(&dir, b"not a directory").unwrap();
        let err = write_atomic(&dir, "a", b"x").unwrap_err();
        assert!(matches!(err, SnapshotError::Io { .. }), "{err}");
        assert!(
            std::error::Error::source(&err).is_some(),
            "the cause is kept"
        );
        let _ = fs::remove_file(&dir);
    }
}
