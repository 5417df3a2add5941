//! Steadfast's HTTP MetadataService, both sides of it.
//!
//! - Provider side: a [`MetadataStore`] of the revisions an app exports,
//!   served by [`metadata_scope`] inside the user's own actix-web `App`, or
//!   by a standalone [`MetadataServer`]. `GET <base>/metadata/{revision}`
//!   answers 200 with the [`MetadataInfo`](steadfast_core::MetadataInfo) as
//!   JSON, or 404 for a revision the store does not hold.
//! - Consumer side: [`HttpMetadataFetcher`], a
//!   [`MetadataFetcher`](steadfast_core::MetadataFetcher) over HTTP/1.1 that
//!   connects only to the host of the registry record, caps the body size
//!   while streaming it, maps every failure to a typed
//!   [`FetchError`](steadfast_core::FetchError) and counts outcomes in
//!   [`FetchMetrics`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod endpoint;
mod fetcher;
mod fetcher_config;
mod metrics;
mod server;
mod store;

pub use endpoint::metadata_origin;
pub use fetcher::{HttpFetcherBuilder, HttpFetcherError, HttpMetadataFetcher};
pub use fetcher_config::HttpFetcherConfig;
pub use metrics::{FetchMetrics, FetchMetricsSnapshot};
pub use server::{metadata_scope, MetadataServer, DEFAULT_BASE_PATH};
pub use store::MetadataStore;

/// Default connect timeout of [`HttpMetadataFetcher`].
pub const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Default total timeout of one request of [`HttpMetadataFetcher`].
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Default cap of a metadata body, in bytes (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
