//! Calling a Triple (gRPC) service through Steadfast's directory with a
//! tonic channel: `Directory::discover` feeds `Channel::balance_channel`
//! with `Change::Insert` / `Change::Remove` as providers come and go.
//!
//! Two providers of `org.example.Greeter` (hand-written prost messages, no
//! protoc) export in Dubbo 3's layout (`ExportSpec::dubbo_triple`) and
//! serve MetadataServiceV2 over Triple; the consumer resolves them with the
//! default fetcher, calls `Greet` 20 times through the balanced channel,
//! then one provider shuts down and every later call lands on the other.
//! Prints each step; exits non-zero if one did not happen.
//!
//! Run: `cargo run --example triple_discover` (embedded registry).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use steadfast::dubbo::TripleMetadataServer;
use steadfast::http::MetadataStore;
use steadfast::{Engine, ExportSpec, Reference, ServiceInfo};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

const APP: &str = "greeter";
const IFACE: &str = "org.example.Greeter";
const GREET: &str = "/org.example.Greeter/Greet";

/// `message GreetRequest { string name = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
struct GreetRequest {
    #[prost(string, tag = "1")]
    name: String,
}

/// `message GreetReply { string message = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
struct GreetReply {
    #[prost(string, tag = "1")]
    message: String,
}

/// One provider's Greeter: answers with its own port.
#[derive(Clone)]
struct Greeter(u16);

impl NamedService for Greeter {
    const NAME: &'static str = "org.example.Greeter";
}

impl UnaryService<GreetRequest> for Greeter {
    type Response = GreetReply;
    type Future = std::future::Ready<Result<tonic::Response<GreetReply>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<GreetRequest>) -> Self::Future {
        let name = request.into_inner().name;
        std::future::ready(Ok(tonic::Response::new(GreetReply {
            message: format!("hello {name} from {}", self.0),
        })))
    }
}

impl tonic::codegen::Service<Request<Body>> for Greeter {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<Body>, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            if request.uri().path() != GREET {
                return Ok(tonic::Status::unimplemented("").into_http());
            }
            let mut grpc = Grpc::new(ProstCodec::<GreetReply, GreetRequest>::default());
            Ok(grpc.unary(me, request).await)
        })
    }
}

/// Starts a Greeter on a free loopback port.
async fn start_greeter() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .serve_with_incoming(Greeter(addr.port()), incoming)
            .await;
    });
    (addr, task)
}

/// Calls Greet `n` times through `channel`; the replies per provider port.
async fn greet(channel: &Channel, n: usize) -> Result<BTreeMap<String, usize>, tonic::Status> {
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let reply = grpc
            .unary(
                tonic::Request::new(GreetRequest {
                    name: format!("call {i}"),
                }),
                tonic::codegen::http::uri::PathAndQuery::from_static(GREET),
                ProstCodec::<GreetRequest, GreetReply>::default(),
            )
            .await?
            .into_inner();
        let from = reply.message.rsplit(' ').next().unwrap_or("?").to_string();
        *seen.entry(from).or_insert(0) += 1;
    }
    Ok(seen)
}

#[actix_rt::main]
async fn main() -> ExitCode {
    // The providers: two Greeters, one MetadataServiceV2 over their store.
    let store = MetadataStore::new();
    let metadata = TripleMetadataServer::start("127.0.0.1:0".parse().unwrap(), store.clone())
        .await
        .unwrap();
    let engine = Engine::builder()
        .metadata_publisher(store.clone())
        .start()
        .unwrap();
    let mut exports = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (addr, task) = start_greeter().await;
        let spec = ExportSpec::new(APP, "127.0.0.1", addr.port())
            .service(
                ServiceInfo::builder(IFACE, addr.port())
                    .protocol("tri")
                    .path(IFACE)
                    .param("methods", "Greet")
                    .build(),
            )
            .dubbo_triple(metadata.local_addr().port());
        exports.push(engine.export(spec).await.unwrap());
        tasks.push(task);
        println!("provider: Greeter on {addr}");
    }

    // The consumer: the directory, as a tonic channel's discovery.
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    if let Err(why) = dir.ready(Duration::from_secs(10)).await {
        eprintln!("FAIL: the directory never served: {why}");
        return ExitCode::FAILURE;
    }
    let (channel, changes) = Channel::balance_channel::<String>(16);
    let mut discover = dir.discover(|endpoint| {
        Endpoint::from_shared(format!("http://{}", endpoint.address())).expect("an address")
    });
    tokio::spawn(async move {
        // tower's Change, handed on as tonic's own (the same two cases).
        while let Some(Ok(change)) = discover.next().await {
            let change = match change {
                tower::discover::Change::Insert(key, endpoint) => {
                    println!("discover: insert {key}");
                    tonic::transport::channel::Change::Insert(key, endpoint)
                }
                tower::discover::Change::Remove(key) => {
                    println!("discover: remove {key}");
                    tonic::transport::channel::Change::Remove(key)
                }
            };
            if changes.send(change).await.is_err() {
                break;
            }
        }
    });

    let seen = match greet(&channel, 20).await {
        Ok(seen) => seen,
        Err(status) => {
            eprintln!("FAIL: a call failed: {status}");
            return ExitCode::FAILURE;
        }
    };
    println!("20 calls through the directory: {seen:?}");
    if seen.len() != 2 {
        eprintln!("FAIL: the calls did not reach both providers");
        return ExitCode::FAILURE;
    }

    // One provider leaves: its endpoint is removed, every call goes on.
    let gone = exports.remove(0);
    let gone_port = gone.instance().port.to_string();
    gone.shutdown(Duration::from_secs(1)).await.unwrap();
    let mut left = BTreeMap::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = match greet(&channel, 10).await {
            Ok(seen) => seen,
            Err(status) => {
                eprintln!("FAIL: a call failed after the shutdown: {status}");
                return ExitCode::FAILURE;
            }
        };
        if !left.contains_key(&gone_port) {
            break;
        }
    }
    println!("10 calls after provider {gone_port} left: {left:?}");
    if left.contains_key(&gone_port) || left.is_empty() {
        eprintln!("FAIL: calls still reach the provider that left");
        return ExitCode::FAILURE;
    }
    engine.shutdown().await;
    metadata.stop().await;
    for task in tasks {
        task.abort();
    }
    println!("ok: a tonic channel balanced over Steadfast's directory");
    ExitCode::SUCCESS
}
