//! One reqwest attempt of a call on one leased endpoint: a pooled client, the URL,
//! the request within the attempt's bound (the call's deadline or a
//! per-attempt timeout), raced against the pool closing
//! the client, and the answer classified (a closing answer is a failure).

use reqwest::{Method, RequestBuilder, Response};
use steadfast_core::Endpoint;
use steadfast_pool::PooledClient;
use tokio::time::Instant;

use super::error::CallError;
use super::run::{Attempted, Bound};
use super::ReqwestPool;

/// What a reqwest attempt answers with: the response and the pooled
/// client, held while the body is read.
pub(crate) type Answered = (Response, PooledClient<reqwest::Client>);

/// Runs one attempt of `method path` on `endpoint` within `bound`.
pub(crate) async fn attempt(
    pool: &ReqwestPool,
    endpoint: Endpoint,
    method: &Method,
    path: &str,
    build: &(impl Fn(RequestBuilder) -> RequestBuilder + ?Sized),
    repeatable: bool,
    bound: Bound,
) -> Attempted<Answered> {
    let started = Instant::now();
    let address = endpoint.address();
    let pooled = match pool.acquire(&address) {
        Ok(p) => p,
        Err(e) => return Attempted::Failed(CallError::Pool(e)),
    };
    let url = endpoint.http_url_for(path);
    // reqwest's per-request timeout runs until the body is read to its
    // end, so reading the answer is bounded by the same instant.
    let request = build(pooled.client().request(method.clone(), url))
        .timeout(bound.at.saturating_duration_since(started));
    let request = match request.build() {
        Ok(r) => r,
        Err(e) => return Attempted::Failed(CallError::Request(Box::new(e))),
    };
    let sent = pooled.client().execute(request);
    let outcome = tokio::select! {
        r = tokio::time::timeout_at(bound.at, sent) => r,
        () = pooled.closed() => {
            return Attempted::Failed(CallError::ClosedWhileInUse {
                source: pooled.closed_error(),
                retryable: repeatable,
            });
        }
    };
    let elapsed = started.elapsed();
    match outcome {
        Err(_) => Attempted::Failed(bound.timed_out(address, elapsed, repeatable)),
        Ok(Err(e)) if e.is_timeout() && !e.is_connect() => {
            Attempted::Failed(bound.timed_out(address, elapsed, repeatable))
        }
        Ok(Err(e)) => Attempted::Failed(CallError::of_transport(&address, e, repeatable)),
        Ok(Ok(response)) if is_closing(&response) => {
            Attempted::Failed(CallError::Closing { address })
        }
        Ok(Ok(response)) => Attempted::Answer {
            server_error: response.status().is_server_error(),
            value: (response, pooled),
        },
    }
}

/// A closing provider's answer: 503 with `x-steadfast-closing: true`.
fn is_closing(response: &Response) -> bool {
    crate::provider::is_closing_answer(
        response.status().as_u16(),
        response
            .headers()
            .get(crate::provider::CLOSING_HEADER)
            .map(|v| v.as_bytes()),
    )
}
