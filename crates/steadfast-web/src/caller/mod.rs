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
//! success for the lease. "Another endpoint" is another [`Endpoint`]: a
//! provider restarted on the same address (a new incarnation) counts as
//! another one.
//!
//! ```no_run
//! # async fn demo(engine: steadfast_actors::Engine) -> Result<(), Box<dyn std::error::Error>> {
//! use steadfast_core::Reference;
//! use steadfast_web::Caller;
//!
//! let dir = engine.subscribe(Reference::new("demo.Greeter", "http", ["greeter-app"])).await?;
//! let caller = Caller::new(dir);                      // inside the actix System
//! let answer = caller.get("greet/ann?loud=1").await?; // select, URL, pool, lease, retry elsewhere
//! println!("{} attempt(s): {}", answer.attempts, answer.response.text().await?);
//! # Ok(()) }
//! ```

mod attempt;
#[cfg(feature = "awc")]
mod awc;
mod client;
mod error;
mod feed;
mod pick;
mod run;

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_actors::Directory;
use steadfast_core::{CallRetryPolicy, Endpoint, RetryBudget, RetryBudgetConfig};
use steadfast_pool::{ClientFactory, ClientPool};

#[cfg(feature = "awc")]
pub use self::awc::{Awc, AwcPool};
pub use client::{Held, HttpClient, Reqwest};
pub use error::{is_idempotent, BoxError, CallError};

use crate::factory::ReqwestFactory;
use run::{CallCore, Shared};

/// The pool a [`Caller`] takes its clients from.
pub type ReqwestPool = ClientPool<ReqwestFactory>;

/// Default deadline of a whole call (every attempt and wait included).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// A successful call: the answer, how many attempts it took, and the
/// endpoint that answered.
pub struct Answer<H: HttpClient = Reqwest> {
    /// The provider's answer (any status but a closing 503; check it).
    /// Reading its body is bounded by the call's deadline (or the
    /// attempt's timeout) with reqwest: a provider that stalls mid-body
    /// gives a timeout error, never a hang.
    pub response: H::Response,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
    /// The endpoint that answered.
    pub endpoint: Endpoint,
    /// Keeps the pooled client counted in use while the body is read.
    _hold: Held<H>,
}

impl<H: HttpClient> std::fmt::Debug for Answer<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("status", &H::status(&self.response))
            .field("attempts", &self.attempts)
            .field("endpoint", &self.endpoint.address())
            .finish()
    }
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

/// Reads a [`Caller`]'s counters without keeping it alive
/// ([`Caller::stats_reader`]).
#[derive(Clone)]
pub struct CallerStatsReader {
    reference: String,
    read: Arc<dyn Fn() -> Option<CallerStats> + Send + Sync>,
}

impl CallerStatsReader {
    /// The Caller's reference (its subscribe key), the `reference` label.
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// The counters now; `None` once every clone of the Caller dropped.
    pub fn read(&self) -> Option<CallerStats> {
        (self.read)()
    }
}

impl std::fmt::Debug for CallerStatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerStatsReader")
            .field("reference", &self.reference)
            .field("stats", &self.read())
            .finish()
    }
}

/// What every clone of a Caller shares: the call loop's state, the pool,
/// and the pool feed's stop signal.
pub(crate) struct Inner<F: ClientFactory> {
    pub(crate) core: CallCore,
    pub(crate) pool: ClientPool<F>,
    _feed: feed::FeedStop,
}

/// An HTTP client for one reference (see the module docs), on reqwest by
/// default (`Caller<Awc>`: on actix-web's own client, feature `awc`).
/// Cheap to clone; the clones share the pool, the retry budget and the
/// counters. Build it inside a tokio runtime (an actix System is one): it
/// spawns the task that keeps the pool in step with the directory, which
/// ends when the last clone drops or the directory closes.
pub struct Caller<H: HttpClient = Reqwest> {
    inner: Arc<Inner<H::Factory>>,
}

impl<H: HttpClient> Clone for Caller<H> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<H: HttpClient> std::fmt::Debug for Caller<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("reference", self.inner.core.dir.reference())
            .field("deadline", &self.inner.core.deadline)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Builds a [`Caller`] (see [`Caller::builder`]).
#[must_use]
pub struct CallerBuilder<H: HttpClient = Reqwest> {
    dir: Directory,
    pool: Option<ClientPool<H::Factory>>,
    deadline: Duration,
    budget: RetryBudgetConfig,
    policy: CallRetryPolicy,
    retry_any_method: bool,
    attempt_timeout: Option<Duration>,
    seed: Option<u64>,
}

impl<H: HttpClient> CallerBuilder<H> {
    /// The pool to take clients from (default: a new pool of the client's
    /// default factory, [`HttpClient::default_pool`]). Share one pool
    /// between the Callers of one process.
    pub fn pool(mut self, pool: ClientPool<H::Factory>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The same settings on another HTTP client (`.client::<Awc>()`); a
    /// pool given before is for the old client and is dropped.
    pub fn client<C: HttpClient>(self) -> CallerBuilder<C> {
        CallerBuilder {
            dir: self.dir,
            pool: None,
            deadline: self.deadline,
            budget: self.budget,
            policy: self.policy,
            retry_any_method: self.retry_any_method,
            attempt_timeout: self.attempt_timeout,
            seed: self.seed,
        }
    }

    /// The deadline of a whole call, every attempt and wait included
    /// (default [`DEFAULT_DEADLINE`], 10 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The retry budget (default 20 % of the calls + 10/s over 10 s;
    /// [`RetryBudgetConfig::none`]: never retry). Out-of-range values are
    /// clamped, never a panic; [`RetryBudgetConfig::validate`] says whether
    /// a config makes sense.
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

    /// Bounds each attempt to `timeout` within the call's deadline, so that
    /// an endpoint that hangs (a frozen process keeps its sockets open)
    /// costs one attempt and the call is retried elsewhere (idempotent
    /// requests only, see [`CallError::AttemptTimeout`]). Default: none,
    /// an attempt may use the whole deadline.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// Seeds the retry delays' jitter (default: from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The Caller. Inside a tokio runtime (with awc: inside an actix
    /// System, whose arbiters run its calls).
    pub fn build(mut self) -> Caller<H> {
        let pool = self.pool.take().unwrap_or_else(H::default_pool);
        let feed = feed::start(&self.dir, &pool, pool.new_owner());
        Caller {
            inner: Arc::new(Inner {
                core: self.core(),
                pool,
                _feed: feed,
            }),
        }
    }

    /// The call loop's state from these settings.
    fn core(self) -> CallCore {
        let rng = match self.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        let shared = Shared {
            budget: RetryBudget::new(self.budget),
            rng,
        };
        CallCore::new(
            self.dir,
            self.deadline,
            self.policy,
            self.retry_any_method,
            self.attempt_timeout,
            shared,
        )
    }
}

impl Caller {
    /// A reqwest Caller with the defaults: its own pool of reqwest clients,
    /// deadline 10 s, budget 20 % + 10/s over 10 s. Inside a tokio runtime.
    pub fn new(dir: Directory) -> Caller {
        Self::builder(dir).build()
    }

    /// A builder starting from the defaults, on reqwest (`.client::<Awc>()`
    /// for awc).
    pub fn builder(dir: Directory) -> CallerBuilder {
        CallerBuilder {
            dir,
            pool: None,
            deadline: DEFAULT_DEADLINE,
            budget: RetryBudgetConfig::default(),
            policy: CallRetryPolicy::default(),
            retry_any_method: false,
            attempt_timeout: None,
            seed: None,
        }
    }
}

impl<H: HttpClient> Caller<H> {
    /// `GET <service base url>/<path>` (see [`Caller::send`]).
    pub async fn get(&self, path: &str) -> Result<Answer<H>, CallError> {
        self.send(H::get(), path, H::plain).await
    }

    /// `method <service base url>/<path>`, the request shaped by `shape`
    /// (headers, body; called anew for every attempt, on a request whose
    /// timeout is the attempt's time left). `path` may carry a query
    /// (`"greet?name=ann"`), written encoded.
    pub async fn send(
        &self,
        method: H::Method,
        path: &str,
        shape: impl Fn(H::Request) -> H::Sent,
    ) -> Result<Answer<H>, CallError> {
        let inner = &*self.inner;
        let repeatable = inner.core.retry_any_method || H::is_idempotent(&method);
        let run = inner.core.run(|endpoint, bound| {
            H::attempt(
                &inner.pool,
                endpoint,
                &method,
                path,
                &shape,
                repeatable,
                bound,
            )
        });
        let ((response, hold), attempts, endpoint) = run.await?;
        Ok(Answer {
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

    /// A reader of these counters that does not keep the Caller alive
    /// (what `steadfast::metrics::Metrics::caller` holds): once the last
    /// clone drops, it reads `None` and the Caller's series go away.
    pub fn stats_reader(&self) -> CallerStatsReader
    where
        H::Factory: 'static,
    {
        let weak = Arc::downgrade(&self.inner);
        CallerStatsReader {
            reference: self.inner.core.dir.reference().subscribe_key(),
            read: Arc::new(move || weak.upgrade().map(|i| i.core.stats())),
        }
    }

    /// The directory the Caller picks from.
    pub fn directory(&self) -> &Directory {
        &self.inner.core.dir
    }

    /// The pool the Caller takes its clients from.
    pub fn pool(&self) -> &ClientPool<H::Factory> {
        &self.inner.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_and_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: T) {}

    /// A Caller and its calls' futures can go to any thread (e.g. a
    /// `tokio::spawn`); never run, only type-checked.
    #[allow(dead_code)]
    fn caller_and_its_calls_are_send(caller: Caller) {
        send_and_sync(&caller);
        send(caller.get("x"));
        send(caller.send(reqwest::Method::POST, "x", |r| r.body("b")));
    }
}
