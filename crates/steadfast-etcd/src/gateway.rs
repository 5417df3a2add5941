//! [`EtcdClient`]: a minimal etcd v3 client over the JSON gateway
//! (`POST /v3/...`, HTTP/1.1 only; h2c would be routed to gRPC and fail).
//!
//! Unary calls run under a per-request timeout. A watch has a timeout only
//! around opening (`send()`), never on its body, which lives as long as the
//! watch (the watch driver probes its endpoint instead). With several
//! endpoints, a connect error, a timeout or a 503 / gRPC-unavailable answer
//! rotates to the next endpoint and retries, at most one pass over the
//! endpoints per call; the endpoint that answered becomes the first one
//! tried next time, and [`EtcdClient::demote`] moves past one found dead.
//!
//! With credentials ([`EtcdClient::from_config`]) every request carries
//! the current auth token, renewed when etcd refuses it (`gateway/secure.rs`);
//! the client never uses `HTTP_PROXY` / `ALL_PROXY` unless a proxy is
//! configured.
//!
//! Every request carries `Grpc-Metadata-hasleader: true`: a member without
//! a leader then refuses unary calls at once ("no leader", gRPC 14, which
//! rotates) and ends watch streams instead of holding them silently.
//!
//! The client keeps one shared signal, [`EtcdClient::answered`]: a counter
//! bumped whenever a call succeeds after a call failed to reach etcd, so
//! every task waiting for etcd to come back can wake on one event instead
//! of probing on its own. It also holds the one liveness prober all its
//! watches and keepers share (`prober`), created by the first registry or
//! report built on it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::config::EtcdConfig;
use crate::error::GatewayError;
use crate::framing::{parse_line, Line, LineFramer};
use crate::prober::Prober;
use crate::watch_body::error_chain;
pub use crate::watch_body::{WatchError, WatchStream};
use crate::wire::{
    b64, prefix_range_end, DeleteRangeResponse, HeaderOnly, LeaseGrantResponse,
    LeaseKeepAliveResponse, RangeResponse, ResponseHeader, StatusResponse, UnaryError,
};

/// The header that makes a leaderless member refuse a call instead of
/// serving it (or, for a watch, holding it silently).
pub const HASLEADER_HEADER: &str = "Grpc-Metadata-hasleader";

/// Idle pooled connections kept per endpoint: with the two shared watch
/// streams of a registry this keeps a client at about four connections.
pub const MAX_IDLE_CONNECTIONS: usize = 2;

/// A client for one etcd cluster reached through one or more endpoints.
#[derive(Debug)]
pub struct EtcdClient {
    endpoints: Vec<String>,
    http: reqwest::Client,
    current: AtomicUsize,
    request_timeout: Duration,
    watch_open_timeout: Duration,
    /// Set when a call failed to reach etcd; cleared (and `answered`
    /// bumped) by the next success.
    failing: AtomicBool,
    answered: watch::Sender<u64>,
    /// Probes sent through [`EtcdClient::probe`].
    probes: AtomicU64,
    /// The liveness prober every watch and keeper on this client shares.
    prober: OnceLock<Arc<Prober>>,
    /// Credentials and the current token, when etcd has auth on.
    auth: Option<TokenCache>,
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
    /// timeout for opening watches. No auth, no custom TLS, no proxy
    /// (`HTTP_PROXY` / `ALL_PROXY` are ignored); see
    /// [`EtcdClient::from_config`] for those.
    pub fn new(
        endpoints: Vec<String>,
        request_timeout: Duration,
        watch_open_timeout: Duration,
    ) -> Result<Self, GatewayError> {
        Self::build(
            endpoints,
            request_timeout,
            watch_open_timeout,
            &Security::default(),
        )
    }

    /// The configured endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Index of the endpoint tried first by the next call.
    pub fn current_index(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.endpoints.len().max(1)
    }

    /// The endpoint tried first by the next call.
    pub fn current_endpoint(&self) -> &str {
        self.endpoints
            .get(self.current_index())
            .map_or("", String::as_str)
    }

    /// Endpoint `index` was found dead: if it is the one tried first, the
    /// next one is tried first from now on.
    pub fn demote(&self, index: usize) {
        let n = self.endpoints.len().max(1);
        let next = index.checked_add(1).map_or(0, |i| i % n);
        let _ = self
            .current
            .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The "etcd answered again" signal: its value goes up by one each time
    /// a call succeeds after a call failed to reach etcd.
    pub fn answered(&self) -> watch::Receiver<u64> {
        self.answered.subscribe()
    }

    /// How many probes ([`EtcdClient::probe`]) went out through this
    /// client.
    pub fn probes_sent(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    /// The client's shared prober, created with `config` by the first
    /// caller.
    pub(crate) fn prober(&self, config: &EtcdConfig) -> Arc<Prober> {
        self.prober
            .get_or_init(|| Arc::new(Prober::new(self.endpoints.len(), config)))
            .clone()
    }

    /// The shared prober, if one was created.
    pub(crate) fn prober_if_any(&self) -> Option<&Arc<Prober>> {
        self.prober.get()
    }

    fn note_success(&self) {
        if self.failing.swap(false, Ordering::AcqRel) {
            self.answered.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    fn note_unreachable(&self) {
        self.failing.store(true, Ordering::Release);
    }

    /// Runs `attempt` on each endpoint in turn, starting with the current
    /// one, until one does not ask to rotate. One pass at most.
    async fn rotating<T, F, Fut>(&self, mut attempt: F) -> Result<T, GatewayError>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, Attempt>>,
    {
        self.rotating_at(|endpoint, _| attempt(endpoint))
            .await
            .map(|(v, _)| v)
    }

    /// [`Self::rotating`], also telling which endpoint answered.
    async fn rotating_at<T, F, Fut>(&self, mut attempt: F) -> Result<(T, usize), GatewayError>
    where
        F: FnMut(String, usize) -> Fut,
        Fut: std::future::Future<Output = Result<T, Attempt>>,
    {
        let n = self.endpoints.len();
        let start = self.current_index();
        let mut last = GatewayError::NoEndpoints;
        for (idx, endpoint) in self
            .endpoints
            .iter()
            .enumerate()
            .cycle()
            .skip(start)
            .take(n)
        {
            match attempt(endpoint.clone(), idx).await {
                Ok(v) => {
                    self.current.store(idx, Ordering::Relaxed);
                    self.note_success();
                    return Ok((v, idx));
                }
                Err(Attempt::Fail(e)) => {
                    self.current.store(idx, Ordering::Relaxed);
                    self.note_success();
                    return Err(e);
                }
                Err(Attempt::Rotate(e)) => {
                    tracing::debug!(%endpoint, error = %e, "etcd endpoint failed; rotating");
                    last = e;
                }
            }
        }
        self.note_unreachable();
        Err(last)
    }

    /// Sends `body` to `path` on `endpoint` with `token` (if any) and
    /// returns the response if its status is a success; classifies every
    /// failure.
    async fn send_once(
        &self,
        endpoint: &str,
        path: &str,
        body: &[u8],
        timeout: Duration,
        token: Option<&str>,
    ) -> Result<reqwest::Response, Attempt> {
        let mut req = self
            .http
            .post(format!("{endpoint}{path}"))
            .header(HASLEADER_HEADER, "true")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(token) = token {
            // Marked sensitive: never shown by a header dump or a debug log.
            req = match reqwest::header::HeaderValue::from_str(token) {
                Ok(mut value) => {
                    value.set_sensitive(true);
                    req.header(reqwest::header::AUTHORIZATION, value)
                }
                Err(_) => req.header(reqwest::header::AUTHORIZATION, token),
            };
        }
        let resp = match tokio::time::timeout(timeout, req.send()).await {
            Err(_) => {
                return Err(Attempt::Rotate(GatewayError::Timeout {
                    endpoint: endpoint.to_string(),
                    timeout,
                }))
            }
            Ok(Err(e)) => {
                let reason = error_chain(&e);
                let endpoint = endpoint.to_string();
                return Err(Attempt::Rotate(if crate::tls::is_tls_failure(&reason) {
                    GatewayError::Tls { endpoint, reason }
                } else {
                    GatewayError::Unreachable { endpoint, reason }
                }));
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
        let body = body.to_string().into_bytes();
        self.rotating(|endpoint| {
            let body = &body;
            async move { self.read_whole(endpoint, path, body, timeout).await }
        })
        .await
    }

    /// One request to one endpoint, the whole answer read within `timeout`.
    async fn read_whole(
        &self,
        endpoint: String,
        path: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, Attempt> {
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

    /// A cheap liveness probe of endpoint `index` alone (no rotation): a
    /// linearizable read of the single key `key` (limit 1, keys only),
    /// which needs a live member with a leader, within `timeout`. Returns
    /// the answer's header.
    pub async fn probe(
        &self,
        index: usize,
        key: &[u8],
        timeout: Duration,
    ) -> Result<ResponseHeader, GatewayError> {
        let endpoint = self
            .endpoints
            .get(index)
            .cloned()
            .ok_or(GatewayError::NoEndpoints)?;
        self.probes.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "key": b64::encode(key), "limit": 1, "keys_only": true })
            .to_string()
            .into_bytes();
        let result = match self
            .read_whole(endpoint, "/v3/kv/range", &body, timeout)
            .await
        {
            Ok(bytes) => serde_json::from_slice::<HeaderOnly>(&bytes)
                .map(|h| h.header)
                .map_err(|e| GatewayError::Decode(e.to_string())),
            Err(Attempt::Rotate(e) | Attempt::Fail(e)) => Err(e),
        };
        match &result {
            Ok(_) => self.note_success(),
            Err(e) if e.is_unavailable() => self.note_unreachable(),
            Err(_) => {}
        }
        result
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
        self.open_watch(prefix, start_revision, progress_notify)
            .await
            .map(|(s, _)| s)
    }

    /// [`Self::watch`], also returning the index of the endpoint that
    /// accepted the watch (the one to probe while it is open).
    pub async fn open_watch(
        &self,
        prefix: &[u8],
        start_revision: i64,
        progress_notify: bool,
    ) -> Result<(WatchStream, usize), GatewayError> {
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
        let body = json!({ "create_request": create }).to_string().into_bytes();
        let timeout = self.watch_open_timeout;
        self.rotating_at(|endpoint, _| {
            let body = &body;
            async move { self.open_stream(&endpoint, body, timeout).await }
        })
        .await
    }
}

mod secure;
pub(crate) use secure::{Security, TokenCache};

mod multi;
pub use multi::{WatchCreate, MAX_TXN_OPS};

#[cfg(test)]
mod tests;
