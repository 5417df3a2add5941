//! The call loop of the one [`Caller`](super::Caller), whatever its HTTP
//! client (reqwest or awc): pick (another endpoint on a retry), run one attempt
//! with the client's own code, report the outcome to the lease, and ask the
//! sans-IO [`CallRetry`] whether to retry. Transport-agnostic: an attempt
//! is a closure returning an [`Attempted`].

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use steadfast_actors::Directory;
use steadfast_core::{
    CallRetry, CallRetryPolicy, CallStep, Endpoint, FailureClass, GiveUp, RetryBudget,
};
use tokio::time::Instant;
use tracing::Instrument;

use super::error::CallError;
use super::pick;
use super::CallerStats;

/// What one attempt gave.
pub enum Attempted<R> {
    /// An answer to hand back (any status but a closing 503); `server_error`
    /// when it is a 5xx (reported to the lease as a `Server` failure).
    Answer {
        /// The answer (and what must live as long as it).
        value: R,
        /// Whether the status is a 5xx.
        server_error: bool,
    },
    /// A failure, classified.
    Failed(CallError),
}

/// When an attempt must end: the call's deadline, or earlier with a
/// per-attempt timeout (whose expiry may be retried elsewhere).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// The instant.
    pub(crate) at: Instant,
    /// Whether it is the attempt's own timeout (before the call's deadline).
    pub(crate) per_attempt: bool,
}

impl Bound {
    /// The error of an attempt on `address` that hit this bound after
    /// `elapsed`; `repeatable`: whether the request may be sent again.
    pub(crate) fn timed_out(
        &self,
        address: String,
        elapsed: Duration,
        repeatable: bool,
    ) -> CallError {
        if self.per_attempt {
            CallError::AttemptTimeout {
                address,
                after: elapsed,
                retryable: repeatable,
            }
        } else {
            CallError::Timeout(elapsed)
        }
    }
}

/// The retry state shared by every call of a Caller.
pub(crate) struct Shared {
    pub(crate) budget: RetryBudget,
    pub(crate) rng: StdRng,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    failed: AtomicU64,
    budget_refused: AtomicU64,
}

/// Everything a call needs but the client: directory, deadline, retry
/// policy, budget, counters.
pub(crate) struct CallCore {
    pub(crate) dir: Directory,
    pub(crate) deadline: Duration,
    pub(crate) policy: CallRetryPolicy,
    pub(crate) retry_any_method: bool,
    pub(crate) attempt_timeout: Option<Duration>,
    shared: Mutex<Shared>,
    counters: Counters,
}

impl CallCore {
    pub(crate) fn new(
        dir: Directory,
        deadline: Duration,
        policy: CallRetryPolicy,
        retry_any_method: bool,
        attempt_timeout: Option<Duration>,
        shared: Shared,
    ) -> Self {
        Self {
            dir,
            deadline,
            policy,
            retry_any_method,
            attempt_timeout,
            shared: Mutex::new(shared),
            counters: Counters::default(),
        }
    }

    /// Runs one call: `attempt(endpoint, bound)` per attempt, on the
    /// endpoint leased for it. Returns the answer with the attempts made
    /// and the endpoint that answered.
    ///
    /// Traced as one `steadfast.call` span (reference; then attempts,
    /// outcome, latency_ms) holding one `steadfast.attempt` span per
    /// attempt (endpoint, attempt; then outcome, latency_ms). Outcomes are
    /// `ok`, `server_error` (a 5xx answer) or a [`CallError::kind`].
    pub(crate) async fn run<R, F>(
        &self,
        attempt: impl Fn(Endpoint, Bound) -> F,
    ) -> Result<(R, u32, Endpoint), CallError>
    where
        F: Future<Output = Attempted<R>>,
    {
        let span = tracing::info_span!(
            "steadfast.call",
            reference = %self.dir.reference().subscribe_key(),
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self.run_traced(attempt).instrument(span.clone()).await;
        span.record("latency_ms", started.elapsed().as_millis() as u64);
        match &result {
            Ok((_, attempts, _)) => {
                span.record("attempts", attempts);
                span.record("outcome", "ok");
            }
            Err(e) => {
                let attempts = match e {
                    CallError::GaveUp { attempts, .. } => *attempts,
                    CallError::NoEndpoint(_) => 0,
                    _ => 1,
                };
                span.record("attempts", attempts);
                span.record("outcome", e.kind());
            }
        }
        result
    }

    /// The call loop of [`Self::run`], inside its span.
    async fn run_traced<R, F>(
        &self,
        attempt: impl Fn(Endpoint, Bound) -> F,
    ) -> Result<(R, u32, Endpoint), CallError>
    where
        F: Future<Output = Attempted<R>>,
    {
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        // A deadline past the clock's range (a "no deadline" config) is
        // clamped to a year, not turned into an instant timeout.
        let deadline = started
            .checked_add(self.deadline)
            .or_else(|| started.checked_add(Duration::from_secs(365 * 24 * 3600)))
            .unwrap_or(started);
        let mut retry = {
            let mut s = self.lock();
            CallRetry::start(&mut s.budget, started.into_std(), deadline.into_std())
        };
        let mut tried: Vec<Endpoint> = Vec::new();
        let mut last: Option<CallError> = None;
        // Bounded: every turn begins an attempt, and the policy's attempts
        // or the deadline end the run.
        loop {
            let pick_until = if tried.is_empty() {
                deadline
            } else {
                retry
                    .other_endpoint_until(&self.policy, Instant::now().into_std())
                    .into()
            };
            let lease = match pick::pick(&self.dir, &tried, pick_until).await {
                Ok(lease) => lease,
                Err(no) => {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(match last {
                        None => CallError::NoEndpoint(no),
                        Some(last) => CallError::GaveUp {
                            attempts: retry.attempts(),
                            why: GiveUp::NoOtherEndpoint,
                            last: Box::new(last),
                        },
                    });
                }
            };
            if !tried.is_empty() {
                // Counted when the retry really starts (its pick found
                // another endpoint), not when it was decided.
                c.retries.fetch_add(1, Ordering::Relaxed);
            }
            let number = retry.begin_attempt();
            c.attempts.fetch_add(1, Ordering::Relaxed);
            let endpoint = lease.endpoint().clone();
            let bound = match self
                .attempt_timeout
                .and_then(|t| Instant::now().checked_add(t))
            {
                Some(at) if at < deadline => Bound {
                    at,
                    per_attempt: true,
                },
                _ => Bound {
                    at: deadline,
                    per_attempt: false,
                },
            };
            let attempt_span = tracing::info_span!(
                "steadfast.attempt",
                endpoint = %endpoint.address(),
                attempt = number,
                outcome = tracing::field::Empty,
                latency_ms = tracing::field::Empty,
            );
            let attempt_started = Instant::now();
            let attempted = attempt(endpoint.clone(), bound)
                .instrument(attempt_span.clone())
                .await;
            attempt_span.record("latency_ms", attempt_started.elapsed().as_millis() as u64);
            attempt_span.record(
                "outcome",
                match &attempted {
                    Attempted::Answer {
                        server_error: true, ..
                    } => "server_error",
                    Attempted::Answer { .. } => "ok",
                    Attempted::Failed(e) => e.kind(),
                },
            );
            let error = match attempted {
                Attempted::Answer {
                    value,
                    server_error,
                } => {
                    if server_error {
                        lease.failure(FailureClass::Server);
                    } else {
                        lease.success();
                    }
                    return Ok((value, number, endpoint));
                }
                Attempted::Failed(e) => e,
            };
            match error.failure_class() {
                Some(class) => {
                    lease.failure(class);
                }
                None => drop(lease),
            }
            tracing::debug!(endpoint = %endpoint.address(), attempt = number, error = %error, "call attempt failed");
            tried.push(endpoint);
            let step = {
                let now = Instant::now().into_std();
                let s = &mut *self.lock();
                let retryable = error.is_retryable();
                retry.on_failure(&self.policy, retryable, &mut s.budget, now, &mut s.rng)
            };
            match step {
                CallStep::Retry { after } => {
                    tokio::time::sleep(after).await;
                    last = Some(error);
                }
                CallStep::GiveUp(why) => {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                    if why == GiveUp::Budget {
                        c.budget_refused.fetch_add(1, Ordering::Relaxed);
                    }
                    if why == GiveUp::Final && number == 1 {
                        return Err(error);
                    }
                    return Err(CallError::GaveUp {
                        attempts: number,
                        why,
                        last: Box::new(error),
                    });
                }
            }
        }
    }

    /// The counters.
    pub(crate) fn stats(&self) -> CallerStats {
        let c = &self.counters;
        CallerStats {
            calls: c.calls.load(Ordering::Relaxed),
            attempts: c.attempts.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            budget_refused: c.budget_refused.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // The state stays consistent even if a holder panicked (no await
        // or user code runs under the lock).
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
