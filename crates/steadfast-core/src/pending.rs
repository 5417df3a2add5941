//! [`Pending`]: why a directory has no registry state yet. Nothing heard is
//! not one state but several: the subscription may simply not have answered
//! yet, or it may be failing (the #3624 case), or a reference without apps
//! may be failing to read its interface -> app mapping. The status names the
//! failing step with its last error instead of hiding it behind "waiting".

use std::fmt;
use std::time::Instant;

use crate::error::RegistryError;

/// A registry step that keeps failing and is being retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryFailure {
    /// When the step first failed (since the last success).
    pub since: Instant,
    /// Failed attempts so far.
    pub attempts: u32,
    /// The latest error.
    pub last_error: RegistryError,
}

impl fmt::Display for RegistryFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "failing after {} attempt(s), retrying; last error: {}",
            self.attempts, self.last_error
        )
    }
}

/// Why nothing has been heard from the registry yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// The registry subscription (watch) of a provider app is failing.
    pub subscribe: Option<RegistryFailure>,
    /// The interface -> app mapping of a reference without apps is failing
    /// to be read.
    pub mapping: Option<RegistryFailure>,
}

impl Pending {
    /// Simply waiting: no step has failed.
    pub fn waiting() -> Self {
        Self::default()
    }

    /// Waiting because the subscription is failing.
    pub fn subscribe_failing(failure: RegistryFailure) -> Self {
        Self {
            subscribe: Some(failure),
            mapping: None,
        }
    }

    /// Whether a step is failing (rather than just not answered yet).
    pub fn is_failing(&self) -> bool {
        self.subscribe.is_some() || self.mapping.is_some()
    }

    /// Keeps the earliest failure of each step from `other` too (a
    /// directory merges the causes of its apps).
    pub fn merge(&mut self, other: &Pending) {
        fn earliest(a: &mut Option<RegistryFailure>, b: &Option<RegistryFailure>) {
            if let Some(b) = b {
                if a.as_ref().is_none_or(|a| b.since < a.since) {
                    *a = Some(b.clone());
                }
            }
        }
        earliest(&mut self.subscribe, &other.subscribe);
        earliest(&mut self.mapping, &other.mapping);
    }
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "waiting for the registry")?;
        if let Some(m) = &self.mapping {
            write!(f, "; interface mapping read {m}")?;
        }
        if let Some(s) = &self.subscribe {
            write!(f, "; subscribe {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn display_names_the_failing_step_and_its_error() {
        let t0 = Instant::now();
        let mut p = Pending::waiting();
        assert_eq!(p.to_string(), "waiting for the registry");
        assert!(!p.is_failing());
        let late = RegistryFailure {
            since: t0 + Duration::from_secs(5),
            attempts: 1,
            last_error: RegistryError::Timeout,
        };
        let early = RegistryFailure {
            since: t0,
            attempts: 3,
            last_error: RegistryError::Unavailable("refused".into()),
        };
        p.merge(&Pending::subscribe_failing(late));
        p.merge(&Pending::subscribe_failing(early.clone()));
        assert_eq!(p.subscribe, Some(early), "the earliest failure is kept");
        assert!(p.is_failing());
        assert_eq!(
            p.to_string(),
            "waiting for the registry; subscribe failing after 3 attempt(s), retrying; \
             last error: registry unavailable: refused"
        );
    }
}
