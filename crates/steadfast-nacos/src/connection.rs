//! One gRPC connection to a Nacos server: the handshake (server check, the
//! bi-stream opened with a `ConnectionSetupRequest`, then a health check
//! that the server knows the connection), unary calls under a deadline, and
//! the bi-stream's reader, which answers every server request and hands
//! pushes to the client. Unary calls and the bi-stream share one HTTP/2
//! connection: the server ties a client's instances and subscriptions to
//! it (rnacos keys the connection by the client's address).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

use crate::config::NacosConfig;
use crate::error::NacosError;
use crate::protocol::{
    Ack, ConnectionSetupRequest, HealthCheckRequest, ResponseHead, ServerCheckRequest,
    ServerCheckResponse, ServerRequest, ServiceInfo, SUCCESS,
};
use crate::wire::{Payload, BI_STREAM_PATH, UNARY_PATH};

/// What the bi-stream's reader hands the client.
#[derive(Debug)]
pub enum Inbound {
    /// A pushed full list of a service, and when its message arrived.
    Push(ServiceInfo, std::time::Instant),
    /// The server asked the client to reconnect elsewhere.
    Reset,
    /// A listened config item changed (data id, group).
    ConfigChanged(String, String),
    /// The stream ended or broke: the connection is gone.
    Closed(String),
}

/// The error code of "the server does not know this connection yet".
const UNREGISTERED: i32 = 301;

/// An open connection.
#[derive(Debug)]
pub struct Connection {
    channel: Channel,
    to_server: mpsc::Sender<Payload>,
    server: String,
    namespace: String,
    max_message_bytes: usize,
    token: Arc<std::sync::RwLock<Option<steadfast_core::Secret>>>,
    ids: AtomicU64,
    /// The id the server gave the connection (informational).
    pub connection_id: String,
    reader: Option<tokio::task::AbortHandle>,
}

impl Drop for Connection {
    /// Dropping the connection ends it at once: the stream's reader stops
    /// and the outbound half closes, so the server drops the connection's
    /// instances and subscriptions now, not at its detection timeout.
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}

impl Connection {
    /// Connects to `server` (`host:port`), within the config's connect
    /// timeout for the whole handshake; `inbound` receives the stream's
    /// pushes and its end.
    pub async fn open(
        server: &str,
        limits: &NacosConfig,
        token: Arc<std::sync::RwLock<Option<steadfast_core::Secret>>>,
        inbound: mpsc::Sender<(u64, Inbound)>,
        generation: u64,
    ) -> Result<Arc<Connection>, NacosError> {
        let work = Self::handshake(server, limits, token, inbound, generation);
        tokio::time::timeout(limits.connect_timeout, work)
            .await
            .map_err(|_| NacosError::Timeout { call: "connect" })?
    }

    async fn handshake(
        server: &str,
        limits: &NacosConfig,
        token: Arc<std::sync::RwLock<Option<steadfast_core::Secret>>>,
        inbound: mpsc::Sender<(u64, Inbound)>,
        generation: u64,
    ) -> Result<Arc<Connection>, NacosError> {
        let (namespace, request_timeout) = (limits.namespace.as_str(), limits.request_timeout);
        let connect = |source| NacosError::Connect {
            server: server.to_string(),
            source,
        };
        let endpoint = Endpoint::from_shared(format!("http://{server}"))
            .map_err(connect)?
            .connect_timeout(request_timeout)
            .tcp_nodelay(true)
            // A push of a large service is megabytes: windows that fit it
            // spare the sender a round trip per 64 KiB.
            .initial_stream_window_size(Some(8 << 20))
            .initial_connection_window_size(Some(16 << 20));
        let channel = endpoint.connect().await.map_err(connect)?;
        let (to_server, outbound) = mpsc::channel::<Payload>(64);
        let mut conn = Connection {
            channel,
            to_server,
            server: server.to_string(),
            max_message_bytes: limits.max_message_bytes,
            token,
            namespace: namespace.to_string(),
            ids: AtomicU64::new(1),
            connection_id: String::new(),
            reader: None,
        };
        let check: ServerCheckResponse = conn
            .call(
                "ServerCheckRequest",
                &ServerCheckRequest::default(),
                request_timeout,
            )
            .await?;
        conn.connection_id = check.connection_id.unwrap_or_default();
        // The setup goes first on the stream, queued before the call so a
        // server that answers headers only after a message still does.
        let setup = ConnectionSetupRequest {
            request_id: conn.next_id(),
            client_version: concat!("Nacos-Rust-Client:steadfast-", env!("CARGO_PKG_VERSION"))
                .to_string(),
            tenant: conn.namespace.clone(),
            labels: [
                ("source".to_string(), "sdk".to_string()),
                ("module".to_string(), "naming".to_string()),
            ]
            .into(),
            abilities: serde_json::json!({}),
            ..Default::default()
        };
        let _ = conn
            .to_server
            .try_send(Payload::new("ConnectionSetupRequest", &setup, ""));
        let mut grpc = conn.grpc();
        grpc.ready().await.map_err(|e| NacosError::Call {
            call: "requestBiStream",
            code: tonic::Code::Unavailable,
            source: tonic::Status::unavailable(e.to_string()),
        })?;
        let stream = grpc
            .streaming(
                tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(outbound)),
                PathAndQuery::from_static(BI_STREAM_PATH),
                ProstCodec::<Payload, Payload>::default(),
            )
            .await
            .map_err(|source| NacosError::Call {
                call: "requestBiStream",
                code: source.code(),
                source,
            })?
            .into_inner();
        let reader = tokio::spawn(read_stream(
            stream,
            conn.to_server.downgrade(),
            inbound,
            generation,
        ));
        conn.reader = Some(reader.abort_handle());
        let conn = Arc::new(conn);
        // The server registers the stream asynchronously: health-check
        // until it knows the connection (bounded by the caller's deadline).
        let mut pause = Duration::from_millis(5);
        loop {
            match conn.health(request_timeout).await {
                Ok(()) => break,
                Err(NacosError::Refused {
                    code: UNREGISTERED, ..
                }) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(conn)
    }

    /// A gRPC client on the connection's channel.
    fn grpc(&self) -> tonic::client::Grpc<Channel> {
        tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes)
    }

    /// The server this connection goes to.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// A fresh request id.
    pub fn next_id(&self) -> String {
        self.ids.fetch_add(1, Ordering::Relaxed).to_string()
    }

    /// A health check: does the server still know this connection?
    pub async fn health(&self, timeout: Duration) -> Result<(), NacosError> {
        let request = HealthCheckRequest {
            request_id: self.next_id(),
            ..Default::default()
        };
        let head: ResponseHead = self.call("HealthCheckRequest", &request, timeout).await?;
        let _ = head;
        Ok(())
    }

    /// One unary call of type `kind`, within `timeout`; a response whose
    /// result code is not 200 is [`NacosError::Refused`].
    pub async fn call<Q: Serialize, R: DeserializeOwned>(
        &self,
        kind: &'static str,
        request: &Q,
        timeout: Duration,
    ) -> Result<R, NacosError> {
        let mut payload = Payload::new(kind, request, "");
        let token = self
            .token
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let (Some(token), Some(meta)) = (token, payload.metadata.as_mut()) {
            meta.headers
                .insert("accessToken".to_string(), token.expose().to_string());
        }
        let mut grpc = self.grpc();
        let work = async {
            grpc.ready().await.map_err(|e| NacosError::Call {
                call: kind,
                code: tonic::Code::Unavailable,
                source: tonic::Status::unavailable(e.to_string()),
            })?;
            grpc.unary(
                tonic::Request::new(payload),
                PathAndQuery::from_static(UNARY_PATH),
                ProstCodec::<Payload, Payload>::default(),
            )
            .await
            .map_err(|source| NacosError::Call {
                call: kind,
                code: source.code(),
                source,
            })
        };
        let answer = tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| NacosError::Timeout { call: kind })??
            .into_inner();
        let head: ResponseHead = answer.body()?;
        if head.result_code != SUCCESS {
            return Err(NacosError::Refused {
                call: kind,
                code: head.error_code,
                message: head.message.unwrap_or_default().chars().take(200).collect(),
            });
        }
        answer.body()
    }
}

/// Reads the bi-stream: answers every server request (same id, 200) and
/// hands pushes and the stream's end to the client, tagged with the
/// connection's generation.
async fn read_stream(
    mut stream: tonic::Streaming<Payload>,
    to_server: mpsc::WeakSender<Payload>,
    inbound: mpsc::Sender<(u64, Inbound)>,
    generation: u64,
) {
    let end = loop {
        let message = match stream.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break "the server ended the stream".to_string(),
            Err(status) => break format!("stream broke: {:?}", status.code()),
        };
        let received = std::time::Instant::now();
        let kind = message.kind().to_string();
        let Some(answer_kind) = kind.strip_suffix("Request").map(|k| format!("{k}Response")) else {
            continue;
        };
        let request: ServerRequest = message.body().unwrap_or_default();
        let ack = Ack {
            request_id: request.request_id.clone().unwrap_or_default(),
            result_code: SUCCESS,
            error_code: 0,
        };
        // A full outbound queue only loses an ack (the server does not
        // retry pushes; the stream's liveness comes from health checks).
        if let Some(to_server) = to_server.upgrade() {
            let _ = to_server.try_send(Payload::new(&answer_kind, &ack, ""));
        }
        let handed = match kind.as_str() {
            "NotifySubscriberRequest" => match request.service_info {
                Some(info) => {
                    inbound
                        .send((generation, Inbound::Push(info, received)))
                        .await
                }
                None => Ok(()),
            },
            "ConnectResetRequest" => inbound.send((generation, Inbound::Reset)).await,
            "ConfigChangeNotifyRequest" => {
                let (data_id, group) = (request.data_id, request.group);
                match (data_id, group) {
                    (Some(d), Some(g)) => {
                        inbound
                            .send((generation, Inbound::ConfigChanged(d, g)))
                            .await
                    }
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        };
        if handed.is_err() {
            return;
        }
    };
    let _ = inbound.send((generation, Inbound::Closed(end))).await;
}
