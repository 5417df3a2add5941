//! [`EtcdClient`]: a minimal etcd v3 client over the JSON gateway
//! (`POST /v3/...`, HTTP/1.1 only; h2c would be routed to gRPC and fail).
//!
//! Unary calls run under a per-request timeout. A watch has a timeout only
//! around opening (`send()`), never on its body, which lives as long as the
//! watch. With several endpoints, a connect error, a timeout or a 503 /
//! gRPC-unavailable answer rotates to the next endpoint and retries, at most
//! one pass over the endpoints per call; the endpoint that answered becomes
//! the first one tried next time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::GatewayError;
use crate::framing::{parse_line, Line, LineFramer};
use crate::watch_body::{error_chain, watch_stream};
pub use crate::watch_body::{WatchError, WatchStream};
use crate::wire::{
    b64, prefix_range_end, DeleteRangeResponse, HeaderOnly, LeaseGrantResponse,
    LeaseKeepAliveResponse, RangeResponse, StatusResponse, UnaryError,
};

/// A client for one etcd cluster reached through one or more endpoints.
#[derive(Debug)]
pub struct EtcdClient {
    endpoints: Vec<String>,
    http: reqwest::Client,
    current: AtomicUsize,
    request_timeout: Duration,
    watch_open_timeout: Duration,
}

/// How one attempt on one endpoint failed.
enum Attempt {
    /// Try the next endpoint (connect error, timeout, unavailable).
    Rotate(GatewayError),
    /// Give up with this error.
    Fail(GatewayError),
}

impl EtcdClient {
    /// A client for `endpoints` (e.g. `http://127.0.0.1:2379`; a trailing
    /// `/` is dropped) with a per-request timeout for unary calls and a
    /// timeout for opening watches.
    pub fn new(
        endpoints: Vec<String>,
        request_timeout: Duration,
        watch_open_timeout: Duration,
    ) -> Result<Self, GatewayError> {
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(|e| e.trim_end_matches('/').to_string())
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(GatewayError::NoEndpoints);
        }
        let http = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(request_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| GatewayError::Client(e.to_string()))?;
        Ok(Self {
            endpoints,
            http,
            current: AtomicUsize::new(0),
            request_timeout,
            watch_open_timeout,
        })
    }

    /// The configured endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The endpoint tried first by the next call.
    pub fn current_endpoint(&self) -> &str {
        &self.endpoints[self.current.load(Ordering::Relaxed) % self.endpoints.len()]
    }

    /// Runs `attempt` on each endpoint in turn, starting with the current
    /// one, until one does not ask to rotate. One pass at most.
    async fn rotating<T, F, Fut>(&self, mut attempt: F) -> Result<T, GatewayError>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, Attempt>>,
    {
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed);
        let mut last = GatewayError::NoEndpoints;
        for i in 0..n {
            let idx = (start + i) % n;
            let endpoint = self.endpoints[idx].clone();
            match attempt(endpoint.clone()).await {
                Ok(v) => {
                    self.current.store(idx, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(Attempt::Fail(e)) => {
                    self.current.store(idx, Ordering::Relaxed);
                    return Err(e);
                }
                Err(Attempt::Rotate(e)) => {
                    tracing::debug!(%endpoint, error = %e, "etcd endpoint failed; rotating");
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// Sends `body` to `path` on `endpoint` and returns the response if its
    /// status is a success; classifies every failure.
    async fn send(
        &self,
        endpoint: &str,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<reqwest::Response, Attempt> {
        let req = self.http.post(format!("{endpoint}{path}")).json(body);
        let resp = match tokio::time::timeout(timeout, req.send()).await {
            Err(_) => {
                return Err(Attempt::Rotate(GatewayError::Timeout {
                    endpoint: endpoint.to_string(),
                    timeout,
                }))
            }
            Ok(Err(e)) => {
                return Err(Attempt::Rotate(GatewayError::Unreachable {
                    endpoint: endpoint.to_string(),
                    reason: error_chain(&e),
                }))
            }
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = tokio::time::timeout(self.request_timeout, resp.bytes())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let (code, message) = match serde_json::from_slice::<UnaryError>(&bytes) {
            Ok(e) => (e.code, e.message),
            Err(_) => (0, String::from_utf8_lossy(&bytes).into_owned()),
        };
        let err = GatewayError::Status {
            status: status.as_u16(),
            code,
            message,
        };
        if err.is_unavailable() {
            Err(Attempt::Rotate(err))
        } else {
            Err(Attempt::Fail(err))
        }
    }

    /// One unary call: POST `body` to `path`, read the whole answer.
    async fn unary_bytes(&self, path: &str, body: Value) -> Result<Vec<u8>, GatewayError> {
        let timeout = self.request_timeout;
        self.rotating(|endpoint| {
            let body = &body;
            async move {
                let read = async {
                    let resp = self.send(&endpoint, path, body, timeout).await?;
                    resp.bytes()
                        .await
                        .map_err(|e| Attempt::Rotate(GatewayError::Body(error_chain(&e))))
                };
                match tokio::time::timeout(timeout, read).await {
                    Ok(r) => r.map(|b| b.to_vec()),
                    Err(_) => Err(Attempt::Rotate(GatewayError::Timeout { endpoint, timeout })),
                }
            }
        })
        .await
    }

    /// One unary call decoded as `T`.
    async fn unary<T: DeserializeOwned>(&self, path: &str, body: Value) -> Result<T, GatewayError> {
        let bytes = self.unary_bytes(path, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| GatewayError::Decode(e.to_string()))
    }

    /// All pairs whose key starts with `prefix`.
    pub async fn range_prefix(&self, prefix: &[u8]) -> Result<RangeResponse, GatewayError> {
        let body = json!({
            "key": b64::encode(prefix),
            "range_end": b64::encode(prefix_range_end(prefix)),
        });
        self.unary("/v3/kv/range", body).await
    }

    /// The pair stored under exactly `key`, if any (and the header).
    pub async fn get(&self, key: &[u8]) -> Result<RangeResponse, GatewayError> {
        self.unary("/v3/kv/range", json!({ "key": b64::encode(key) }))
            .await
    }

    /// Stores `value` under `key`, attached to `lease` (0 = no lease).
    pub async fn put(
        &self,
        key: &[u8],
        value: &[u8],
        lease: i64,
    ) -> Result<HeaderOnly, GatewayError> {
        let mut body = json!({ "key": b64::encode(key), "value": b64::encode(value) });
        if lease != 0 {
            body["lease"] = Value::String(lease.to_string());
        }
        self.unary("/v3/kv/put", body).await
    }

    /// Deletes `key`.
    pub async fn delete(&self, key: &[u8]) -> Result<DeleteRangeResponse, GatewayError> {
        self.unary("/v3/kv/deleterange", json!({ "key": b64::encode(key) }))
            .await
    }

    /// Grants a lease of `ttl` seconds (etcd rounds up to its minimum, 2 s).
    pub async fn lease_grant(&self, ttl: i64) -> Result<LeaseGrantResponse, GatewayError> {
        let r: LeaseGrantResponse = self.unary("/v3/lease/grant", json!({ "TTL": ttl })).await?;
        if r.id == 0 || !r.error.is_empty() {
            return Err(GatewayError::Decode(format!(
                "lease grant returned no lease: {:?}",
                r.error
            )));
        }
        Ok(r)
    }

    /// Refreshes lease `id`: `Some(ttl)` while it lives, `None` when etcd
    /// says it is gone (expired or revoked: the answer has no TTL).
    pub async fn lease_keepalive(&self, id: i64) -> Result<Option<i64>, GatewayError> {
        let bytes = self
            .unary_bytes("/v3/lease/keepalive", json!({ "ID": id.to_string() }))
            .await?;
        let mut framer = LineFramer::new();
        let mut lines = framer.push(&bytes);
        lines.extend(framer.finish());
        let line = lines
            .first()
            .ok_or_else(|| GatewayError::Decode("empty keepalive answer".into()))?;
        match parse_line::<LeaseKeepAliveResponse>(line) {
            Line::Message(k) if k.ttl > 0 => Ok(Some(k.ttl)),
            Line::Message(_) => Ok(None),
            Line::ServerError(e) => Err(GatewayError::Status {
                status: u16::try_from(e.http_code).unwrap_or(500),
                code: e.grpc_code,
                message: e.message,
            }),
            Line::Malformed(m) => Err(GatewayError::Decode(m)),
        }
    }

    /// Revokes lease `id`, deleting its keys. `Ok(false)` when the lease was
    /// already gone.
    pub async fn lease_revoke(&self, id: i64) -> Result<bool, GatewayError> {
        match self
            .unary::<HeaderOnly>("/v3/lease/revoke", json!({ "ID": id.to_string() }))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Compacts the key history up to `revision` (physically).
    pub async fn compact(&self, revision: i64) -> Result<HeaderOnly, GatewayError> {
        let body = json!({ "revision": revision.to_string(), "physical": true });
        self.unary("/v3/kv/compaction", body).await
    }

    /// Status of the member behind the current endpoint.
    pub async fn status(&self) -> Result<StatusResponse, GatewayError> {
        self.unary("/v3/maintenance/status", json!({})).await
    }

    /// Opens a watch of every key under `prefix` from `start_revision`
    /// (0 = from now), optionally with progress notifications. The returned
    /// stream yields parsed messages; its end or an `Err` item means the
    /// watch is over.
    pub async fn watch(
        &self,
        prefix: &[u8],
        start_revision: i64,
        progress_notify: bool,
    ) -> Result<WatchStream, GatewayError> {
        let mut create = json!({
            "key": b64::encode(prefix),
            "range_end": b64::encode(prefix_range_end(prefix)),
        });
        if start_revision > 0 {
            create["start_revision"] = Value::String(start_revision.to_string());
        }
        if progress_notify {
            create["progress_notify"] = Value::Bool(true);
        }
        let body = json!({ "create_request": create });
        let timeout = self.watch_open_timeout;
        let resp = self
            .rotating(|endpoint| {
                let body = &body;
                async move { self.send(&endpoint, "/v3/watch", body, timeout).await }
            })
            .await?;
        Ok(watch_stream(resp.bytes_stream()))
    }
}

#[cfg(test)]
#[path = "gateway_tests.rs"]
mod tests;
