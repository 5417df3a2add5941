//! [`InFlightGate`]: the actix-web middleware that counts every request in
//! an export's [`InFlight`] tracker and, once the export is closing, answers
//! `503 Service Unavailable` with `Retry-After` and
//! [`CLOSING_HEADER`]` : true` without running the handler.
//!
//! A request counts from the moment the middleware sees it until its
//! response body is fully sent (or dropped), so a graceful shutdown's drain
//! also waits for a streaming body. The closing answer carries
//! `Connection: close`, so the caller's pooled connection to a stopping
//! provider is not reused.

use std::future::{ready, Ready};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{BodySize, EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::RETRY_AFTER;
use actix_web::web::Bytes;
use actix_web::{Error, HttpResponse};
use futures::future::LocalBoxFuture;
use steadfast_actors::{InFlight, InFlightGuard};

use super::CLOSING_HEADER;

/// Default `Retry-After` of the closing answer: 1 s.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// actix-web middleware over an export's [`InFlight`] tracker: counts every
/// request in flight; once closing, answers 503 + `Retry-After: 1` +
/// `x-steadfast-closing: true` and does not run the handler.
///
/// Build the tracker first, wrap the app with the gate, and give the same
/// tracker to the export with `ExportSpec::in_flight`:
///
/// ```no_run
/// # use actix_web::{web, App, HttpServer};
/// # use steadfast_actors::InFlight;
/// # use steadfast_web::InFlightGate;
/// let in_flight = InFlight::new();
/// let gate = InFlightGate::new(in_flight.clone());
/// let server = HttpServer::new(move || {
///     App::new()
///         .wrap(gate.clone())
///         .route("/hello", web::get().to(|| async { "hello" }))
/// });
/// // engine.export(ExportSpec::new(..).in_flight(in_flight).service(..))
/// ```
#[derive(Clone, Debug)]
pub struct InFlightGate {
    in_flight: InFlight,
    retry_after_secs: u64,
    refused: Arc<AtomicU64>,
}

impl InFlightGate {
    /// A gate counting requests in `in_flight` (the export's tracker).
    pub fn new(in_flight: InFlight) -> Self {
        Self {
            in_flight,
            retry_after_secs: DEFAULT_RETRY_AFTER.as_secs(),
            refused: Arc::default(),
        }
    }

    /// Sets the closing answer's `Retry-After`, in whole seconds rounded up
    /// (at least 1; default [`DEFAULT_RETRY_AFTER`]).
    pub fn retry_after(mut self, after: Duration) -> Self {
        let whole = after.as_secs();
        let rounded = if after.subsec_nanos() > 0 {
            whole.saturating_add(1)
        } else {
            whole
        };
        self.retry_after_secs = rounded.max(1);
        self
    }

    /// The tracker this gate counts in.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// Requests answered with the closing 503 so far (by every worker's
    /// copy of this gate).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl<S, B> Transform<S, ServiceRequest> for InFlightGate
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<GatedBody<B>>>;
    type Error = Error;
    type Transform = InFlightGateService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(InFlightGateService {
            service,
            gate: self.clone(),
        }))
    }
}

/// The gate wrapped around one worker's service (built by [`InFlightGate`]).
pub struct InFlightGateService<S> {
    service: S,
    gate: InFlightGate,
}

impl<S, B> Service<ServiceRequest> for InFlightGateService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<GatedBody<B>>>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let Some(guard) = self.gate.in_flight.enter() else {
            self.gate.refused.fetch_add(1, Ordering::Relaxed);
            let answer = HttpResponse::ServiceUnavailable()
                .insert_header((RETRY_AFTER, self.gate.retry_after_secs.to_string()))
                .insert_header((CLOSING_HEADER, "true"))
                .force_close()
                .finish();
            let res = req.into_response(answer).map_into_right_body();
            return Box::pin(ready(Ok(res)));
        };
        let fut = self.service.call(req);
        Box::pin(async move {
            // An error from the inner service drops the guard here: the
            // request is over.
            let res = fut.await?;
            Ok(res
                .map_body(|_, body| GatedBody {
                    body,
                    guard: Some(guard),
                })
                .map_into_left_body())
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request counted in flight until the
    /// body has been sent to its end, failed, or been dropped.
    pub struct GatedBody<B> {
        #[pin]
        body: B,
        guard: Option<InFlightGuard>,
    }
}

impl<B: MessageBody> MessageBody for GatedBody<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.project();
        let polled = this.body.poll_next(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.guard.take();
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_at_least_one() {
        let gate = InFlightGate::new(InFlight::new());
        assert_eq!(gate.retry_after_secs, 1);
        assert_eq!(gate.clone().retry_after(Duration::ZERO).retry_after_secs, 1);
        let g = gate.clone().retry_after(Duration::from_millis(2100));
        assert_eq!(g.retry_after_secs, 3);
        let g = gate.retry_after(Duration::MAX);
        assert_eq!(g.retry_after_secs, u64::MAX);
    }
}
