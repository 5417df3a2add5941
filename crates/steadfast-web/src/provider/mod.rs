//! Provider side of the actix-web integration.
//!
//! - [`InFlightGate`]: middleware over the export's `InFlight` tracker that
//!   counts every request and, once closing, answers 503 + `Retry-After` +
//!   [`CLOSING_HEADER`] (a retryable refusal for `Caller`: the request was
//!   not processed).
//! - [`GracefulShutdown`]: the stop sequence in the right order on SIGTERM /
//!   ctrl-c or an explicit [`ShutdownTrigger`], every step bounded.
//!
//! The tracker is created first (`InFlight::new()`), shared by the gate and
//! the export (`ExportSpec::in_flight`), so the server can be built before
//! the export exists. Details: `docs/provider.md`.

mod gate;
mod shutdown;

pub use gate::{GatedBody, InFlightGate, InFlightGateService, DEFAULT_RETRY_AFTER};
pub use shutdown::{
    ExportStopError, GracefulReport, GracefulShutdown, ShutdownCause, ShutdownTrigger,
    DEFAULT_DRAIN_TIMEOUT, DEFAULT_STEP_TIMEOUT,
};

/// Header of the provider's closing answer (value `true`), next to
/// `503 Service Unavailable` and `Retry-After`: the request was refused
/// before processing, so it is safe to retry on another endpoint.
pub const CLOSING_HEADER: &str = "x-steadfast-closing";

/// Whether an answer with `status` and the [`CLOSING_HEADER`] value
/// `closing` (when present) is a closing provider's refusal: 503 with the
/// header set to `true` (any case). One rule for every HTTP client.
pub fn is_closing_answer(status: u16, closing: Option<&[u8]>) -> bool {
    status == 503 && closing.is_some_and(|v| v.eq_ignore_ascii_case(b"true"))
}

#[cfg(test)]
mod tests {
    use super::is_closing_answer;

    #[test]
    fn only_a_503_with_the_header_true_is_a_closing_answer() {
        assert!(is_closing_answer(503, Some(b"true")));
        assert!(is_closing_answer(503, Some(b"TRUE")));
        assert!(!is_closing_answer(503, None), "a plain 503 is an overload");
        assert!(!is_closing_answer(503, Some(b"false")));
        assert!(!is_closing_answer(500, Some(b"true")));
        assert!(!is_closing_answer(200, Some(b"true")));
    }
}
