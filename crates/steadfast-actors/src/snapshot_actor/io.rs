//! Blocking file IO of snapshots, run on tokio's blocking pool: an atomic
//! write (temp file in the same directory, fsync, rename, fsync of the
//! directory) and a size-bounded read.
//!
//! The trust boundary: a snapshot's checksum detects damage, not forgery,
//! so whoever can write `snapshot_dir` chooses the endpoints served at the
//! next cold start. On Unix the directory is created `0700` and files
//! `0600`, and a file is read only when neither it nor its directory is
//! writable by group or others and the file belongs to this process's user
//! ([`SnapshotError::Untrusted`] otherwise).

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
    create_private_dir(dir).map_err(io_err(dir))?;
    let target = path_of(dir, app);
    let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(
        ".{}.tmp.{}.{seq}",
        file_name(app),
        std::process::id()
    ));
    let written = (|| {
        let mut f = create_private_file(&temp)?;
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
    check_trusted(dir, &f, &path)?;
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

/// Creates `dir` (and its parents) readable by this user alone.
fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Creates `path` for writing, readable by this user alone.
fn create_private_file(path: &Path) -> io::Result<File> {
    let mut o = fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Refuses a snapshot someone else could have written: a file or directory
/// writable by group or others, or a file owned by another user (the
/// process's user is read from `/proc/self`; where that is missing the
/// owner is not compared).
#[cfg(unix)]
fn check_trusted(dir: &Path, file: &File, path: &Path) -> Result<(), SnapshotError> {
    use std::os::unix::fs::MetadataExt;
    let untrusted = |reason: &'static str| SnapshotError::Untrusted {
        path: path.display().to_string(),
        reason,
    };
    let f = file.metadata().map_err(io_err(path))?;
    let d = fs::metadata(dir).map_err(io_err(dir))?;
    if d.mode() & 0o022 != 0 {
        return Err(untrusted("its directory is writable by group or others"));
    }
    if f.mode() & 0o022 != 0 {
        return Err(untrusted("the file is writable by group or others"));
    }
    if let Ok(me) = fs::metadata("/proc/self") {
        if f.uid() != me.uid() {
            return Err(untrusted("the file belongs to another user"));
        }
    }
    Ok(())
}

/// Elsewhere the platform's own permissions are relied on.
#[cfg(not(unix))]
fn check_trusted(_: &Path, _: &File, _: &Path) -> Result<(), SnapshotError> {
    Ok(())
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

    #[cfg(unix)]
    #[test]
    fn a_file_others_could_have_written_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp("trust");
        write_atomic(&dir, "a", b"ours").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&path_of(&dir, "a")), 0o600);
        assert_eq!(read_bounded(&dir, "a", 100).unwrap().unwrap(), b"ours");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let e = read_bounded(&dir, "a", 100).unwrap_err();
        assert!(matches!(e, SnapshotError::Untrusted { .. }), "{e}");
        assert_eq!(e.label(), "untrusted");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(path_of(&dir, "a"), fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            read_bounded(&dir, "a", 100),
            Err(SnapshotError::Untrusted { .. })
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
