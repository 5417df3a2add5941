//! How a directory's status reads: the `Display` of [`DirectoryStatus`] and
//! of the causes it names. Revisions are shortened by whole characters
//! (never sliced by byte index), so any UTF-8 from a registry prints.

use std::fmt;

use super::{DirectoryStatus, EmptyReason};
use crate::update::{NotServing, Unresolved};

/// The first 8 characters of a revision (whole characters, whatever the
/// UTF-8 encoding), for display.
fn short(revision: &str) -> &str {
    match revision.char_indices().nth(8) {
        Some((end, _)) => revision.get(..end).unwrap_or(revision),
        None => revision,
    }
}

impl fmt::Display for NotServing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instance(s) present, none serving ({} unhealthy, {} closing, {} with weight 0)",
            self.total(),
            self.unhealthy,
            self.closing,
            self.zero_weight
        )
    }
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let revs: Vec<&str> = self.revisions.iter().map(|r| short(r)).collect();
        write!(
            f,
            "unresolved revision(s) {} after {} attempt(s)",
            revs.join(","),
            self.attempts
        )?;
        if let Some(e) = &self.last_error {
            write!(f, ", last error: {e}")?;
        }
        Ok(())
    }
}

impl fmt::Display for DirectoryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirectoryStatus::Ready {
                endpoints,
                degraded,
                stale_since,
                held,
                snapshot,
                mapping,
            } => {
                let word = if degraded.is_empty() {
                    "ready"
                } else {
                    "degraded"
                };
                write!(f, "{word} ({endpoints} endpoint(s)")?;
                for (app, u) in degraded {
                    write!(f, "; {app}: {u}")?;
                }
                if let Some(s) = snapshot {
                    write!(f, "; {s}")?;
                }
                if stale_since.is_some() {
                    write!(f, "; registry unreachable, serving the last state seen")?;
                }
                for (app, h) in held {
                    write!(
                        f,
                        "; holding {} instance(s) of {app} removed in a mass expiry after a \
                         registry recovery, for at most {:?} while they re-register",
                        h.count, h.grace
                    )?;
                }
                if let Some(m) = mapping {
                    write!(
                        f,
                        "; interface mapping read {m}; serving the apps last known"
                    )?;
                }
                write!(f, ")")
            }
            DirectoryStatus::Empty(EmptyReason::Pending(p)) => write!(f, "empty: {p}"),
            DirectoryStatus::Empty(EmptyReason::RegistryEmpty) => {
                write!(f, "empty: the registry holds no provider instance")
            }
            DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => write!(f, "empty: {u}"),
            DirectoryStatus::Empty(EmptyReason::NoMatchingService) => {
                write!(f, "empty: no provider exports this service")
            }
            DirectoryStatus::Empty(EmptyReason::NotServing(n)) => write!(f, "empty: {n}"),
            DirectoryStatus::Empty(EmptyReason::NoProviderApp) => {
                write!(f, "empty: the interface mapping names no provider app")
            }
        }
    }
}
