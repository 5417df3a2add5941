//! What [`EngineBuilder::start`](crate::EngineBuilder::start) uses when no
//! registry or no metadata fetcher was given.
//!
//! This crate depends on no backend: the defaults come from optional
//! features that the `steadfast` facade turns on.
//!
//! | given none of | feature on | feature off |
//! |---|---|---|
//! | registry | `memory`: a fresh embedded `MemoryRegistry` | `start()` fails with [`EngineError::NoRegistry`] |
//! | fetcher | `http`: an `HttpMetadataFetcher` with its defaults; with `dubbo` too, a `DubboFetcher` sending Dubbo 3 records (`meta-v=2.0.0`) to MetadataServiceV2 over Triple and the rest to that HTTP fetcher | [`NoFetcher`]: every fetch fails with a final `FetchError::NoEndpoint` saying why (an export-only engine never fetches) |

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use steadfast_core::{FetchError, MetadataFetcher, MetadataInfo, Registry, ServiceInstance};

use crate::error::EngineError;

/// The message of every [`NoFetcher`] failure.
pub const NO_FETCHER: &str =
    "no metadata fetcher configured (give EngineBuilder::fetcher, or enable the `http` feature)";

/// The fetcher of an engine built without one and without the `http`
/// feature: every fetch fails at once with [`FetchError::NoEndpoint`]
/// ([`NO_FETCHER`]), so a consumer's revisions stay unresolved and say why.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFetcher;

impl MetadataFetcher for NoFetcher {
    fn fetch(
        &self,
        _instance: &ServiceInstance,
        _revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        futures::future::ready(Err(FetchError::NoEndpoint(NO_FETCHER.to_string()))).boxed()
    }
}

/// The default metadata fetcher: HTTP with 5 s timeouts and a 1 MiB body
/// cap (behind Dubbo's routing with the `dubbo` feature).
#[cfg(feature = "http")]
pub(crate) fn fetcher() -> Result<Arc<dyn MetadataFetcher>, EngineError> {
    let http = steadfast_http::HttpMetadataFetcher::builder()
        .build()
        .map(|f| Arc::new(f) as Arc<dyn MetadataFetcher>)
        .map_err(|e| EngineError::FetcherSetup(e.to_string()))?;
    #[cfg(feature = "dubbo")]
    let http = Arc::new(steadfast_dubbo::DubboFetcher::new(
        steadfast_dubbo::TripleFetcher::default(),
        http,
    )) as Arc<dyn MetadataFetcher>;
    Ok(http)
}

/// Without the `http` feature: [`NoFetcher`].
#[cfg(not(feature = "http"))]
pub(crate) fn fetcher() -> Result<Arc<dyn MetadataFetcher>, EngineError> {
    Ok(Arc::new(NoFetcher))
}

/// The default registry: a fresh embedded `MemoryRegistry`.
#[cfg(feature = "memory")]
pub(crate) fn registry() -> Result<Arc<dyn Registry>, EngineError> {
    Ok(Arc::new(steadfast_memory::MemoryRegistry::new()))
}

/// Without the `memory` feature there is no default registry.
#[cfg(not(feature = "memory"))]
pub(crate) fn registry() -> Result<Arc<dyn Registry>, EngineError> {
    Err(EngineError::NoRegistry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_fetcher_fails_every_fetch_with_a_final_typed_error() {
        let instance = steadfast_core::ServiceInstance::new("app", "127.0.0.1", 1);
        match NoFetcher.fetch(&instance, "r1").await {
            Err(FetchError::NoEndpoint(why)) => assert_eq!(why, NO_FETCHER),
            other => panic!("expected NoEndpoint, got {other:?}"),
        }
    }
}
