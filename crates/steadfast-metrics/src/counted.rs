//! [`FetchSource`]: a metadata source whose outcomes are counted under a
//! `source` label, and [`Counted`], which counts any fetcher's outcomes.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt as _;
use steadfast_core::{FetchError, MetadataFetcher, MetadataInfo, ServiceInstance};
use steadfast_http::{FetchMetrics, FetchMetricsSnapshot, HttpMetadataFetcher};

/// A metadata source whose outcomes [`crate::Metrics::fetcher`] reads, as
/// `steadfast_metadata_source_fetches_total{source, outcome}`.
pub trait FetchSource: Send + Sync + 'static {
    /// The `source` label: `rpc` (the provider's MetadataService), `report`
    /// (a remote metadata report) or another short fixed name.
    fn source(&self) -> &str;
    /// The outcome counters so far.
    fn fetch_metrics(&self) -> FetchMetricsSnapshot;
}

impl FetchSource for HttpMetadataFetcher {
    fn source(&self) -> &str {
        "rpc"
    }

    fn fetch_metrics(&self) -> FetchMetricsSnapshot {
        self.metrics()
    }
}

/// Wraps a fetcher and counts its outcomes under a `source` label, e.g.
/// `Counted::new("report", etcd.metadata_report())` as the primary of a
/// `FallbackFetcher`. Cheap to clone; clones share the counters. A fetch
/// dropped before it finished is not counted.
pub struct Counted<F> {
    source: &'static str,
    inner: Arc<F>,
    metrics: Arc<FetchMetrics>,
}

impl<F> Clone for Counted<F> {
    fn clone(&self) -> Self {
        Self {
            source: self.source,
            inner: self.inner.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl<F> std::fmt::Debug for Counted<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("source", &self.source)
            .field("metrics", &self.metrics.snapshot())
            .finish()
    }
}

impl<F: MetadataFetcher> Counted<F> {
    /// Counts `fetcher`'s outcomes under `source`.
    pub fn new(source: &'static str, fetcher: F) -> Self {
        Self {
            source,
            inner: Arc::new(fetcher),
            metrics: Arc::new(FetchMetrics::default()),
        }
    }
}

impl<F: MetadataFetcher> MetadataFetcher for Counted<F> {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let metrics = self.metrics.clone();
        let call = steadfast_core::fetch_contained(self.inner.as_ref(), instance, revision);
        call.map(move |result| {
            metrics.record(&result);
            result
        })
        .boxed()
    }
}

impl<F: MetadataFetcher> FetchSource for Counted<F> {
    fn source(&self) -> &str {
        self.source
    }

    fn fetch_metrics(&self) -> FetchMetricsSnapshot {
        self.metrics.snapshot()
    }
}
