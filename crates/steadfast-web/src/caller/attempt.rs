//! One reqwest attempt of a call on one leased endpoint: a pooled client, the URL,
//! the request under the call's deadline, raced against the pool closing
//! the client, and the answer classified (a closing answer is a failure).

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use steadfast_core::Endpoint;
use steadfast_pool::{ClosedWhileInUse, PooledClient};
use tokio::time::Instant;

use super::error::CallError;
use super::run::Attempted;
use super::ReqwestPool;

/// The header a closing provider's 503 carries (the provider side's
/// `CLOSING_HEADER`, `x-steadfast-closing`).
pub(crate) const CLOSING_HEADER_NAME: &str = "x-steadfast-closing";

/// What a reqwest attempt answers with: the response and the pooled
/// client, held while the body is read.
pub(crate) type Answered = (Response, PooledClient<reqwest::Client>);

/// Runs one attempt of `method path` on `lease`'s endpoint by `deadline`.
pub(crate) async fn attempt(
    pool: &ReqwestPool,
    endpoint: Endpoint,
    method: &Method,
    path: &str,
    build: &(impl Fn(RequestBuilder) -> RequestBuilder + ?Sized),
    repeatable: bool,
    deadline: Instant,
) -> Attempted<Answered> {
    let started = Instant::now();
    let address = endpoint.address();
    let pooled = match pool.acquire(&address) {
        Ok(p) => p,
        Err(e) => return Attempted::Failed(CallError::Pool(e)),
    };
    let url = endpoint.http_url_for(path);
    let request = build(pooled.client().request(method.clone(), url));
    let request = match request.build() {
        Ok(r) => r,
        Err(e) => return Attempted::Failed(CallError::Request(Box::new(e))),
    };
    let sent = pooled.client().execute(request);
    let outcome = tokio::select! {
        r = tokio::time::timeout_at(deadline, sent) => r,
        () = pooled.closed() => {
            return Attempted::Failed(CallError::ClosedWhileInUse(ClosedWhileInUse { address }));
        }
    };
    let elapsed = started.elapsed();
    match outcome {
        Err(_) => Attempted::Failed(CallError::Timeout(elapsed)),
        Ok(Err(e)) => Attempted::Failed(CallError::of_transport(&address, e, repeatable, elapsed)),
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
    response.status() == StatusCode::SERVICE_UNAVAILABLE
        && response
            .headers()
            .get(CLOSING_HEADER_NAME)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}
