//! [`DubboFetcher`]: one fetcher for an estate where Dubbo providers and
//! Steadfast's own sit side by side. The record decides where its
//! MetadataInfo comes from:
//!
//! | the record | fetched from |
//! |---|---|
//! | `dubbo.metadata.storage-type=remote`, a report given | the remote metadata report |
//! | `meta-v=2.0.0`, the MetadataService's protocol `tri` (or not named) | MetadataServiceV2 over Triple ([`TripleFetcher`]) |
//! | any other Dubbo record (`dubbo.metadata-service.url-params` without `meta-v=2.0.0`, or naming another protocol: dubbo-go writes `meta-v=2.0.0` beside a `dubbo` MetadataService, apache/dubbo-go#2939) | nowhere: MetadataService V1 speaks hessian2, which Steadfast does not ([`FetchError::NoEndpoint`], final, saying so) |
//! | anything else (a Steadfast record) | the other fetcher (HTTP by default) |

use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};
use steadfast_core::{
    metadata_service, FetchError, MetadataFetcher, MetadataInfo, ServiceInstance,
    DUBBO_METADATA_PARAMS_KEY, DUBBO_META_VERSION_KEY, DUBBO_STORAGE_KEY, META_V2,
};

use crate::fetcher::TripleFetcher;

/// Where one record's MetadataInfo comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    /// The remote metadata report.
    Report,
    /// MetadataServiceV2 over Triple.
    Triple,
    /// The other fetcher (a Steadfast record).
    Other,
    /// A Dubbo record whose MetadataService Steadfast cannot call.
    Unsupported,
}

/// The message of [`Route::Unsupported`]'s error.
pub const V1_ONLY: &str = "the provider serves MetadataService V1 only (hessian2 over the dubbo \
     protocol or Triple), which Steadfast does not speak; export MetadataServiceV2 \
     (Dubbo >= 3.3 with tri and protobuf: meta-v=2.0.0) or use storage-type=remote";

/// Where `instance`'s MetadataInfo comes from (`has_report`: a remote
/// report is configured).
pub fn route(instance: &ServiceInstance, has_report: bool) -> Route {
    let meta = &instance.metadata;
    if has_report && meta.get(DUBBO_STORAGE_KEY).is_some_and(|s| s == "remote") {
        Route::Report
    } else if meta
        .get(DUBBO_META_VERSION_KEY)
        .is_some_and(|v| v == META_V2)
    {
        match metadata_service(meta) {
            Ok(None) => Route::Triple,
            Ok(Some(s)) if s.protocol == "tri" => Route::Triple,
            _ => Route::Unsupported,
        }
    } else if meta.contains_key(DUBBO_METADATA_PARAMS_KEY) {
        Route::Unsupported
    } else {
        Route::Other
    }
}

/// Routes each fetch by its record (see the module docs).
#[derive(Clone)]
pub struct DubboFetcher {
    triple: TripleFetcher,
    other: Arc<dyn MetadataFetcher>,
    report: Option<Arc<dyn MetadataFetcher>>,
}

impl std::fmt::Debug for DubboFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DubboFetcher")
            .field("triple", &self.triple)
            .field("report", &self.report.is_some())
            .finish_non_exhaustive()
    }
}

impl DubboFetcher {
    /// Dubbo records over `triple`, Steadfast records through `other`.
    pub fn new(triple: TripleFetcher, other: Arc<dyn MetadataFetcher>) -> Self {
        Self {
            triple,
            other,
            report: None,
        }
    }

    /// Reads records with `storage-type=remote` from `report` (e.g. the
    /// Nacos registry's metadata report).
    pub fn with_report(mut self, report: Arc<dyn MetadataFetcher>) -> Self {
        self.report = Some(report);
        self
    }
}

impl MetadataFetcher for DubboFetcher {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        match (route(instance, self.report.is_some()), &self.report) {
            (Route::Report, Some(report)) => report.fetch(instance, revision),
            (Route::Triple, _) => self.triple.fetch(instance, revision),
            (Route::Unsupported, _) => {
                futures::future::ready(Err(FetchError::NoEndpoint(V1_ONLY.to_string()))).boxed()
            }
            _ => self.other.fetch(instance, revision),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> ServiceInstance {
        let mut i = ServiceInstance::new("a", "h", 1);
        for (k, v) in pairs {
            i.metadata.insert(k.to_string(), v.to_string());
        }
        i
    }

    #[test]
    fn the_record_picks_the_source() {
        let params = (
            DUBBO_METADATA_PARAMS_KEY,
            r#"{"port":"1","protocol":"tri"}"#,
        );
        assert_eq!(route(&with(&[]), true), Route::Other);
        assert_eq!(
            route(&with(&[("meta-v", "2.0.0"), params]), false),
            Route::Triple
        );
        assert_eq!(
            route(&with(&[("meta-v", "1.0.0"), params]), false),
            Route::Unsupported
        );
        assert_eq!(route(&with(&[params]), false), Route::Unsupported);
        // dubbo-go's #2939 record: meta-v=2.0.0 beside a `dubbo` MetadataService.
        let go = (
            DUBBO_METADATA_PARAMS_KEY,
            r#"{"port":"28001","protocol":"dubbo"}"#,
        );
        assert_eq!(
            route(&with(&[("meta-v", "2.0.0"), go]), false),
            Route::Unsupported
        );
        assert_eq!(route(&with(&[("meta-v", "2.0.0")]), false), Route::Triple);
        let remote = (DUBBO_STORAGE_KEY, "remote");
        assert_eq!(
            route(&with(&[remote, ("meta-v", "2.0.0")]), true),
            Route::Report
        );
        assert_eq!(
            route(&with(&[remote, ("meta-v", "2.0.0")]), false),
            Route::Triple
        );
    }
}
