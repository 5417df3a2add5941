//! Outcome counters of an [`HttpMetadataFetcher`](crate::HttpMetadataFetcher):
//! one atomic counter for successes and one per [`FetchError`] label.

use std::sync::atomic::{AtomicU64, Ordering};

use steadfast_core::{FetchError, MetadataInfo};

/// Live counters, shared by every clone of a fetcher.
#[derive(Debug, Default)]
pub struct FetchMetrics {
    successes: AtomicU64,
    unreachable: AtomicU64,
    timeout: AtomicU64,
    unknown_revision: AtomicU64,
    server_error: AtomicU64,
    malformed: AtomicU64,
    mismatch: AtomicU64,
    too_large: AtomicU64,
    no_endpoint: AtomicU64,
    no_candidates: AtomicU64,
    panicked: AtomicU64,
}

/// A copy of the counters at one moment; fields are named after
/// [`FetchError::label`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchMetricsSnapshot {
    /// Fetches that returned the metadata asked for.
    pub successes: u64,
    /// [`FetchError::Unreachable`] outcomes.
    pub unreachable: u64,
    /// [`FetchError::Timeout`] outcomes.
    pub timeout: u64,
    /// [`FetchError::UnknownRevision`] outcomes.
    pub unknown_revision: u64,
    /// [`FetchError::ServerError`] outcomes.
    pub server_error: u64,
    /// [`FetchError::Malformed`] outcomes.
    pub malformed: u64,
    /// [`FetchError::Mismatch`] outcomes.
    pub mismatch: u64,
    /// [`FetchError::TooLarge`] outcomes.
    pub too_large: u64,
    /// [`FetchError::NoEndpoint`] outcomes.
    pub no_endpoint: u64,
    /// [`FetchError::NoCandidates`] outcomes.
    pub no_candidates: u64,
    /// [`FetchError::Panicked`] outcomes.
    pub panicked: u64,
}

impl FetchMetrics {
    /// Counts the outcome of one fetch.
    pub fn record(&self, result: &Result<MetadataInfo, FetchError>) {
        match result {
            Ok(_) => self.record_success(),
            Err(e) => self.record_error(e),
        }
    }

    /// Counts one successful fetch.
    pub fn record_success(&self) {
        self.successes.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one failed fetch under the error's label.
    pub fn record_error(&self, error: &FetchError) {
        let counter = match error {
            FetchError::Unreachable(_) => &self.unreachable,
            FetchError::Timeout => &self.timeout,
            FetchError::UnknownRevision(_) => &self.unknown_revision,
            FetchError::ServerError(_) => &self.server_error,
            FetchError::Malformed(_) => &self.malformed,
            FetchError::Mismatch { .. } => &self.mismatch,
            FetchError::TooLarge { .. } => &self.too_large,
            FetchError::NoEndpoint(_) => &self.no_endpoint,
            FetchError::NoCandidates => &self.no_candidates,
            FetchError::Panicked(_) => &self.panicked,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The current counters.
    pub fn snapshot(&self) -> FetchMetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FetchMetricsSnapshot {
            successes: get(&self.successes),
            unreachable: get(&self.unreachable),
            timeout: get(&self.timeout),
            unknown_revision: get(&self.unknown_revision),
            server_error: get(&self.server_error),
            malformed: get(&self.malformed),
            mismatch: get(&self.mismatch),
            too_large: get(&self.too_large),
            no_endpoint: get(&self.no_endpoint),
            no_candidates: get(&self.no_candidates),
            panicked: get(&self.panicked),
        }
    }
}

impl FetchMetricsSnapshot {
    /// The counter of the errors labelled `label` (see [`FetchError::label`]),
    /// `"success"` for successes, or `None` for an unknown label.
    pub fn by_label(&self, label: &str) -> Option<u64> {
        Some(match label {
            "success" => self.successes,
            "unreachable" => self.unreachable,
            "timeout" => self.timeout,
            "unknown_revision" => self.unknown_revision,
            "server_error" => self.server_error,
            "malformed" => self.malformed,
            "mismatch" => self.mismatch,
            "too_large" => self.too_large,
            "no_endpoint" => self.no_endpoint,
            "no_candidates" => self.no_candidates,
            "panicked" => self.panicked,
            _ => return None,
        })
    }

    /// Failed fetches of every kind.
    pub fn errors(&self) -> u64 {
        self.unreachable
            + self.timeout
            + self.unknown_revision
            + self.server_error
            + self.malformed
            + self.mismatch
            + self.too_large
            + self.no_endpoint
            + self.no_candidates
            + self.panicked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_counts_under_its_own_label() {
        let errors = [
            FetchError::Unreachable("refused".into()),
            FetchError::Timeout,
            FetchError::UnknownRevision("r".into()),
            FetchError::ServerError(503),
            FetchError::Malformed("eof".into()),
            FetchError::Mismatch {
                expected: "a@1".into(),
                actual: "a@2".into(),
            },
            FetchError::TooLarge { limit: 1 },
            FetchError::NoEndpoint("empty host".into()),
            FetchError::NoCandidates,
        ];
        for e in &errors {
            let m = FetchMetrics::default();
            m.record_error(e);
            let s = m.snapshot();
            assert_eq!(s.by_label(e.label()), Some(1), "{e:?}");
            assert_eq!(s.errors(), 1, "{e:?}");
            assert_eq!(s.successes, 0);
        }
        let m = FetchMetrics::default();
        m.record_success();
        assert_eq!(m.snapshot().by_label("success"), Some(1));
        assert_eq!(m.snapshot().by_label("bogus"), None);
    }
}
