//! Outcome counters of an [`HttpMetadataFetcher`](crate::HttpMetadataFetcher):
//! one atomic counter for successes and one per [`FetchError`] label.

use std::sync::atomic::{AtomicU64, Ordering};

use steadfast_core::{FetchError, MetadataInfo};

/// Error kinds counted (one per [`FetchError::label`]).
const KINDS: usize = FetchError::LABELS.len();

/// Live counters, shared by every clone of a fetcher: one for successes
/// and one per [`FetchError::LABELS`] entry (the one list of error kinds).
#[derive(Debug, Default)]
pub struct FetchMetrics {
    successes: AtomicU64,
    errors: [AtomicU64; KINDS],
}

/// A copy of the counters at one moment, read by [`FetchError::label`]
/// with [`FetchMetricsSnapshot::by_label`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchMetricsSnapshot {
    /// Fetches that returned the metadata asked for.
    pub successes: u64,
    errors: [u64; KINDS],
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
        if let Some(at) = FetchError::LABELS.iter().position(|l| *l == error.label()) {
            self.errors[at].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The current counters.
    pub fn snapshot(&self) -> FetchMetricsSnapshot {
        FetchMetricsSnapshot {
            successes: self.successes.load(Ordering::Relaxed),
            errors: std::array::from_fn(|i| self.errors[i].load(Ordering::Relaxed)),
        }
    }
}

impl FetchMetricsSnapshot {
    /// The counter of the errors labelled `label` (see [`FetchError::label`]),
    /// `"success"` for successes, or `None` for an unknown label.
    pub fn by_label(&self, label: &str) -> Option<u64> {
        if label == "success" {
            return Some(self.successes);
        }
        let at = FetchError::LABELS.iter().position(|l| *l == label)?;
        Some(self.errors[at])
    }

    /// Failed fetches of every kind.
    pub fn errors(&self) -> u64 {
        self.errors.iter().fold(0u64, |a, n| a.saturating_add(*n))
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
