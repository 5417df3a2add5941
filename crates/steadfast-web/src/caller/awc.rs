//! [`Awc`] (feature `awc`): the [`Caller`](super::Caller) on actix-web's
//! own client, `Caller<Awc>`. Same per-call steps, same retry decision,
//! same classification (awc's errors mapped onto [`CallError`]); only the
//! attempt differs. An `awc::Client` is tied to its thread, so the call's
//! future is not `Send`: run it on an actix arbiter (a handler, an
//! `actix_rt::spawn`), where the pool's [`AwcClient`] hands out this
//! thread's client of the endpoint.

use std::future::Future;

use awc::error::{ConnectError, SendRequestError};
use awc::http::Method;
use awc::{ClientRequest, ClientResponse, SendClientRequest};
use steadfast_core::Endpoint;
use steadfast_pool::{ClientPool, PoolConfig};
use tokio::time::Instant;

use super::client::{sealed, Held, HttpClient};
use super::error::{is_idempotent_name, CallError};
use super::run::{Attempted, Bound};
use crate::factory::{AwcClient, AwcFactory};
use crate::provider::{is_closing_answer, CLOSING_HEADER};

/// The pool a `Caller<Awc>` takes its clients from.
pub type AwcPool = ClientPool<AwcFactory>;

/// actix-web's own client, for a `Caller<Awc>`
/// (`Caller::builder(dir).client::<Awc>().build()`; inside an actix System).
#[derive(Clone, Copy, Debug, Default)]
pub struct Awc;

/// An awc error's message (awc's errors are not `Send`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct AwcError(String);

impl sealed::Sealed for Awc {}

impl HttpClient for Awc {
    type Factory = AwcFactory;
    type Method = Method;
    type Request = ClientRequest;
    type Sent = SendClientRequest;
    type Response = ClientResponse;

    fn get() -> Method {
        Method::GET
    }

    fn plain(request: ClientRequest) -> SendClientRequest {
        request.send()
    }

    fn is_idempotent(method: &Method) -> bool {
        is_idempotent_name(method.as_str())
    }

    fn default_pool() -> AwcPool {
        ClientPool::new(AwcFactory::default(), PoolConfig::default())
    }

    fn status(response: &ClientResponse) -> u16 {
        response.status().as_u16()
    }

    fn attempt<'a, S: Fn(Self::Request) -> Self::Sent>(
        pool: &'a AwcPool,
        endpoint: Endpoint,
        method: &'a Method,
        path: &'a str,
        shape: &'a S,
        repeatable: bool,
        bound: Bound,
    ) -> impl Future<Output = Attempted<(ClientResponse, Held<Self>)>> + 'a {
        attempt(pool, endpoint, method, path, shape, repeatable, bound)
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
) -> Attempted<(ClientResponse, steadfast_pool::PooledClient<AwcClient>)> {
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
