//! The Triple client against the Triple server over real loopback sockets,
//! and against servers that misbehave: what Dubbo's own peers cannot be
//! made to do (hang, flood, send garbage, refuse) ends as a typed error
//! within the deadline, with bounded memory.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use steadfast_core::{FetchError, MetadataFetcher, MetadataInfo, ServiceInfo, ServiceInstance};
use steadfast_dubbo::{
    MetadataServiceV2, TripleFetcher, TripleFetcherConfig, TripleMetadataServer,
};
use steadfast_http::MetadataStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn metadata(app: &str, services: usize) -> MetadataInfo {
    MetadataInfo::new(
        app,
        (0..services).map(|i| {
            ServiceInfo::builder(format!("org.example.Service{i}"), 50051)
                .protocol("tri")
                .path(format!("org.example.Service{i}"))
                .param("methods", "a,b,c")
                .build()
        }),
    )
}

fn instance_at(app: &str, addr: SocketAddr) -> ServiceInstance {
    let mut i = ServiceInstance::new(app, "127.0.0.1", 20880);
    i.metadata.insert(
        "dubbo.metadata-service.url-params".into(),
        format!(r#"{{"port":"{}","protocol":"tri"}}"#, addr.port()),
    );
    i.metadata.insert("meta-v".into(), "2.0.0".into());
    steadfast_core::adopt_dubbo_metadata(&mut i.metadata).unwrap();
    i
}

fn fetcher(timeout: Duration, max: usize) -> TripleFetcher {
    TripleFetcher::new(TripleFetcherConfig {
        connect_timeout: timeout,
        timeout,
        max_message_bytes: max,
    })
}

#[tokio::test]
async fn a_served_revision_round_trips_and_an_unknown_one_is_retryable() {
    let store = MetadataStore::new();
    let info = metadata("greeter", 3);
    store.publish(info.clone());
    let server = TripleMetadataServer::start(loopback(), store.clone())
        .await
        .unwrap();
    let inst = instance_at("greeter", server.local_addr());
    let f = TripleFetcher::default();
    assert_eq!(f.fetch(&inst, &info.revision).await.unwrap(), info);
    let err = f.fetch(&inst, "nope").await.unwrap_err();
    assert!(matches!(err, FetchError::UnknownRevision(_)), "{err:?}");
    assert_eq!(err.class(), steadfast_core::ErrorClass::Transient);
    server.stop().await;
    let err = f.fetch(&inst, &info.revision).await.unwrap_err();
    assert!(matches!(err, FetchError::Unreachable(_)), "{err:?}");
}

/// Serves MetadataServiceV2 and records the request headers.
#[derive(Clone)]
struct Recording {
    inner: MetadataServiceV2,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl tonic::server::NamedService for Recording {
    const NAME: &'static str = "org.apache.dubbo.metadata.MetadataServiceV2";
}

impl tonic::codegen::Service<Request<Body>> for Recording {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = <MetadataServiceV2 as tonic::codegen::Service<Request<Body>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let mut seen = self.seen.lock().unwrap();
        seen.push((":path".into(), request.uri().path().to_string()));
        for (k, v) in request.headers() {
            seen.push((k.to_string(), v.to_str().unwrap_or("?").to_string()));
        }
        self.inner.call(request)
    }
}

#[tokio::test]
async fn the_call_carries_dubbos_path_and_headers() {
    let store = MetadataStore::new();
    let info = metadata("greeter", 1);
    store.publish(info.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let svc = Recording {
        inner: MetadataServiceV2::new(store),
        seen: seen.clone(),
    };
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let task = tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(svc, incoming));
    TripleFetcher::default()
        .fetch(&instance_at("greeter", addr), &info.revision)
        .await
        .unwrap();
    task.abort();
    let seen = seen.lock().unwrap().clone();
    let has = |k: &str, v: &str| seen.iter().any(|(a, b)| a == k && b.starts_with(v));
    assert!(
        has(
            ":path",
            "/org.apache.dubbo.metadata.MetadataServiceV2/GetMetadataInfo"
        ),
        "{seen:?}"
    );
    assert!(has("tri-service-group", "greeter"), "{seen:?}");
    assert!(has("tri-service-version", "2.0.0"), "{seen:?}");
    assert!(has("content-type", "application/grpc"), "{seen:?}");
    assert!(has("te", "trailers"), "{seen:?}");
}

#[tokio::test]
async fn large_metadata_fits_under_the_cap_and_past_it_is_final() {
    let store = MetadataStore::new();
    let info = metadata("big", 5_000);
    store.publish(info.clone());
    let server = TripleMetadataServer::start(loopback(), store)
        .await
        .unwrap();
    let inst = instance_at("big", server.local_addr());
    let got = fetcher(Duration::from_secs(30), 4 << 20)
        .fetch(&inst, &info.revision)
        .await
        .unwrap();
    assert_eq!(got.services.len(), 5_000);
    let err = fetcher(Duration::from_secs(30), 64 << 10)
        .fetch(&inst, &info.revision)
        .await
        .unwrap_err();
    assert_eq!(err, FetchError::TooLarge { limit: 64 << 10 });
    assert_eq!(err.class(), steadfast_core::ErrorClass::Persistent);
}

/// A server that accepts and then does `behave` with each connection.
async fn raw_server<F, Fut>(behave: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(behave(conn));
        }
    });
    addr
}

#[tokio::test]
async fn a_hung_provider_times_out_at_the_deadline() {
    let addr = raw_server(|mut conn| async move {
        let mut buf = [0u8; 1024];
        // Reads forever, never answers.
        while conn.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    let started = tokio::time::Instant::now();
    // The outer bound only turns a missing deadline into a failure.
    let fetch =
        fetcher(Duration::from_millis(300), 1 << 20).fetch(&instance_at("greeter", addr), "r1");
    let err = tokio::time::timeout(Duration::from_secs(60), fetch)
        .await
        .expect("the fetch's own deadline ends it")
        .unwrap_err();
    assert_eq!(err, FetchError::Timeout);
    // Never earlier than the deadline (an upper bound would be a timed test).
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn garbage_and_refused_connections_are_typed_errors() {
    let addr = raw_server(|mut conn| async move {
        let _ = conn
            .write_all(b"HTTP/1.1 200 OK\r\n\r\n\x00\xff\xfe garbage")
            .await;
    })
    .await;
    let err = fetcher(Duration::from_secs(5), 1 << 20)
        .fetch(&instance_at("greeter", addr), "r1")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Unreachable(_) | FetchError::UnknownRevision(_)
        ),
        "{err:?}"
    );
    // A port nobody listens on.
    let free = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let closed = free.local_addr().unwrap();
    drop(free);
    let err = fetcher(Duration::from_secs(5), 1 << 20)
        .fetch(&instance_at("greeter", closed), "r1")
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Unreachable(_)), "{err:?}");
}

#[tokio::test]
async fn another_apps_answer_is_a_mismatch() {
    let store = MetadataStore::new();
    let info = metadata("db", 1);
    store.publish(info.clone());
    let server = TripleMetadataServer::start(loopback(), store)
        .await
        .unwrap();
    let err = TripleFetcher::default()
        .fetch(&instance_at("greeter", server.local_addr()), &info.revision)
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Mismatch { .. }), "{err:?}");
}

/// A message that is no MetadataInfoV2: field 3 (the services map) as a
/// number.
#[derive(Clone, PartialEq, prost::Message)]
struct NotMetadata {
    #[prost(uint64, tag = "3")]
    services: u64,
}

/// Answers every call with [`NotMetadata`].
#[derive(Clone)]
struct Hostile;

impl tonic::server::NamedService for Hostile {
    const NAME: &'static str = "org.apache.dubbo.metadata.MetadataServiceV2";
}

impl tonic::server::UnaryService<steadfast_dubbo::wire::MetadataRequest> for Hostile {
    type Response = NotMetadata;
    type Future = std::future::Ready<Result<tonic::Response<NotMetadata>, tonic::Status>>;

    fn call(&mut self, _: tonic::Request<steadfast_dubbo::wire::MetadataRequest>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(NotMetadata { services: 7 })))
    }
}

impl tonic::codegen::Service<Request<Body>> for Hostile {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<Body>, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<
                NotMetadata,
                steadfast_dubbo::wire::MetadataRequest,
            >::default());
            Ok(grpc.unary(Hostile, request).await)
        })
    }
}

#[tokio::test]
async fn an_answer_that_is_not_metadata_is_malformed_and_final() {
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let task =
        tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(Hostile, incoming));
    let err = TripleFetcher::default()
        .fetch(&instance_at("greeter", addr), "r1")
        .await
        .unwrap_err();
    task.abort();
    assert!(matches!(err, FetchError::Malformed(_)), "{err:?}");
    assert_eq!(err.class(), steadfast_core::ErrorClass::Persistent);
}

#[tokio::test]
async fn a_host_that_is_not_a_host_is_no_endpoint() {
    for host in ["a/b", "u@h", "h?x", "h:1", ""] {
        let mut inst = instance_at("greeter", "127.0.0.1:1".parse().unwrap());
        inst.host = host.into();
        let err = TripleFetcher::default()
            .fetch(&inst, "r1")
            .await
            .unwrap_err();
        assert!(matches!(err, FetchError::NoEndpoint(_)), "{host}: {err:?}");
    }
}
