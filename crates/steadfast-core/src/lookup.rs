//! Sans-IO lookup cache for one-shot instance queries of apps the engine
//! does not watch (`Engine::instances`): go-micro's registry cache, with
//! each of its weak points removed by construction.
//!
//! Per app the [`LookupCache`] keeps the last registry answer (a
//! [`Listing`]) with when it was confirmed and when it expires, at most one
//! registry call in flight with the callers waiting on it, and the time and
//! error of the last call. The shell delivers queries and call results with
//! `now`, and performs the [`LookupAction`]s (call the registry under a
//! deadline, answer a caller). Rules:
//!
//! - **Fresh hit.** A copy within its TTL answers at once
//!   ([`Freshness::Fresh`], [`Source::Cache`]). The TTL (default 60 s) is
//!   drawn per entry in ±`ttl_jitter` (default 10 %) from a seeded
//!   generator, so a fleet that looked up together does not refresh in step.
//! - **Singleflight.** An expired or missing copy starts one registry call,
//!   or joins the one in flight: concurrent callers share it.
//! - **Stored before answered.** A call's result is written into the entry
//!   before any waiter is answered, in the same step: a caller arriving right
//!   after gets the stored copy, never a second call or a `NotFound`
//!   (go-micro's cold-start race cannot happen).
//! - **Stale if error.** A failed call answers every waiter with the copy
//!   held, flagged [`Freshness::Stale`] with its age (time since the
//!   registry last confirmed it), unless it is older than `max_staleness`
//!   (default unlimited): then [`LookupError::TooStale`]. With no copy:
//!   [`LookupError::Unavailable`] with the registry's error as `source()`.
//! - **Per-app throttle.** At most one call per app per `min_retry_interval`
//!   (default 5 s; successes count, as in go-micro). Inside it a caller gets
//!   the copy held (stale when expired) or, with none,
//!   [`LookupError::Throttled`] with the time left — never `NotFound`. All
//!   of this state is per app: one app's failures never change another's
//!   answers.
//! - **Negative answers.** `NotFound` only on the registry's word (an empty
//!   listing). It is cached `negative_ttl` (default 5 s, jittered) so a
//!   storm of queries for an absent app costs one call per that interval,
//!   and an app that appears is seen within it.
//! - **Deadlines.** Every call carries the registry call deadline; the
//!   shell turns running out into [`RegistryError::Timeout`]. As a second
//!   bound, a flight whose result never came (a lost future) is failed as a
//!   timeout by the first query after its deadline plus
//!   [`FLIGHT_GRACE`].
//! - **Bounded.** At most `capacity` apps (default 1024); the least
//!   recently queried app without a call in flight is dropped first.

mod types;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::error::RegistryError;
use crate::event::Listing;
use crate::freshness::{Freshness, Source};
use crate::resolver::Token;

pub use types::{
    InstancesAnswer, LookupAction, LookupConfig, LookupError, WaiterId, MAX_LOOKUP_TTL_JITTER,
};

/// A flight older than its call deadline plus this is failed as a timeout
/// by the next query (its result was lost).
pub const FLIGHT_GRACE: Duration = Duration::from_secs(1);

/// The last registry answer of one app.
#[derive(Debug)]
struct Stored {
    listing: Listing,
    /// When the registry last confirmed it.
    confirmed: Instant,
    /// Served as fresh until then.
    expires: Instant,
}

/// The registry call in flight for one app.
#[derive(Debug)]
struct Flight {
    token: Token,
    started: Instant,
    waiters: Vec<WaiterId>,
}

/// Everything kept for one app.
#[derive(Debug, Default)]
struct Entry {
    stored: Option<Stored>,
    flight: Option<Flight>,
    last_attempt: Option<Instant>,
    last_error: Option<RegistryError>,
    /// Position in the recency order.
    used: u64,
}

/// The lookup cache of one engine (see the module docs).
#[derive(Debug)]
pub struct LookupCache {
    config: LookupConfig,
    call_timeout: Duration,
    rng: StdRng,
    entries: HashMap<String, Entry>,
    /// Recency order: `used` tick -> app.
    order: BTreeMap<u64, String>,
    tick: u64,
    next_token: Token,
}

impl LookupCache {
    /// A cache with `config`, whose registry calls are bounded by
    /// `call_timeout`, its TTL jitter drawn from a generator seeded by
    /// `seed`.
    pub fn new(config: LookupConfig, call_timeout: Duration, seed: u64) -> Self {
        Self {
            config,
            call_timeout,
            rng: StdRng::seed_from_u64(seed),
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            next_token: 1,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LookupConfig {
        &self.config
    }

    /// Apps held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no app is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a registry call for `app` is in flight.
    pub fn in_flight(&self, app: &str) -> bool {
        self.entries.get(app).is_some_and(|e| e.flight.is_some())
    }

    /// When `app`'s copy stops being fresh, if one is held.
    pub fn expires_at(&self, app: &str) -> Option<Instant> {
        self.entries
            .get(app)
            .and_then(|e| e.stored.as_ref())
            .map(|s| s.expires)
    }

    /// Caller `waiter` asks for the instances of `app` at `now`.
    pub fn query(&mut self, app: &str, waiter: WaiterId, now: Instant) -> Vec<LookupAction> {
        let mut out = Vec::new();
        if !self.entries.contains_key(app) {
            self.make_room(&mut out);
            self.entries.insert(app.to_string(), Entry::default());
        }
        self.touch(app);
        let (config, call_timeout) = (self.config, self.call_timeout);
        let token = self.next_token;
        let entry = self.entries.get_mut(app).expect("inserted above");
        // A flight whose result never came back is over.
        if let Some(f) = &entry.flight {
            let lost_after = call_timeout.saturating_add(FLIGHT_GRACE);
            if now.saturating_duration_since(f.started) >= lost_after {
                let f = entry.flight.take().expect("checked");
                entry.last_error = Some(RegistryError::Timeout);
                for waiter in f.waiters {
                    let result = fallback(app, entry, &config, now);
                    out.push(LookupAction::Answer { waiter, result });
                }
            }
        }
        if let Some(s) = &entry.stored {
            if now < s.expires {
                let result = answer(app, &s.listing, Freshness::Fresh, Source::Cache);
                out.push(LookupAction::Answer { waiter, result });
                return out;
            }
        }
        if let Some(f) = entry.flight.as_mut() {
            f.waiters.push(waiter);
            return out;
        }
        let next_call = entry
            .last_attempt
            .and_then(|t| t.checked_add(config.min_retry_interval));
        match next_call {
            Some(at) if now < at => {
                let result = match entry.stored {
                    Some(_) => fallback(app, entry, &config, now),
                    None => Err(LookupError::Throttled {
                        app: app.to_string(),
                        retry_after: at.saturating_duration_since(now),
                        cause: entry.last_error.clone(),
                    }),
                };
                out.push(LookupAction::Answer { waiter, result });
            }
            _ => {
                self.next_token = token.wrapping_add(1).max(1);
                entry.last_attempt = Some(now);
                entry.flight = Some(Flight {
                    token,
                    started: now,
                    waiters: vec![waiter],
                });
                out.push(LookupAction::Call {
                    app: app.to_string(),
                    token,
                    deadline: call_timeout,
                });
            }
        }
        out
    }

    /// The registry call `token` for `app` came back at `now`. The result is
    /// stored first; then every waiter of the flight is answered from the
    /// entry. A result that is not the current flight's is dropped.
    pub fn on_result(
        &mut self,
        app: &str,
        token: Token,
        result: Result<Listing, RegistryError>,
        now: Instant,
    ) -> Vec<LookupAction> {
        let mut out = Vec::new();
        let Some(entry) = self.entries.get_mut(app) else {
            return out;
        };
        if entry.flight.as_ref().map(|f| f.token) != Some(token) {
            return out;
        }
        let flight = entry.flight.take().expect("checked");
        match result {
            Ok(listing) => {
                let base = if listing.instances.is_empty() {
                    self.config.negative_ttl
                } else {
                    self.config.ttl
                };
                let ttl = jittered(base, self.config.ttl_jitter, &mut self.rng);
                // A listing older than the copy held (a lagging member) does
                // not roll it back; the registry answered, so the copy is
                // confirmed.
                let keep = entry
                    .stored
                    .take()
                    .filter(|s| s.listing.version > listing.version)
                    .map(|s| s.listing);
                entry.stored = Some(Stored {
                    listing: keep.unwrap_or(listing),
                    confirmed: now,
                    expires: now.checked_add(ttl).unwrap_or(now),
                });
                entry.last_error = None;
                let s = entry.stored.as_ref().expect("stored above");
                for waiter in flight.waiters {
                    let result = answer(app, &s.listing, Freshness::Fresh, Source::Registry);
                    out.push(LookupAction::Answer { waiter, result });
                }
            }
            Err(e) => {
                entry.last_error = Some(e);
                for waiter in flight.waiters {
                    let result = fallback(app, entry, &self.config, now);
                    out.push(LookupAction::Answer { waiter, result });
                }
            }
        }
        out
    }

    /// Ends every flight: each waiter is answered [`LookupError::ShutDown`].
    pub fn close(&mut self) -> Vec<LookupAction> {
        let mut out = Vec::new();
        for entry in self.entries.values_mut() {
            for waiter in entry.flight.take().into_iter().flat_map(|f| f.waiters) {
                let result = Err(LookupError::ShutDown);
                out.push(LookupAction::Answer { waiter, result });
            }
        }
        out
    }

    fn touch(&mut self, app: &str) {
        self.tick = self.tick.wrapping_add(1);
        let tick = self.tick;
        if let Some(e) = self.entries.get_mut(app) {
            self.order.remove(&e.used);
            e.used = tick;
            self.order.insert(tick, app.to_string());
        }
    }

    /// Drops least recently queried idle apps until one more fits.
    fn make_room(&mut self, out: &mut Vec<LookupAction>) {
        while self.entries.len() >= self.config.capacity.max(1) {
            let victim = self
                .order
                .iter()
                .find(|(_, app)| self.entries.get(*app).is_some_and(|e| e.flight.is_none()))
                .map(|(tick, app)| (*tick, app.clone()));
            let Some((tick, app)) = victim else {
                return; // every app held has a call in flight
            };
            self.order.remove(&tick);
            self.entries.remove(&app);
            out.push(LookupAction::Evicted { app });
        }
    }
}

/// `base` spread uniformly over ±`jitter` of it (at most
/// [`MAX_LOOKUP_TTL_JITTER`]; a NaN or negative jitter spreads nothing).
fn jittered(base: Duration, jitter: f64, rng: &mut StdRng) -> Duration {
    // Not `min`: it would turn a NaN into the maximum.
    let j = if jitter > MAX_LOOKUP_TTL_JITTER {
        MAX_LOOKUP_TTL_JITTER
    } else {
        jitter
    };
    crate::jitter::spread_around(base, j, rng)
}

/// The answer a listing gives.
fn answer(
    app: &str,
    listing: &Listing,
    freshness: Freshness,
    source: Source,
) -> Result<InstancesAnswer, LookupError> {
    if listing.instances.is_empty() {
        return Err(LookupError::NotFound {
            app: app.to_string(),
            freshness,
        });
    }
    Ok(InstancesAnswer {
        instances: listing.instances.clone(),
        version: listing.version,
        freshness,
        source,
    })
}

/// What a caller gets when the registry cannot confirm `app` now: the copy
/// held, stale with its age (within `max_staleness`), or the error.
fn fallback(
    app: &str,
    entry: &Entry,
    config: &LookupConfig,
    now: Instant,
) -> Result<InstancesAnswer, LookupError> {
    let Some(s) = &entry.stored else {
        return Err(LookupError::Unavailable {
            app: app.to_string(),
            cause: entry
                .last_error
                .clone()
                .unwrap_or(RegistryError::Unavailable("no answer".into())),
        });
    };
    let age = now.saturating_duration_since(s.confirmed);
    if let Some(max) = config.max_staleness.filter(|m| age > *m) {
        return Err(LookupError::TooStale {
            app: app.to_string(),
            age,
            max_staleness: max,
            cause: entry.last_error.clone(),
        });
    }
    answer(app, &s.listing, Freshness::Stale { age }, Source::Cache)
}
