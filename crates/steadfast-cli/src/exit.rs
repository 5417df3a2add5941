//! The exit codes of `steadfast inspect`, defined once: [`Exit`] names
//! them, [`help`] lists them for `--help`, and docs/operations.md's table
//! is checked against that list (`tests/exit_codes.rs`).

use std::fmt;
use std::process::ExitCode;

/// How `steadfast inspect` ends, as its process exit code. `0` only when
/// the report is complete; when several of the others apply, the lowest
/// code wins (the registry before what its silence hides, a missing
/// provider before its metadata).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: the report is complete: the registry answered, every named app
    /// has instances and every revision of them is resolved, every
    /// reference has endpoints, and every part of the engine answered.
    #[default]
    Complete,
    /// 1: the command could not do its work: the engine did not start, a
    /// certificate or key file could not be used, the report could not be
    /// taken or written.
    Failed,
    /// 2: a usage error: clap's own code for a bad or missing option, also
    /// used for a `--registry` value that names no supported registry or
    /// an etcd configuration the options make invalid.
    Usage,
    /// 3: the registry is unreachable: a watch is failing or stale, the
    /// interface mapping cannot be read, or the registry said nothing
    /// within `--wait`.
    RegistryUnreachable,
    /// 4: nothing to inspect: an unknown app (the registry holds no
    /// instance of it), an interface its providers do not export (or not
    /// over `--protocol`, or not in that group or version), an interface
    /// the mapping names no provider app for, or instances of which none
    /// may take traffic.
    NotFound,
    /// 5: metadata unresolved: some revision of a named or mapped app has
    /// no metadata yet (its fetches failed or did not finish within
    /// `--wait`).
    MetadataUnresolved,
    /// 6: the report is incomplete: a part of the engine did not answer
    /// within its bound and is missing from the report.
    Incomplete,
}

impl Exit {
    /// Every exit code, in numeric order.
    pub(crate) const ALL: [Exit; 7] = [
        Exit::Complete,
        Exit::Failed,
        Exit::Usage,
        Exit::RegistryUnreachable,
        Exit::NotFound,
        Exit::MetadataUnresolved,
        Exit::Incomplete,
    ];

    /// The process exit code.
    pub(crate) const fn code(self) -> u8 {
        match self {
            Exit::Complete => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::RegistryUnreachable => 3,
            Exit::NotFound => 4,
            Exit::MetadataUnresolved => 5,
            Exit::Incomplete => 6,
        }
    }

    /// One line of what the code means, for `--help`.
    pub(crate) const fn meaning(self) -> &'static str {
        match self {
            Exit::Complete => "the report is complete",
            Exit::Failed => "the command could not run (engine, certificate files, output)",
            Exit::Usage => "usage error (a bad option or --registry value)",
            Exit::RegistryUnreachable => "registry unreachable (or silent within --wait)",
            Exit::NotFound => "unknown app or reference, or no provider of it",
            Exit::MetadataUnresolved => "metadata unresolved",
            Exit::Incomplete => "a part of the engine did not answer; the report is incomplete",
        }
    }

    /// Whichever of `self` and `other` wins: any code over
    /// [`Exit::Complete`], else the lower code.
    pub(crate) fn max(self, other: Exit) -> Exit {
        match (self, other) {
            (Exit::Complete, e) | (e, Exit::Complete) => e,
            (a, b) if b.code() < a.code() => b,
            (a, _) => a,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.meaning())
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// The `Exit codes:` section of `steadfast inspect --help`.
pub(crate) fn help() -> String {
    let mut s = String::from("Exit codes:\n");
    for e in Exit::ALL {
        s.push_str(&format!("  {}  {}\n", e.code(), e.meaning()));
    }
    s.push_str(
        "When several apply, the lowest non-zero code wins. With --watch the code is\n\
         that of the last report printed.",
    );
    s
}

/// A failure that ends the command before a report could decide the code.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit code it ends with.
    pub exit: Exit,
    /// What went wrong, for stderr.
    pub message: String,
}

impl Failure {
    /// A failure with [`Exit::Failed`].
    pub(crate) fn failed(message: impl fmt::Display) -> Self {
        Self {
            exit: Exit::Failed,
            message: message.to_string(),
        }
    }

    /// A failure with [`Exit::Usage`].
    pub(crate) fn usage(message: impl fmt::Display) -> Self {
        Self {
            exit: Exit::Usage,
            message: message.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn codes_are_distinct_and_only_complete_is_zero() {
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len());
        assert!(Exit::ALL
            .iter()
            .all(|e| (e.code() == 0) == (*e == Exit::Complete)));
        assert_eq!(Exit::Usage.code(), 2, "clap's code for usage errors");
    }

    #[test]
    fn the_registry_wins_over_what_it_hides() {
        use Exit::*;
        assert_eq!(Complete.max(MetadataUnresolved), MetadataUnresolved);
        assert_eq!(MetadataUnresolved.max(Complete), MetadataUnresolved);
        assert_eq!(MetadataUnresolved.max(NotFound), NotFound);
        assert_eq!(NotFound.max(RegistryUnreachable), RegistryUnreachable);
        assert_eq!(Incomplete.max(MetadataUnresolved), MetadataUnresolved);
        assert_eq!(RegistryUnreachable.max(Failed), Failed);
    }
}
