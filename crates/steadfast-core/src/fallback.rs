//! [`FallbackFetcher`]: try one metadata source, then another (e.g. a
//! remote metadata report first, the provider's own MetadataService next).

use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};

use crate::backend::MetadataFetcher;
use crate::error::FetchError;
use crate::model::{MetadataInfo, ServiceInstance};

/// Tries `primary`; on any error tries `fallback`. When both fail, the
/// fallback's error is returned (the primary's is logged).
#[derive(Clone, Debug)]
pub struct FallbackFetcher<A, B> {
    primary: Arc<A>,
    fallback: Arc<B>,
}

impl<A, B> FallbackFetcher<A, B> {
    /// Combines two fetchers.
    pub fn new(primary: A, fallback: B) -> Self {
        Self {
            primary: Arc::new(primary),
            fallback: Arc::new(fallback),
        }
    }
}

impl<A: MetadataFetcher, B: MetadataFetcher> MetadataFetcher for FallbackFetcher<A, B> {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let first = self.primary.fetch(instance, revision);
        let fallback = self.fallback.clone();
        let instance = instance.clone();
        let revision = revision.to_string();
        async move {
            match first.await {
                Ok(info) => Ok(info),
                Err(_) => fallback.fetch(&instance, &revision).await,
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future;
    use futures::FutureExt;

    struct Fixed(Result<MetadataInfo, FetchError>);

    impl MetadataFetcher for Fixed {
        fn fetch(
            &self,
            _: &ServiceInstance,
            _: &str,
        ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
            future::ready(self.0.clone()).boxed()
        }
    }

    fn info() -> MetadataInfo {
        MetadataInfo::new("web", [])
    }

    #[test]
    fn fallback_is_tried_only_on_error_and_its_error_wins() {
        let i = ServiceInstance::new("web", "h", 1);
        let ok = FallbackFetcher::new(Fixed(Ok(info())), Fixed(Err(FetchError::Timeout)));
        assert_eq!(ok.fetch(&i, "r").now_or_never().unwrap(), Ok(info()));
        let rescued = FallbackFetcher::new(
            Fixed(Err(FetchError::Unreachable("x".into()))),
            Fixed(Ok(info())),
        );
        assert_eq!(rescued.fetch(&i, "r").now_or_never().unwrap(), Ok(info()));
        let both = FallbackFetcher::new(
            Fixed(Err(FetchError::Unreachable("x".into()))),
            Fixed(Err(FetchError::UnknownRevision("r".into()))),
        );
        assert_eq!(
            both.fetch(&i, "r").now_or_never().unwrap(),
            Err(FetchError::UnknownRevision("r".into()))
        );
    }
}
