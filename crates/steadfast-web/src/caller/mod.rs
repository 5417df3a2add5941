//! [`Caller`]: a reqwest client for one reference. Per call it
//!
//! 1. picks an endpoint with the directory's strategy (waiting, bounded by
//!    the call's deadline, while the directory has none);
//! 2. builds the URL with [`ServiceUrl::http_url_for`](steadfast_core::ServiceUrl::http_url_for)
//!    (scheme, host, port, service path, then the call's path; encoded
//!    query, no internal `steadfast.*` params);
//! 3. sends with the endpoint's client from the [`ClientPool`], under the
//!    call's deadline, raced against the pool closing that client;
//! 4. reports the outcome to the lease (latency, or the failure's class);
//! 5. on a retryable failure (see [`CallError::is_retryable`]) retries on
//!    ANOTHER endpoint, when the attempt schedule (3 attempts, 10-100 ms
//!    apart), the retry budget (20 % of calls + 10/s over 10 s) and the
//!    deadline all allow it (the decision is the sans-IO
//!    [`CallRetry`](steadfast_core::CallRetry)).
//!
//! A 5xx answer other than a closing 503 is handed back (the provider ran
//! the request) and told to the lease as a `Server` failure; a 4xx is a
//! success for the lease.

mod attempt;
mod error;
mod feed;
mod pick;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use reqwest::{Method, RequestBuilder, Response};
use steadfast_actors::Directory;
use steadfast_core::{
    CallRetry, CallRetryPolicy, CallStep, Endpoint, GiveUp, RetryBudget, RetryBudgetConfig,
};
use steadfast_pool::{ClientPool, PoolConfig, PooledClient};
use tokio::time::Instant;

pub use error::{is_idempotent, CallError};

use crate::factory::ReqwestFactory;
use attempt::Attempted;

/// The pool a [`Caller`] takes its clients from.
pub type ReqwestPool = ClientPool<ReqwestFactory>;

/// Default deadline of a whole call (every attempt and wait included).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// A successful call: the answer, how many attempts it took, and the
/// endpoint that answered.
#[derive(Debug)]
pub struct Answer {
    /// The provider's answer (any status but a closing 503; check it).
    pub response: Response,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
    /// The endpoint that answered.
    pub endpoint: Endpoint,
    /// Keeps the pooled client counted in use while the body is read.
    _hold: PooledClient<reqwest::Client>,
}

/// Counters of a [`Caller`] (shared by its clones), all time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallerStats {
    /// Calls started.
    pub calls: u64,
    /// Attempts made (calls + retries).
    pub attempts: u64,
    /// Retries made (an attempt after a failed one).
    pub retries: u64,
    /// Calls that ended in an error.
    pub failed: u64,
    /// Retries the budget refused.
    pub budget_refused: u64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    failed: AtomicU64,
    budget_refused: AtomicU64,
}

/// The retry state shared by every call of a Caller.
struct Shared {
    budget: RetryBudget,
    rng: StdRng,
}

struct Inner {
    dir: Directory,
    pool: ReqwestPool,
    deadline: Duration,
    policy: CallRetryPolicy,
    retry_any_method: bool,
    shared: Mutex<Shared>,
    counters: Counters,
    _feed: feed::FeedStop,
}

/// A reqwest client for one reference (see the module docs). Cheap to
/// clone; the clones share the pool, the retry budget and the counters.
/// Build it inside a tokio runtime (an actix System is one): it spawns the
/// task that keeps the pool in step with the directory, which ends when
/// the last clone drops or the directory closes.
#[derive(Clone)]
pub struct Caller {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("reference", self.inner.dir.reference())
            .field("deadline", &self.inner.deadline)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Builds a [`Caller`] (see [`Caller::builder`]).
#[must_use]
pub struct CallerBuilder {
    dir: Directory,
    pool: Option<ReqwestPool>,
    deadline: Duration,
    budget: RetryBudgetConfig,
    policy: CallRetryPolicy,
    retry_any_method: bool,
    seed: Option<u64>,
}

impl CallerBuilder {
    /// The pool to take clients from (default: a new pool of
    /// [`ReqwestFactory::default`] clients with [`PoolConfig::default`]).
    /// Share one pool between the Callers of one process.
    pub fn pool(mut self, pool: ReqwestPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The deadline of a whole call, every attempt and wait included
    /// (default [`DEFAULT_DEADLINE`], 10 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The retry budget (default 20 % of the calls + 10/s over 10 s;
    /// [`RetryBudgetConfig::none`]: never retry).
    pub fn budget(mut self, budget: RetryBudgetConfig) -> Self {
        self.budget = budget;
        self
    }

    /// Attempts and delays of a call's retries (default 3 attempts,
    /// 10 ms doubling to 100 ms, +0-25 % jitter).
    pub fn retry_policy(mut self, policy: CallRetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Also retry non-idempotent requests (POST, PATCH) after a transport
    /// failure that may have happened once the request was sent (default
    /// `false`: only failures where the request was surely not processed
    /// are retried for them).
    pub fn retry_any_method(mut self, yes: bool) -> Self {
        self.retry_any_method = yes;
        self
    }

    /// Seeds the retry delays' jitter (default: from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The Caller. Inside a tokio runtime.
    pub fn build(self) -> Caller {
        let pool = self
            .pool
            .unwrap_or_else(|| ClientPool::new(ReqwestFactory::default(), PoolConfig::default()));
        let owner = pool.new_owner();
        let feed = feed::start(&self.dir, &pool, owner);
        let rng = match self.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        Caller {
            inner: Arc::new(Inner {
                dir: self.dir,
                pool,
                deadline: self.deadline,
                policy: self.policy,
                retry_any_method: self.retry_any_method,
                shared: Mutex::new(Shared {
                    budget: RetryBudget::new(self.budget),
                    rng,
                }),
                counters: Counters::default(),
                _feed: feed,
            }),
        }
    }
}

impl Caller {
    /// A Caller with the defaults: its own pool of reqwest clients,
    /// deadline 10 s, budget 20 % + 10/s over 10 s. Inside a tokio runtime.
    pub fn new(dir: Directory) -> Caller {
        Self::builder(dir).build()
    }

    /// A builder starting from the defaults.
    pub fn builder(dir: Directory) -> CallerBuilder {
        CallerBuilder {
            dir,
            pool: None,
            deadline: DEFAULT_DEADLINE,
            budget: RetryBudgetConfig::default(),
            policy: CallRetryPolicy::default(),
            retry_any_method: false,
            seed: None,
        }
    }

    /// `GET <service base url>/<path>` (see [`Caller::send`]).
    pub async fn get(&self, path: &str) -> Result<Answer, CallError> {
        self.send(Method::GET, path, |r| r).await
    }

    /// `method <service base url>/<path>`, the request shaped by `build`
    /// (headers, body; called anew for every attempt). `path` may carry a
    /// query (`"greet?name=ann"`), written encoded.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Answer, CallError> {
        let inner = &*self.inner;
        let c = &inner.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let deadline = started.checked_add(inner.deadline).unwrap_or(started);
        let mut retry = {
            let mut s = self.lock();
            CallRetry::start(&mut s.budget, started.into_std(), deadline.into_std())
        };
        let repeatable = inner.retry_any_method || is_idempotent(&method);
        let mut tried: Vec<Endpoint> = Vec::new();
        let mut last: Option<CallError> = None;
        // Bounded: every turn begins an attempt, and the policy's
        // `max_attempts` (or the deadline) ends the run.
        loop {
            let lease = match pick::pick(&inner.dir, &tried, deadline).await {
                Ok(lease) => lease,
                Err(no) => {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(match last {
                        None => CallError::NoEndpoint(no),
                        Some(last) => CallError::GaveUp {
                            attempts: retry.attempts(),
                            why: GiveUp::Deadline,
                            last: Box::new(last),
                        },
                    });
                }
            };
            let number = retry.begin_attempt();
            c.attempts.fetch_add(1, Ordering::Relaxed);
            let endpoint = lease.endpoint().clone();
            let attempted = attempt::attempt(
                &inner.pool,
                &lease,
                &method,
                path,
                &build,
                repeatable,
                deadline,
            )
            .await;
            let error = match attempted {
                Attempted::Answer {
                    response,
                    server_error,
                    hold,
                } => {
                    if server_error {
                        lease.failure(steadfast_core::FailureClass::Server);
                    } else {
                        lease.success();
                    }
                    return Ok(Answer {
                        response,
                        attempts: number,
                        endpoint,
                        _hold: hold,
                    });
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
                retry.on_failure(
                    &inner.policy,
                    error.is_retryable(),
                    &mut s.budget,
                    now,
                    &mut s.rng,
                )
            };
            match step {
                CallStep::Retry { after } => {
                    c.retries.fetch_add(1, Ordering::Relaxed);
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

    /// The counters (shared by every clone).
    pub fn stats(&self) -> CallerStats {
        let c = &self.inner.counters;
        CallerStats {
            calls: c.calls.load(Ordering::Relaxed),
            attempts: c.attempts.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            budget_refused: c.budget_refused.load(Ordering::Relaxed),
        }
    }

    /// The directory the Caller picks from.
    pub fn directory(&self) -> &Directory {
        &self.inner.dir
    }

    /// The pool the Caller takes its clients from.
    pub fn pool(&self) -> &ReqwestPool {
        &self.inner.pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // The state stays consistent even if a holder panicked (no await
        // or user code runs under the lock).
        self.inner
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
