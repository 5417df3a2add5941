//! [`AwcCaller`] (feature `awc`): the [`Caller`](super::Caller) on
//! actix-web's own client. Same per-call steps, same retry decision, same
//! classification (awc's errors mapped onto [`CallError`]); only the
//! attempt differs. An `awc::Client` is tied to its thread, so the call's
//! future is not `Send`: run it on an actix arbiter (a handler, an
//! `actix_rt::spawn`), where the pool's [`AwcClient`] hands out this
//! thread's client of the endpoint.

use std::sync::Arc;

use awc::error::{ConnectError, SendRequestError};
use awc::http::Method;
use awc::{ClientRequest, ClientResponse, SendClientRequest};
use steadfast_actors::Directory;
use steadfast_core::Endpoint;
use steadfast_pool::{ClientPool, PoolConfig, PooledClient};
use tokio::time::Instant;

use super::error::{is_idempotent_name, CallError};
use super::run::{Attempted, Bound};
use super::{CallerBuilder, CallerStats, Inner};
use crate::factory::{AwcClient, AwcFactory};
use crate::provider::{is_closing_answer, CLOSING_HEADER};

/// The pool an [`AwcCaller`] takes its clients from.
pub type AwcPool = ClientPool<AwcFactory>;

/// A successful awc call (see [`Answer`](super::Answer)).
pub struct AwcAnswer {
    /// The provider's answer (any status but a closing 503; check it).
    pub response: ClientResponse,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
    /// The endpoint that answered.
    pub endpoint: Endpoint,
    /// Keeps the pooled client counted in use while the body is read.
    _hold: PooledClient<AwcClient>,
}

impl std::fmt::Debug for AwcAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwcAnswer")
            .field("status", &self.response.status())
            .field("attempts", &self.attempts)
            .field("endpoint", &self.endpoint.address())
            .finish()
    }
}

/// The awc twin of [`Caller`](super::Caller): build it with
/// [`CallerBuilder::build_awc`] or [`AwcCaller::new`].
#[derive(Clone)]
pub struct AwcCaller {
    inner: Arc<Inner<AwcFactory>>,
}

/// An awc error's message (awc's errors are not `Send`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct AwcError(String);

impl CallerBuilder {
    /// The pool of the Caller built by [`CallerBuilder::build_awc`]
    /// (default: a new pool of [`AwcFactory::default`] clients).
    pub fn awc_pool(mut self, pool: AwcPool) -> Self {
        self.awc_pool = Some(pool);
        self
    }

    /// An [`AwcCaller`] with these settings. Inside an actix System.
    pub fn build_awc(mut self) -> AwcCaller {
        let pool = self
            .awc_pool
            .take()
            .unwrap_or_else(|| ClientPool::new(AwcFactory::default(), PoolConfig::default()));
        AwcCaller {
            inner: self.start(pool),
        }
    }
}

impl AwcCaller {
    /// An awc Caller with the defaults (see [`Caller::new`](super::Caller::new)).
    pub fn new(dir: Directory) -> AwcCaller {
        super::Caller::builder(dir).build_awc()
    }

    /// `GET <service base url>/<path>`.
    pub async fn get(&self, path: &str) -> Result<AwcAnswer, CallError> {
        self.send(Method::GET, path, ClientRequest::send).await
    }

    /// `method <service base url>/<path>`: `send` shapes and sends the
    /// request (`|r| r.insert_header(..).send_body("..")`; called anew for
    /// every attempt, on a request whose timeout is the call's time left).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        send: impl Fn(ClientRequest) -> SendClientRequest,
    ) -> Result<AwcAnswer, CallError> {
        let inner = &*self.inner;
        let repeatable = inner.core.retry_any_method || is_idempotent_name(method.as_str());
        let run = inner.core.run(|endpoint, bound| {
            attempt(
                &inner.pool,
                endpoint,
                &method,
                path,
                &send,
                repeatable,
                bound,
            )
        });
        let ((response, hold), attempts, endpoint) = run.await?;
        Ok(AwcAnswer {
            response,
            attempts,
            endpoint,
            _hold: hold,
        })
    }

    /// The counters (shared by every clone).
    pub fn stats(&self) -> CallerStats {
        self.inner.core.stats()
    }

    /// The pool the Caller takes its clients from.
    pub fn pool(&self) -> &AwcPool {
        &self.inner.pool
    }
}

/// One awc attempt on `endpoint` within `bound`.
async fn attempt(
    pool: &AwcPool,
    endpoint: Endpoint,
    method: &Method,
    path: &str,
    send: &impl Fn(ClientRequest) -> SendClientRequest,
    repeatable: bool,
    bound: Bound,
) -> Attempted<(ClientResponse, PooledClient<AwcClient>)> {
    let started = Instant::now();
    let address = endpoint.address();
    let pooled = match pool.acquire(&address) {
        Ok(p) => p,
        Err(e) => return Attempted::Failed(CallError::Pool(e)),
    };
    let url = endpoint.http_url_for(path);
    let request = pooled
        .client()
        .client()
        .request(method.clone(), url)
        .timeout(bound.at.saturating_duration_since(started));
    let sent = send(request);
    let outcome = tokio::select! {
        r = tokio::time::timeout_at(bound.at, sent) => r,
        () = pooled.closed() => return Attempted::Failed(CallError::ClosedWhileInUse {
            source: pooled.closed_error(),
            retryable: repeatable,
        }),
    };
    let elapsed = started.elapsed();
    let error = |e: &dyn std::fmt::Display| Box::new(AwcError(e.to_string()));
    match outcome {
        Err(_) | Ok(Err(SendRequestError::Timeout)) => {
            Attempted::Failed(bound.timed_out(address, elapsed, repeatable))
        }
        Ok(Err(e @ (SendRequestError::Url(_) | SendRequestError::Http(_)))) => {
            Attempted::Failed(CallError::Request(error(&e)))
        }
        // Only these connect errors say the request never left: awc also
        // reports a connection closed under a sent request as
        // `Connect(Disconnected)`, which is a transport failure.
        Ok(Err(SendRequestError::Connect(
            e @ (ConnectError::Io(_)
            | ConnectError::Timeout
            | ConnectError::Resolver(_)
            | ConnectError::NoRecords
            | ConnectError::Unresolved
            | ConnectError::SslIsNotSupported),
        ))) => Attempted::Failed(CallError::Connect {
            address,
            source: error(&e),
        }),
        Ok(Err(e)) => Attempted::Failed(CallError::Transport {
            address,
            retryable: repeatable,
            source: error(&e),
        }),
        Ok(Ok(response))
            if is_closing_answer(
                response.status().as_u16(),
                response.headers().get(CLOSING_HEADER).map(|v| v.as_bytes()),
            ) =>
        {
            Attempted::Failed(CallError::Closing { address })
        }
        Ok(Ok(response)) => Attempted::Answer {
            server_error: response.status().is_server_error(),
            value: (response, pooled),
        },
    }
}
