//! [`TripleFetcher`]: fetches one revision's MetadataInfo from a Dubbo 3
//! provider's MetadataServiceV2 over Triple (gRPC on h2c): `POST
//! /org.apache.dubbo.metadata.MetadataServiceV2/GetMetadataInfo` with
//! `tri-service-group: <app>` and `tri-service-version: 2.0.0`.
//!
//! It connects only to the registry record's host, at the MetadataService
//! port the record names (`dubbo.metadata-service.url-params`, else the
//! instance port), checked as the HTTP fetcher checks them
//! (`steadfast_http::metadata_origin`), under a connect timeout and a
//! deadline for the whole call, and reads at most `max_message_bytes`. Every failure is a typed
//! [`FetchError`], classified by the gRPC code, never by message text:
//! unreachable and timed-out providers and error statuses are transient
//! (Java answers an unknown revision with a null message, the Python peer
//! with `INTERNAL`); an oversized answer (tonic's cap: `OUT_OF_RANGE`, so a
//! provider sending that code reads as oversized too) and an answer that is
//! not a MetadataInfoV2 are final.

use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use prost::bytes::{Buf, Bytes};
use prost::Message;
use steadfast_core::{FetchError, MetadataFetcher, MetadataInfo, ServiceInstance};
use steadfast_http::metadata_origin;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::Endpoint;
use tonic_prost::ProstCodec;

use crate::convert::from_v2;
use crate::wire::{
    MetadataInfoV2, MetadataRequest, GET_METADATA_INFO_PATH, GROUP_HEADER, SERVICE_VERSION,
    VERSION_HEADER,
};

/// Default connect timeout (2 s).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default deadline of a whole fetch, connect included (5 s: Dubbo's
/// `metadata.proxy.delay`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default cap on a decoded answer (4 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Settings of a [`TripleFetcher`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TripleFetcherConfig {
    /// Bound of the TCP connect.
    pub connect_timeout: Duration,
    /// Bound of the whole fetch.
    pub timeout: Duration,
    /// Largest answer decoded; a larger one is [`FetchError::TooLarge`].
    pub max_message_bytes: usize,
}

impl Default for TripleFetcherConfig {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// The MetadataServiceV2 client (cheap to clone).
#[derive(Clone, Debug, Default)]
pub struct TripleFetcher {
    config: TripleFetcherConfig,
}

impl TripleFetcher {
    /// A fetcher with `config` (zero timeouts or caps are raised to 1).
    pub fn new(mut config: TripleFetcherConfig) -> Self {
        config.connect_timeout = config.connect_timeout.max(Duration::from_millis(1));
        config.timeout = config.timeout.max(Duration::from_millis(1));
        config.max_message_bytes = config.max_message_bytes.max(1);
        Self { config }
    }

    /// Its settings.
    pub fn config(&self) -> &TripleFetcherConfig {
        &self.config
    }
}

impl MetadataFetcher for TripleFetcher {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let config = self.config.clone();
        let instance = instance.clone();
        let revision = revision.to_string();
        async move {
            let call = call(&config, &instance, &revision);
            let result = match tokio::time::timeout(config.timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(FetchError::Timeout),
            };
            if let Err(e) = &result {
                tracing::debug!(app = ?instance.app, revision = ?revision, instance = ?instance.id,
                    error = %e, kind = e.label(), "triple metadata fetch failed");
            }
            result
        }
        .boxed()
    }
}

async fn call(
    config: &TripleFetcherConfig,
    instance: &ServiceInstance,
    revision: &str,
) -> Result<MetadataInfo, FetchError> {
    let origin = metadata_origin(instance)?;
    let endpoint = Endpoint::from_shared(origin)
        .map_err(|_| FetchError::NoEndpoint(format!("host {:?} is not a URI host", instance.host)))?
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| FetchError::Unreachable(format!("connect failed: {}", error_chain(&e))))?;
    let mut grpc =
        tonic::client::Grpc::new(channel).max_decoding_message_size(config.max_message_bytes);
    grpc.ready()
        .await
        .map_err(|e| FetchError::Unreachable(format!("not ready: {}", error_chain(&e))))?;
    let mut request = tonic::Request::new(MetadataRequest {
        revision: revision.to_string(),
    });
    let group = MetadataValue::try_from(instance.app.as_str())
        .map_err(|_| FetchError::NoEndpoint("the app name cannot be a header value".into()))?;
    request.metadata_mut().insert(GROUP_HEADER, group);
    request
        .metadata_mut()
        .insert(VERSION_HEADER, MetadataValue::from_static(SERVICE_VERSION));
    let answer = grpc
        .unary(
            request,
            PathAndQuery::from_static(GET_METADATA_INFO_PATH),
            RawAnswer,
        )
        .await
        .map_err(|status| status_error(&status, revision, config.max_message_bytes))?;
    // Decoded here, not by tonic: an answer that is not a MetadataInfoV2 is
    // the provider's fault (final), never mistaken for an error status.
    let answer = MetadataInfoV2::decode(answer.into_inner())
        .map_err(|e| FetchError::Malformed(format!("not a MetadataInfoV2: {e}")))?;
    from_v2(answer, instance, revision)
}

/// The call's codec: the request encoded by prost, the answer kept as
/// bytes (tonic still enforces the decode cap on them).
#[derive(Clone, Copy, Debug, Default)]
struct RawAnswer;

/// The answer's bytes, as they came.
#[derive(Clone, Copy, Debug, Default)]
struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        let len = buf.remaining();
        Ok(Some(buf.copy_to_bytes(len)))
    }
}

impl Codec for RawAnswer {
    type Encode = MetadataRequest;
    type Decode = Bytes;
    type Encoder = <ProstCodec<MetadataRequest, MetadataInfoV2> as Codec>::Encoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<MetadataRequest, MetadataInfoV2>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

/// A gRPC status as a fetch error, by its code.
fn status_error(status: &tonic::Status, revision: &str, limit: usize) -> FetchError {
    use tonic::Code;
    match status.code() {
        Code::Unavailable => {
            FetchError::Unreachable(format!("unavailable: {}", shown(status.message())))
        }
        Code::DeadlineExceeded | Code::Cancelled => FetchError::Timeout,
        // The client's decode cap is what answers OutOfRange here.
        Code::OutOfRange => FetchError::TooLarge { limit },
        // Any other status: the provider does not serve the revision now
        // (Java: a null answer; the Python peer: INTERNAL).
        _ => FetchError::UnknownRevision(revision.to_string()),
    }
}

/// Text from a provider or a transport, cut to 80 characters and escaped.
fn shown(text: &str) -> String {
    steadfast_core::excerpt(text, 80)
}

fn error_chain(error: &dyn std::error::Error) -> String {
    shown(&steadfast_core::error_chain(error))
}
