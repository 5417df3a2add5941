//! Consumer side over HTTP: [`HttpMetadataFetcher`] fetches one revision's
//! MetadataInfo from one instance with `GET <base>/metadata/{revision}`.
//!
//! It connects only to the registry record's host (never to a host named in
//! instance metadata), speaks HTTP/1.1 without proxies or redirects, caps
//! the body while streaming it, and maps every failure to a typed
//! [`FetchError`] by inspecting reqwest's error kinds, never its messages.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use reqwest::{StatusCode, Url};
use steadfast_core::{check_metadata, FetchError, MetadataFetcher, MetadataInfo, ServiceInstance};
use thiserror::Error;

use crate::endpoint::{base_segments, metadata_url};
use crate::metrics::{FetchMetrics, FetchMetricsSnapshot};
use crate::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_TIMEOUT};

/// Why [`HttpFetcherBuilder::build`] refused its settings.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HttpFetcherError {
    /// The base path holds a segment with characters other than letters,
    /// digits, `-`, `.`, `_` and `~` (or a `.`/`..` segment).
    #[error("invalid base path {0:?}: segments may hold only letters, digits, '-', '.', '_', '~'")]
    InvalidBasePath(String),
    /// A timeout was set to zero.
    #[error("{0} must be greater than zero")]
    ZeroTimeout(&'static str),
    /// The body cap was set to zero.
    #[error("max_body_bytes must be greater than zero")]
    ZeroBodyLimit,
    /// The underlying HTTP client could not be built (e.g. its TLS backend
    /// failed to initialise).
    #[error("building the HTTP client failed: {0}")]
    Client(#[source] reqwest::Error),
}

/// Settings of an [`HttpMetadataFetcher`]; see [`HttpMetadataFetcher::builder`].
#[derive(Clone, Debug)]
pub struct HttpFetcherBuilder {
    connect_timeout: Duration,
    timeout: Duration,
    max_body_bytes: usize,
    base_path: String,
}

impl Default for HttpFetcherBuilder {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            base_path: crate::DEFAULT_BASE_PATH.to_string(),
        }
    }
}

impl HttpFetcherBuilder {
    /// Deadline of the TCP connect (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Deadline of a whole request, connect to last body byte (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Largest body accepted, in bytes (default 1 MiB).
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }

    /// Base path the providers mount the MetadataService under (default
    /// [`DEFAULT_BASE_PATH`](crate::DEFAULT_BASE_PATH)).
    pub fn base_path(mut self, base_path: impl Into<String>) -> Self {
        self.base_path = base_path.into();
        self
    }

    /// The settings as plain data ([`crate::HttpFetcherConfig`]).
    pub fn to_config(&self) -> crate::HttpFetcherConfig {
        crate::HttpFetcherConfig {
            connect_timeout: self.connect_timeout,
            timeout: self.timeout,
            max_body_bytes: self.max_body_bytes,
            base_path: self.base_path.clone(),
        }
    }

    /// Checks every value; returns the base path's segments.
    pub(crate) fn check(&self) -> Result<Vec<String>, HttpFetcherError> {
        if self.connect_timeout.is_zero() {
            return Err(HttpFetcherError::ZeroTimeout("connect_timeout"));
        }
        if self.timeout.is_zero() {
            return Err(HttpFetcherError::ZeroTimeout("timeout"));
        }
        if self.max_body_bytes == 0 {
            return Err(HttpFetcherError::ZeroBodyLimit);
        }
        base_segments(&self.base_path)
            .ok_or_else(|| HttpFetcherError::InvalidBasePath(self.base_path.clone()))
    }

    /// Checks the settings and builds the fetcher with its HTTP client.
    pub fn build(self) -> Result<HttpMetadataFetcher, HttpFetcherError> {
        let base_segments = self.check()?;
        let client = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .timeout(self.timeout)
            .http1_only()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("steadfast-http/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(HttpFetcherError::Client)?;
        Ok(HttpMetadataFetcher {
            inner: Arc::new(Inner {
                client,
                base_segments,
                max_body_bytes: self.max_body_bytes,
                metrics: FetchMetrics::default(),
            }),
        })
    }
}

/// A [`MetadataFetcher`] over HTTP/1.1. Cheap to clone; clones share the
/// connection pool and the metrics.
#[derive(Clone, Debug)]
pub struct HttpMetadataFetcher {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: reqwest::Client,
    base_segments: Vec<String>,
    max_body_bytes: usize,
    metrics: FetchMetrics,
}

impl HttpMetadataFetcher {
    /// Starts configuring a fetcher.
    pub fn builder() -> HttpFetcherBuilder {
        HttpFetcherBuilder::default()
    }

    /// The outcome counters so far. A fetch dropped by the caller before it
    /// finished (e.g. by an outer deadline) is not counted.
    pub fn metrics(&self) -> FetchMetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// The URL `instance`'s metadata for `revision` would be fetched from,
    /// or why the instance has no usable endpoint.
    pub fn url_for(&self, instance: &ServiceInstance, revision: &str) -> Result<Url, FetchError> {
        metadata_url(instance, &self.inner.base_segments, revision)
    }
}

impl MetadataFetcher for HttpMetadataFetcher {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let inner = self.inner.clone();
        let url = self.url_for(instance, revision);
        let app = instance.app.clone();
        let id = instance.id.clone();
        let revision = revision.to_string();
        async move {
            let result = match url {
                Ok(url) => inner.get(url, &app, &revision).await,
                Err(e) => Err(e),
            };
            inner.metrics.record(&result);
            if let Err(e) = &result {
                tracing::debug!(app, revision, instance = %id, error = %e, kind = e.label(), "http metadata fetch failed");
            }
            result
        }
        .boxed()
    }
}

impl Inner {
    async fn get(&self, url: Url, app: &str, revision: &str) -> Result<MetadataInfo, FetchError> {
        let response = self.client.get(url).send().await.map_err(map_error)?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(FetchError::UnknownRevision(revision.to_string()));
        }
        if !status.is_success() {
            return Err(FetchError::ServerError(status.as_u16()));
        }
        let body = self.read_capped(response).await?;
        let info: MetadataInfo =
            serde_json::from_slice(&body).map_err(|e| FetchError::Malformed(e.to_string()))?;
        check_metadata(app, revision, &info)?;
        Ok(info)
    }

    /// Reads the body chunk by chunk, giving up as soon as it would exceed
    /// the cap (or at once when the announced length does).
    async fn read_capped(&self, response: reqwest::Response) -> Result<Vec<u8>, FetchError> {
        let limit = self.max_body_bytes;
        let too_large = FetchError::TooLarge { limit };
        let announced = response.content_length();
        if announced.is_some_and(|len| len > limit as u64) {
            return Err(too_large);
        }
        let capacity = announced.map_or(0, |len| len as usize);
        let mut body = Vec::with_capacity(capacity);
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(map_error)?;
            if body.len() + chunk.len() > limit {
                return Err(too_large);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Maps a transport error by its kind: any timeout (connect or total) is
/// [`FetchError::Timeout`]; everything else that kept the answer from
/// arriving (refused, reset, closed early) is [`FetchError::Unreachable`].
fn map_error(error: reqwest::Error) -> FetchError {
    if error.is_timeout() {
        FetchError::Timeout
    } else {
        FetchError::Unreachable(describe(&error))
    }
}

/// The error and its sources, joined, without the URL.
fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "connect failed"
    } else if error.is_body() {
        "reading the body failed"
    } else if error.is_request() {
        "request failed"
    } else {
        "transport failed"
    };
    let mut msg = kind.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}
