//! [`TripleMetadataServer`]: a provider's MetadataServiceV2 over Triple
//! (gRPC on h2c), serving the revisions of a [`MetadataStore`], the same
//! store the HTTP MetadataService serves, so one export answers Dubbo
//! consumers and Steadfast ones. An unknown revision is `NOT_FOUND`; any
//! other path is `UNIMPLEMENTED`. Headers are not required (Java falls
//! back the same way when `tri-service-group` is missing).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use steadfast_http::MetadataStore;
use tokio::sync::oneshot;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic_prost::ProstCodec;

use crate::convert::to_v2;
use crate::wire::{MetadataInfoV2, MetadataRequest, GET_METADATA_INFO_PATH};

/// Largest request decoded (a revision is a short string).
const MAX_REQUEST_BYTES: usize = 4 << 10;
/// How long [`TripleMetadataServer::stop`] waits for open calls.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Bound of one call on the server (the answer is a map lookup; a client
/// that does not read it is cut off).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Calls served at once on one connection.
pub const CALLS_PER_CONNECTION: usize = 64;

/// The MetadataServiceV2 as a tower service over a store.
#[derive(Clone, Debug)]
pub struct MetadataServiceV2 {
    store: MetadataStore,
}

impl MetadataServiceV2 {
    /// Serves the revisions of `store`.
    pub fn new(store: MetadataStore) -> Self {
        Self { store }
    }
}

impl NamedService for MetadataServiceV2 {
    const NAME: &'static str = "org.apache.dubbo.metadata.MetadataServiceV2";
}

/// The unary method.
struct GetMetadataInfo(MetadataStore);

impl UnaryService<MetadataRequest> for GetMetadataInfo {
    type Response = MetadataInfoV2;
    type Future = std::future::Ready<Result<tonic::Response<MetadataInfoV2>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<MetadataRequest>) -> Self::Future {
        let revision = request.into_inner().revision;
        std::future::ready(match self.0.get(&revision) {
            Some(info) => Ok(tonic::Response::new(to_v2(&info))),
            None => Err(tonic::Status::not_found("revision not served")),
        })
    }
}

type BoxResponse = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl tonic::codegen::Service<Request<Body>> for MetadataServiceV2 {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxResponse;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> BoxResponse {
        if request.uri().path() != GET_METADATA_INFO_PATH {
            return Box::pin(async {
                Ok(tonic::Status::unimplemented("no such method").into_http())
            });
        }
        let method = GetMetadataInfo(self.store.clone());
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<MetadataInfoV2, MetadataRequest>::default())
                .max_decoding_message_size(MAX_REQUEST_BYTES);
            Ok(grpc.unary(method, request).await)
        })
    }
}

/// A running MetadataServiceV2 on its own socket; [`TripleMetadataServer::stop`]
/// ends it (dropping it ends it too).
#[derive(Debug)]
pub struct TripleMetadataServer {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TripleMetadataServer {
    /// Binds `bind` (port 0: any free port) and serves `store` there. Must
    /// run inside a tokio runtime (actix's is one).
    pub async fn start(bind: SocketAddr, store: MetadataStore) -> io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(bind).await?;
        let local_addr = listener.local_addr()?;
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let (stop, stopped) = oneshot::channel::<()>();
        let service = MetadataServiceV2::new(store);
        let task = tokio::spawn(async move {
            let signal = async {
                let _ = stopped.await;
            };
            if let Err(e) = tonic::transport::Server::builder()
                .timeout(CALL_TIMEOUT)
                .concurrency_limit_per_connection(CALLS_PER_CONNECTION)
                .http2_keepalive_interval(Some(Duration::from_secs(30)))
                .http2_keepalive_timeout(Some(Duration::from_secs(10)))
                .serve_with_incoming_shutdown(service, incoming, signal)
                .await
            {
                tracing::warn!(error = %e, "triple metadata server failed");
            }
        });
        Ok(Self {
            local_addr,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and waits for open calls to finish, at most
    /// [`STOP_GRACE`]; then ends the rest.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(STOP_GRACE, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

impl Drop for TripleMetadataServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
