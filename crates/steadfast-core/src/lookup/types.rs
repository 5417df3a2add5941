//! The vocabulary of the lookup cache: its configuration, its answers, its
//! errors and its actions.

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::error::RegistryError;
use crate::event::Version;
use crate::freshness::{Freshness, Source};
use crate::instance::Instance;
use crate::resolver::Token;

/// Default time a registry answer is served as fresh (before jitter).
pub const DEFAULT_LOOKUP_TTL: Duration = Duration::from_secs(60);
/// Default jitter of the TTL: each entry's TTL is drawn in ±10 % of it.
pub const DEFAULT_LOOKUP_TTL_JITTER: f64 = 0.1;
/// Default time a "no such app" answer (an empty listing) is served before
/// the registry is asked again.
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(5);
/// Default shortest time between two registry calls for one app.
pub const DEFAULT_MIN_RETRY_INTERVAL: Duration = Duration::from_secs(5);
/// Default number of apps the cache keeps.
pub const DEFAULT_LOOKUP_CAPACITY: usize = 1024;
/// Largest TTL jitter accepted (a larger one could draw a TTL near zero).
pub const MAX_LOOKUP_TTL_JITTER: f64 = 0.5;

/// Tunables of the lookup cache.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LookupConfig {
    /// A registry answer is served as [`Freshness::Fresh`] this long
    /// (default 60 s), jittered per entry by `ttl_jitter`.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Fraction of `ttl` each entry's TTL is spread by, drawn uniformly in
    /// `ttl * [1 - j, 1 + j]` from the seeded generator (default 0.1, at
    /// most [`MAX_LOOKUP_TTL_JITTER`]; zero: every entry expires after
    /// exactly `ttl`), so a fleet that looked up at once does not refresh in
    /// step.
    pub ttl_jitter: f64,
    /// An empty listing (the registry says the app has no instance) is
    /// cached this long, jittered the same way (default 5 s; zero: not
    /// cached, every lookup asks the registry, within the throttle).
    #[serde(with = "humantime_serde")]
    pub negative_ttl: Duration,
    /// A copy older than this (since the registry last confirmed it) is not
    /// served when the registry cannot confirm it: the caller gets
    /// [`LookupError::TooStale`] instead (default `None`: any age is served,
    /// flagged [`Freshness::Stale`]).
    #[serde(with = "humantime_serde")]
    pub max_staleness: Option<Duration>,
    /// At most one registry call per app per this interval, successes
    /// included (default 5 s). Callers inside it get the copy held (stale
    /// when expired) or, with none, [`LookupError::Throttled`].
    #[serde(with = "humantime_serde")]
    pub min_retry_interval: Duration,
    /// Apps kept (default 1024). Beyond it the least recently queried app
    /// without a call in flight is dropped; an app with a call in flight is
    /// never dropped (its callers wait on it), so the map can exceed the
    /// capacity by the number of apps being fetched at that moment.
    pub capacity: usize,
}

impl Default for LookupConfig {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_LOOKUP_TTL,
            ttl_jitter: DEFAULT_LOOKUP_TTL_JITTER,
            negative_ttl: DEFAULT_NEGATIVE_TTL,
            max_staleness: None,
            min_retry_interval: DEFAULT_MIN_RETRY_INTERVAL,
            capacity: DEFAULT_LOOKUP_CAPACITY,
        }
    }
}

/// The answer of a one-shot instance query (`Engine::instances`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstancesAnswer {
    /// Every instance of the app in the state served (never empty: an empty
    /// state is [`LookupError::NotFound`]).
    pub instances: Vec<Arc<Instance>>,
    /// Version of the state served.
    pub version: Version,
    /// Whether the state is confirmed now, or how old it is.
    pub freshness: Freshness,
    /// Where it came from: the live watch of a subscribed app, a registry
    /// call made for this query (shared with concurrent callers), or the
    /// cache.
    pub source: Source,
}

/// Why a one-shot instance query has no answer.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupError {
    /// The registry answered that `app` has no instance (an empty listing),
    /// now (`Fresh`) or `age` ago when it cannot be asked now. Only ever
    /// said on the registry's word, never for want of an answer.
    #[error("no instance of {app} is registered (registry answer, {freshness})")]
    NotFound {
        /// The app asked for.
        app: String,
        /// How current the registry's "none" is.
        freshness: Freshness,
    },
    /// The registry call failed (unreachable, timed out at its deadline,
    /// panicked) and no copy of `app` is held.
    #[error("registry unavailable for {app}, and no copy of it is held")]
    Unavailable {
        /// The app asked for.
        app: String,
        /// The registry's error.
        #[source]
        cause: RegistryError,
    },
    /// No copy of `app` is held and its last registry call was less than
    /// `min_retry_interval` ago: the registry is not asked again before
    /// `retry_after`.
    #[error("lookup of {app} throttled: registry asked again in {} ms", retry_after.as_millis())]
    Throttled {
        /// The app asked for.
        app: String,
        /// When the next registry call for the app is allowed.
        retry_after: Duration,
        /// The error of the last call, if it failed.
        #[source]
        cause: Option<RegistryError>,
    },
    /// The registry could not confirm the copy held and the copy is older
    /// than `max_staleness`.
    #[error(
        "copy of {app} is {} ms old, over the max staleness of {} ms, and the registry \
         cannot confirm it",
        age.as_millis(),
        max_staleness.as_millis()
    )]
    TooStale {
        /// The app asked for.
        app: String,
        /// Time since the registry last confirmed the copy.
        age: Duration,
        /// The configured bound.
        max_staleness: Duration,
        /// Why the registry could not confirm it (`None`: it was not asked,
        /// the throttle was closed after a successful call).
        #[source]
        cause: Option<RegistryError>,
    },
    /// The engine is shut down.
    #[error("the engine is shut down")]
    ShutDown,
}

/// Id the shell gives each waiting caller.
pub type WaiterId = u64;

/// What the shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum LookupAction {
    /// Call the registry's `list(app)`, bounded by `deadline`, and deliver
    /// the result with `token` ([`crate::LookupCache::on_result`]).
    Call {
        /// App to list.
        app: String,
        /// The flight's token.
        token: Token,
        /// Deadline of the call (running out is [`RegistryError::Timeout`]).
        deadline: Duration,
    },
    /// Answer a waiting caller.
    Answer {
        /// The caller.
        waiter: WaiterId,
        /// Its answer.
        result: Result<InstancesAnswer, LookupError>,
    },
    /// An idle app was dropped to keep within the capacity (for counters
    /// and logs).
    Evicted {
        /// The app dropped.
        app: String,
    },
}
