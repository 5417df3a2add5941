//! The secured side of [`EtcdClient`]: building it from an
//! [`EtcdConfig`] (credentials, TLS, proxy), and sending every request
//! with the current token.
//!
//! A request refused for its token (see [`crate::auth`]) fetches a new
//! token from the same endpoint and is sent again, once: that is the
//! protocol's answer to "token expired", not a retry of a failure (a second
//! refusal is returned as [`GatewayError::Auth`]; the callers' own
//! `Recover` schedules decide about retrying that). Fetching is
//! single-flight: callers refused with the same token wait for one
//! `authenticate`, then all use its token ([`TokenState::decide`]).
//!
//! A watch refused for its token still answers HTTP 200, with a first
//! message that is `created` and `canceled` at once; [`EtcdClient::open_stream`]
//! reads that first message and re-opens the watch with a new token, so
//! the watch driver sees a normal open from the revision it asked for and
//! keeps its state (no resync).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use serde_json::json;
use tokio::sync::watch;

use super::{Attempt, EtcdClient, MAX_IDLE_CONNECTIONS};
use steadfast_core::Secret;

use crate::auth::{AuthenticateResponse, EtcdAuth, TokenDecision, TokenState};
use crate::config::EtcdConfig;
use crate::error::GatewayError;
use crate::tls::EtcdTls;
use crate::watch_body::{error_chain, watch_stream, WatchStream};

/// Credentials, TLS and proxy settings a client is built with.
#[derive(Clone, Debug, Default)]
pub(crate) struct Security {
    pub auth: Option<EtcdAuth>,
    pub tls: Option<EtcdTls>,
    pub proxy: Option<String>,
}

/// Credentials and the token of a client.
#[derive(Debug)]
pub(crate) struct TokenCache {
    creds: EtcdAuth,
    state: Mutex<TokenState>,
    /// Whether one caller is authenticating now: the others wait for
    /// `fetched` instead of authenticating too (no lock is held across the
    /// call; every wait is bounded by the caller's request timeout).
    fetching: AtomicBool,
    /// Signalled when the authenticating caller is done (or was dropped).
    fetched: tokio::sync::Notify,
    authentications: AtomicU64,
}

/// The one caller authenticating: its drop (done, failed or cancelled)
/// lets the next caller in and wakes those that waited.
struct Authenticating<'a>(&'a TokenCache);

impl Drop for Authenticating<'_> {
    fn drop(&mut self) {
        self.0.fetching.store(false, Ordering::Release);
        self.0.fetched.notify_waiters();
    }
}

impl TokenCache {
    pub(crate) fn new(creds: EtcdAuth) -> Self {
        Self {
            creds,
            state: Mutex::new(TokenState::default()),
            fetching: AtomicBool::new(false),
            fetched: tokio::sync::Notify::new(),
            authentications: AtomicU64::new(0),
        }
    }

    fn decide(&self, refused: Option<u64>) -> TokenDecision {
        self.state
            .lock()
            .map(|s| s.decide(refused))
            .unwrap_or(TokenDecision::Authenticate)
    }

    pub(crate) fn install(&self, token: Secret) -> u64 {
        self.state.lock().map(|mut s| s.install(token)).unwrap_or(0)
    }
}

/// The header value for `token` (an empty token: auth is off, send none).
fn bearer(token: &str) -> Option<&str> {
    Some(token).filter(|t| !t.is_empty())
}

impl EtcdClient {
    /// A client for `config` (validated: an endpoint with user info is
    /// refused): its endpoints, deadlines, credentials, TLS
    /// settings (CA and client PEM files are read now) and proxy. Does no
    /// network IO; the first call authenticates.
    pub fn from_config(config: &EtcdConfig) -> Result<Self, GatewayError> {
        config.validate()?;
        let security = Security {
            auth: config.auth.clone(),
            tls: config.tls.clone(),
            proxy: config.proxy.clone(),
        };
        Self::build(
            config.endpoints.clone(),
            config.request_timeout,
            config.watch_open_timeout,
            &security,
        )
    }

    /// A client for `endpoints` with `security` (credentials, TLS, proxy).
    pub(super) fn build(
        endpoints: Vec<String>,
        request_timeout: Duration,
        watch_open_timeout: Duration,
        security: &Security,
    ) -> Result<Self, GatewayError> {
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(|e| e.trim_end_matches('/').to_string())
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(GatewayError::NoEndpoints);
        }
        let builder = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(request_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            // Shared watch streams hold their own connections; a few idle
            // ones serve the batched ranges, probes and keepalives.
            .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
            .tcp_nodelay(true);
        let builder = crate::tls::apply_proxy(builder, security.proxy.as_deref())?;
        let builder = match &security.tls {
            Some(tls) => tls.apply(builder)?,
            None => builder,
        };
        let http = builder
            .build()
            .map_err(|e| GatewayError::Client(error_chain(&e)))?;
        Ok(Self {
            endpoints,
            http,
            current: AtomicUsize::new(0),
            request_timeout,
            watch_open_timeout,
            failing: AtomicBool::new(false),
            answered: watch::channel(0).0,
            probes: AtomicU64::new(0),
            prober: OnceLock::new(),
            auth: security.auth.clone().map(TokenCache::new),
        })
    }

    /// How many tokens this client fetched (`/v3/auth/authenticate`
    /// calls that succeeded); 0 without auth.
    pub fn authentications(&self) -> u64 {
        self.auth
            .as_ref()
            .map_or(0, |a| a.authentications.load(Ordering::Relaxed))
    }

    /// The token to use on `endpoint`: the current one, or a new one when
    /// there is none or the caller was refused with generation `refused`
    /// and nobody replaced it yet.
    async fn token(
        &self,
        auth: &TokenCache,
        endpoint: &str,
        refused: Option<u64>,
        timeout: Duration,
    ) -> Result<(Secret, u64), Attempt> {
        if let TokenDecision::Use(t, g) = auth.decide(refused) {
            return Ok((t, g));
        }
        let fetch = async {
            // Bounded by the timeout around it: each turn either finds a
            // token, authenticates, or waits for the one caller who does.
            let _one = loop {
                let done = auth.fetched.notified();
                tokio::pin!(done);
                done.as_mut().enable();
                // Someone else may have fetched while this caller waited.
                if let TokenDecision::Use(t, g) = auth.decide(refused) {
                    return Ok((t, g));
                }
                if auth
                    .fetching
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    break Authenticating(auth);
                }
                done.await;
            };
            if let TokenDecision::Use(t, g) = auth.decide(refused) {
                return Ok((t, g));
            }
            let token = self.authenticate(&auth.creds, endpoint, timeout).await?;
            if token.is_empty() {
                tracing::debug!(%endpoint, "etcd has auth off; sending no token");
            } else {
                auth.authentications.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%endpoint, user = %auth.creds.username, "etcd token fetched");
            }
            let g = auth.install(token.clone());
            Ok((token, g))
        };
        match tokio::time::timeout(timeout, fetch).await {
            Ok(r) => r,
            Err(_) => Err(Attempt::Rotate(GatewayError::Timeout {
                endpoint: endpoint.to_string(),
                timeout,
            })),
        }
    }

    /// `POST /v3/auth/authenticate` on `endpoint`: the new token, or an
    /// empty one ("send none") when etcd has auth off. Wrong credentials
    /// are [`GatewayError::Auth`].
    async fn authenticate(
        &self,
        creds: &EtcdAuth,
        endpoint: &str,
        timeout: Duration,
    ) -> Result<Secret, Attempt> {
        let body = json!({ "name": creds.username, "password": creds.password.expose() })
            .to_string()
            .into_bytes();
        let read = async {
            match self
                .send_once(endpoint, "/v3/auth/authenticate", &body, timeout, None)
                .await
            {
                Ok(resp) => resp
                    .bytes()
                    .await
                    .map(Some)
                    .map_err(|e| Attempt::Rotate(GatewayError::Body(e.to_string()))),
                Err(Attempt::Fail(GatewayError::Status { code, message, .. })) => {
                    if crate::auth::is_auth_disabled(code, &message) {
                        Ok(None)
                    } else {
                        Err(Attempt::Fail(GatewayError::Auth(message)))
                    }
                }
                Err(other) => Err(other),
            }
        };
        let bytes = match tokio::time::timeout(timeout, read).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(Attempt::Rotate(GatewayError::Timeout {
                    endpoint: endpoint.to_string(),
                    timeout,
                }))
            }
        };
        let Some(bytes) = bytes else {
            return Ok(Secret::default());
        };
        let r: AuthenticateResponse = serde_json::from_slice(&bytes)
            .map_err(|e| Attempt::Fail(GatewayError::Decode(e.to_string())))?;
        if r.token.is_empty() {
            return Err(Attempt::Fail(GatewayError::Auth(
                "etcd answered authenticate without a token".into(),
            )));
        }
        Ok(r.token)
    }

    /// [`Self::send_once`] with the current token; refused for the token,
    /// fetches a new one and sends once more. Returns the generation of
    /// the token that was used.
    async fn send_authed(
        &self,
        endpoint: &str,
        path: &str,
        body: &[u8],
        timeout: Duration,
        refused: Option<u64>,
    ) -> Result<(reqwest::Response, Option<u64>), Attempt> {
        let Some(auth) = &self.auth else {
            return self
                .send_once(endpoint, path, body, timeout, None)
                .await
                .map(|r| (r, None));
        };
        let (token, g) = self.token(auth, endpoint, refused, timeout).await?;
        match self
            .send_once(endpoint, path, body, timeout, bearer(token.expose()))
            .await
        {
            Err(Attempt::Fail(e)) if e.is_auth_refusal() && refused.is_none() => {
                tracing::debug!(%endpoint, error = %e, "etcd refused the token; fetching a new one");
                let (token, g) = self.token(auth, endpoint, Some(g), timeout).await?;
                match self
                    .send_once(endpoint, path, body, timeout, bearer(token.expose()))
                    .await
                {
                    Err(Attempt::Fail(e)) if e.is_auth_refusal() => {
                        Err(Attempt::Fail(GatewayError::Auth(e.to_string())))
                    }
                    r => r.map(|r| (r, Some(g))),
                }
            }
            Err(Attempt::Fail(e)) if e.is_auth_refusal() => {
                Err(Attempt::Fail(GatewayError::Auth(e.to_string())))
            }
            r => r.map(|r| (r, Some(g))),
        }
    }

    /// Sends `body` to `path` on `endpoint` (with the token when auth is
    /// on) and returns the response if its status is a success.
    pub(super) async fn send(
        &self,
        endpoint: &str,
        path: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<reqwest::Response, Attempt> {
        self.send_authed(endpoint, path, body, timeout, None)
            .await
            .map(|(r, _)| r)
    }

    /// Opens a watch on `endpoint`. With auth on, reads its first message
    /// (within `timeout`): a watch refused for its token is re-opened once
    /// with a new token.
    pub(super) async fn open_stream(
        &self,
        endpoint: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<WatchStream, Attempt> {
        let (resp, used) = self
            .send_authed(endpoint, "/v3/watch", body, timeout, None)
            .await?;
        let stream = watch_stream(resp.bytes_stream());
        let Some(used) = used else {
            return Ok(stream);
        };
        let (stream, refused) = self.peek(endpoint, stream, timeout).await?;
        if !refused {
            return Ok(stream);
        }
        drop(stream);
        tracing::debug!(%endpoint, "etcd refused the watch's token; fetching a new one");
        let (resp, _) = self
            .send_authed(endpoint, "/v3/watch", body, timeout, Some(used))
            .await?;
        let (stream, refused) = self
            .peek(endpoint, watch_stream(resp.bytes_stream()), timeout)
            .await?;
        if refused {
            return Err(Attempt::Fail(GatewayError::Auth(
                "etcd refused the watch with a fresh token".into(),
            )));
        }
        Ok(stream)
    }

    /// Reads the first message of `s` within `timeout`: the stream with
    /// that message put back, and whether it was a refusal for the token.
    async fn peek(
        &self,
        endpoint: &str,
        mut s: WatchStream,
        timeout: Duration,
    ) -> Result<(WatchStream, bool), Attempt> {
        let first = match tokio::time::timeout(timeout, s.next()).await {
            Err(_) => {
                return Err(Attempt::Rotate(GatewayError::Timeout {
                    endpoint: endpoint.to_string(),
                    timeout,
                }))
            }
            Ok(None) => return Ok((s, false)),
            Ok(Some(m)) => m,
        };
        let refused = matches!(&first, Ok(m) if m.canceled
            && m.compact_revision == 0
            && crate::auth::is_auth_cancel(&m.cancel_reason));
        Ok((stream::iter([first]).chain(s).boxed(), refused))
    }
}
