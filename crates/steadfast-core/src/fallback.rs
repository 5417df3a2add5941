//! [`FallbackFetcher`]: try one metadata source, then another (e.g. a
//! remote metadata report first, the provider's own MetadataService next),
//! each under its own bound so a slow first source leaves time for the
//! second within the engine's whole-fetch deadline.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};

use crate::backend::MetadataFetcher;
use crate::error::FetchError;
use crate::fetch_plan::fetch_contained;
use crate::model::{MetadataInfo, ServiceInstance};

/// Default bound of the primary source (1 s): a metadata report is a
/// single key read, and the rest of the engine's 5 s fetch deadline is left
/// to the fallback.
pub const DEFAULT_PRIMARY_TIMEOUT: Duration = Duration::from_secs(1);

/// Default bound of the fallback source (4 s): with the primary's 1 s, the
/// two fit the engine's default 5 s fetch deadline.
pub const DEFAULT_FALLBACK_TIMEOUT: Duration = Duration::from_secs(4);

/// Tries `primary`; on any error, a panic, or no answer within the
/// primary's bound (default [`DEFAULT_PRIMARY_TIMEOUT`]) tries `fallback`
/// within its own bound (default [`DEFAULT_FALLBACK_TIMEOUT`]). When both
/// fail, the fallback's error is returned ([`FetchError::Timeout`] when it
/// ran out of time).
///
/// The bounds use the tokio timer of the runtime the fetch runs on (the
/// engine's actix runtime); polled outside a tokio runtime the fetch panics,
/// which the engine contains as [`FetchError::Panicked`].
#[derive(Clone, Debug)]
pub struct FallbackFetcher<A, B> {
    primary: Arc<A>,
    fallback: Arc<B>,
    primary_timeout: Duration,
    fallback_timeout: Duration,
}

impl<A, B> FallbackFetcher<A, B> {
    /// Combines two fetchers with the default bounds.
    pub fn new(primary: A, fallback: B) -> Self {
        Self {
            primary: Arc::new(primary),
            fallback: Arc::new(fallback),
            primary_timeout: DEFAULT_PRIMARY_TIMEOUT,
            fallback_timeout: DEFAULT_FALLBACK_TIMEOUT,
        }
    }

    /// Bounds the primary source: after `timeout` without an answer the
    /// fallback is tried (default 1 s).
    pub fn with_primary_timeout(mut self, timeout: Duration) -> Self {
        self.primary_timeout = timeout;
        self
    }

    /// Bounds the fallback source (default 4 s).
    pub fn with_fallback_timeout(mut self, timeout: Duration) -> Self {
        self.fallback_timeout = timeout;
        self
    }
}

impl<A: MetadataFetcher, B: MetadataFetcher> MetadataFetcher for FallbackFetcher<A, B> {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let first = fetch_contained(self.primary.as_ref(), instance, revision);
        let (fallback, instance, revision) = (
            self.fallback.clone(),
            instance.clone(),
            revision.to_string(),
        );
        let (primary_timeout, fallback_timeout) = (self.primary_timeout, self.fallback_timeout);
        async move {
            if let Ok(Ok(info)) = tokio::time::timeout(primary_timeout, first).await {
                return Ok(info);
            }
            let second = fetch_contained(fallback.as_ref(), &instance, &revision);
            tokio::time::timeout(fallback_timeout, second)
                .await
                .unwrap_or(Err(FetchError::Timeout))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future;
    use std::sync::atomic::{AtomicUsize, Ordering};

    enum Src {
        Fixed(Result<MetadataInfo, FetchError>),
        Hang,
        Panic,
    }

    struct Fake(Src, AtomicUsize);

    fn fake(src: Src) -> Fake {
        Fake(src, AtomicUsize::new(0))
    }

    impl MetadataFetcher for Fake {
        fn fetch(
            &self,
            _: &ServiceInstance,
            _: &str,
        ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            match &self.0 {
                Src::Fixed(r) => future::ready(r.clone()).boxed(),
                Src::Hang => future::pending().boxed(),
                Src::Panic => panic!("report client bug"),
            }
        }
    }

    fn info() -> MetadataInfo {
        MetadataInfo::new("web", [])
    }

    fn inst() -> ServiceInstance {
        ServiceInstance::new("web", "h", 1)
    }

    #[tokio::test(start_paused = true)]
    async fn fallback_is_tried_only_on_error_and_its_error_wins() {
        let i = inst();
        let ok = FallbackFetcher::new(
            fake(Src::Fixed(Ok(info()))),
            fake(Src::Fixed(Err(FetchError::Timeout))),
        );
        assert_eq!(ok.fetch(&i, "r").await, Ok(info()));
        assert_eq!(ok.fallback.1.load(Ordering::SeqCst), 0);
        let rescued = FallbackFetcher::new(
            fake(Src::Fixed(Err(FetchError::Unreachable("x".into())))),
            fake(Src::Fixed(Ok(info()))),
        );
        assert_eq!(rescued.fetch(&i, "r").await, Ok(info()));
        let both = FallbackFetcher::new(
            fake(Src::Fixed(Err(FetchError::Unreachable("x".into())))),
            fake(Src::Fixed(Err(FetchError::UnknownRevision("r".into())))),
        );
        assert_eq!(
            both.fetch(&i, "r").await,
            Err(FetchError::UnknownRevision("r".into()))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_primary_leaves_time_for_the_fallback() {
        let f = FallbackFetcher::new(fake(Src::Hang), fake(Src::Fixed(Ok(info()))));
        let start = tokio::time::Instant::now();
        assert_eq!(f.fetch(&inst(), "r").await, Ok(info()));
        assert_eq!(
            start.elapsed(),
            DEFAULT_PRIMARY_TIMEOUT,
            "one primary bound"
        );
        let custom = FallbackFetcher::new(fake(Src::Hang), fake(Src::Fixed(Ok(info()))))
            .with_primary_timeout(Duration::from_millis(300));
        let start = tokio::time::Instant::now();
        assert_eq!(custom.fetch(&inst(), "r").await, Ok(info()));
        assert_eq!(start.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_fallback_times_out_on_its_own_bound() {
        let f = FallbackFetcher::new(fake(Src::Hang), fake(Src::Hang))
            .with_fallback_timeout(Duration::from_secs(2));
        let start = tokio::time::Instant::now();
        assert_eq!(f.fetch(&inst(), "r").await, Err(FetchError::Timeout));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_source_is_contained() {
        let f = FallbackFetcher::new(fake(Src::Panic), fake(Src::Fixed(Ok(info()))));
        assert_eq!(f.fetch(&inst(), "r").await, Ok(info()));
        let f = FallbackFetcher::new(fake(Src::Fixed(Err(FetchError::Timeout))), fake(Src::Panic));
        assert_eq!(
            f.fetch(&inst(), "r").await,
            Err(FetchError::Panicked("report client bug".into()))
        );
    }
}
