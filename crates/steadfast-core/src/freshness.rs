//! [`Freshness`] and [`Source`]: how current an answer is and where it came
//! from. One-shot lookups (`Engine::instances`) and directories served from
//! a disk snapshot both say so, so a stale answer is never mistaken for a
//! fresh one.

use std::fmt;
use std::time::Duration;

/// How current an answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Authoritative now: the live watch state, or a registry answer within
    /// its TTL.
    Fresh,
    /// The last good state known, `age` old (the registry could not confirm
    /// it).
    Stale {
        /// Time since the state was last confirmed by the registry.
        age: Duration,
    },
}

impl Freshness {
    /// Whether the answer is authoritative now.
    pub fn is_fresh(&self) -> bool {
        matches!(self, Freshness::Fresh)
    }
}

/// Where an answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The live registry watch of a subscribed app.
    Watch,
    /// A registry call made for this answer (or shared with concurrent
    /// callers).
    Registry,
    /// The per-app lookup cache.
    Cache,
    /// A disk snapshot written by an earlier run.
    Snapshot,
}

impl fmt::Display for Freshness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Freshness::Fresh => write!(f, "fresh"),
            Freshness::Stale { age } => write!(f, "stale ({} ms old)", age.as_millis()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Watch => "watch",
            Source::Registry => "registry",
            Source::Cache => "cache",
            Source::Snapshot => "snapshot",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_says_freshness_and_source() {
        assert_eq!(Freshness::Fresh.to_string(), "fresh");
        let stale = Freshness::Stale {
            age: Duration::from_millis(1500),
        };
        assert_eq!(stale.to_string(), "stale (1500 ms old)");
        assert!(!stale.is_fresh() && Freshness::Fresh.is_fresh());
        assert_eq!(Source::Snapshot.to_string(), "snapshot");
        let huge = Freshness::Stale { age: Duration::MAX };
        assert!(huge.to_string().starts_with("stale ("));
    }
}
