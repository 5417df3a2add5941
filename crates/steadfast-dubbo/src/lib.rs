//! Dubbo 3 interop for Steadfast: MetadataServiceV2 over Triple, both
//! ways, with hand-written prost messages (no protoc).
//!
//! - Consume: [`TripleFetcher`] fetches a Dubbo provider's MetadataInfo;
//!   [`DubboFetcher`] routes each record to Triple, the remote metadata
//!   report or Steadfast's own fetcher by what the record says.
//! - Serve: [`TripleMetadataServer`] answers Dubbo consumers from the same
//!   `MetadataStore` the HTTP MetadataService serves.
//!
//! Reading Dubbo's records is the backends' job (core's
//! `adopt_dubbo_metadata`, used by the Nacos and etcd backends); revisions
//! are Dubbo's MD5 form everywhere (core's `compute_revision`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod convert;
mod fetcher;
mod route;
mod server;
pub mod wire;

pub use convert::{from_v2, to_v2};
pub use fetcher::{
    TripleFetcher, TripleFetcherConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_TIMEOUT,
};
pub use route::{route, DubboFetcher, Route, V1_ONLY};
pub use server::{
    MetadataServiceV2, TripleMetadataServer, CALLS_PER_CONNECTION, CALL_TIMEOUT, STOP_GRACE,
};
