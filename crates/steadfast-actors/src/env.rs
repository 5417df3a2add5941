//! [`EngineConfig::from_env`]: engine settings from `STEADFAST_*`
//! environment variables, with typed errors ([`EnvError`]).
//!
//! Every variable is optional; an unset or empty one keeps the value it
//! overrides. Durations are humantime strings (`5s`, `250ms`, `2m`); an
//! optional duration also takes `off` (no probe / never). The variables
//! ([`ENGINE_VARS`]):
//!
//! | variable | field | default |
//! |---|---|---|
//! | `STEADFAST_FETCH_TIMEOUT` | `fetch_timeout` | 5s |
//! | `STEADFAST_FETCH_HEDGE_DELAY` | `fetch_hedge_delay` | 250ms |
//! | `STEADFAST_FETCH_FANOUT` | `fetch_fanout` | 16 |
//! | `STEADFAST_FETCH_RETRY_CALLS` | `fetch_retry_calls` | 2 |
//! | `STEADFAST_METADATA_MAX_ATTEMPTS` | `metadata_max_attempts` (`off`: unlimited) | off |
//! | `STEADFAST_CACHE_CAPACITY` | `cache_capacity` | 1024 |
//! | `STEADFAST_REGISTRY_CALL_TIMEOUT` | `registry_call_timeout` | 5s |
//! | `STEADFAST_REGISTRY_PROBE_INTERVAL` | `registry_probe_interval` (`off`: none) | 1s |
//! | `STEADFAST_RECONCILE_INTERVAL` | `reconcile_interval` | 5m |
//! | `STEADFAST_MASS_REMOVAL_GRACE` | `mass_removal_grace` | 3s |
//! | `STEADFAST_SESSION_SPREAD` | `session_spread` | 5s |
//! | `STEADFAST_SHUTDOWN_TIMEOUT` | `shutdown_timeout` | 15s |
//! | `STEADFAST_SEED` | `seed` | random |
//! | `STEADFAST_STRATEGY` | `caller.strategy` (`round_robin`, `weighted_random`, `least_in_flight`, `peak_ewma`) | peak_ewma |
//! | `STEADFAST_TOMBSTONE_TTL` | `caller.tombstone_ttl` | 30s |
//! | `STEADFAST_UNSUBSCRIBE_LINGER` | `caller.unsubscribe_linger` (`off`: never) | 30s |
//! | `STEADFAST_LOOKUP_TTL` | `lookup.ttl` | 60s |
//! | `STEADFAST_SNAPSHOT_DIR` | `snapshot.dir` | none |
//! | `STEADFAST_SNAPSHOT_MAX_AGE` | `snapshot.max_age` | 24h |
//!
//! The values are only parsed here; [`EngineConfig::validate`] (run by
//! `start()`) checks their ranges.

use std::str::FromStr;
use std::time::Duration;

use steadfast_core::balance::Strategy;
use thiserror::Error;

use crate::config::EngineConfig;

/// Why an environment variable was refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum EnvError {
    /// The variable holds a value of the wrong shape.
    #[error("{var}={value:?} is not {expected}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it should hold.
        expected: &'static str,
    },
}

/// Every variable [`EngineConfig::from_env`] reads, with its meaning.
pub const ENGINE_VARS: &[(&str, &str)] = &[
    ("STEADFAST_FETCH_TIMEOUT", "fetch_timeout (duration)"),
    (
        "STEADFAST_FETCH_HEDGE_DELAY",
        "fetch_hedge_delay (duration)",
    ),
    ("STEADFAST_FETCH_FANOUT", "fetch_fanout (count)"),
    ("STEADFAST_FETCH_RETRY_CALLS", "fetch_retry_calls (count)"),
    (
        "STEADFAST_METADATA_MAX_ATTEMPTS",
        "metadata_max_attempts (count or off)",
    ),
    ("STEADFAST_CACHE_CAPACITY", "cache_capacity (count)"),
    (
        "STEADFAST_REGISTRY_CALL_TIMEOUT",
        "registry_call_timeout (duration)",
    ),
    (
        "STEADFAST_REGISTRY_PROBE_INTERVAL",
        "registry_probe_interval (duration or off)",
    ),
    (
        "STEADFAST_RECONCILE_INTERVAL",
        "reconcile_interval (duration)",
    ),
    (
        "STEADFAST_MASS_REMOVAL_GRACE",
        "mass_removal_grace (duration)",
    ),
    ("STEADFAST_SESSION_SPREAD", "session_spread (duration)"),
    ("STEADFAST_SHUTDOWN_TIMEOUT", "shutdown_timeout (duration)"),
    ("STEADFAST_SEED", "seed (u64)"),
    ("STEADFAST_STRATEGY", "caller.strategy (name)"),
    ("STEADFAST_TOMBSTONE_TTL", "caller.tombstone_ttl (duration)"),
    (
        "STEADFAST_UNSUBSCRIBE_LINGER",
        "caller.unsubscribe_linger (duration or off)",
    ),
    ("STEADFAST_LOOKUP_TTL", "lookup.ttl (duration)"),
    ("STEADFAST_SNAPSHOT_DIR", "snapshot.dir (path)"),
    ("STEADFAST_SNAPSHOT_MAX_AGE", "snapshot.max_age (duration)"),
];

/// Reads variables through a lookup function (`std::env::var` in
/// production, a map in tests) and parses them with typed errors.
pub struct EnvVars<F> {
    lookup: F,
}

impl<F: Fn(&str) -> Option<String>> EnvVars<F> {
    /// Reads through `lookup`.
    pub fn new(lookup: F) -> Self {
        Self { lookup }
    }

    /// The variable's value, `None` when unset or empty (blank).
    pub fn string(&self, var: &'static str) -> Option<String> {
        (self.lookup)(var).filter(|v| !v.trim().is_empty())
    }

    /// A humantime duration (`5s`, `250ms`).
    pub fn duration(&self, var: &'static str) -> Result<Option<Duration>, EnvError> {
        self.string(var)
            .map(|value| {
                humantime::parse_duration(value.trim()).map_err(|_| EnvError::Invalid {
                    var,
                    value,
                    expected: "a duration such as 5s or 250ms",
                })
            })
            .transpose()
    }

    /// A duration or `off`: `Some(None)` for `off`.
    pub fn optional_duration(
        &self,
        var: &'static str,
    ) -> Result<Option<Option<Duration>>, EnvError> {
        match self.string(var) {
            Some(v) if is_off(&v) => Ok(Some(None)),
            Some(_) => self.duration(var).map(|d| d.map(Some)),
            None => Ok(None),
        }
    }

    /// A number (`FromStr`), e.g. a count or a seed.
    pub fn number<T: FromStr>(&self, var: &'static str) -> Result<Option<T>, EnvError> {
        self.string(var)
            .map(|value| {
                value.trim().parse().map_err(|_| EnvError::Invalid {
                    var,
                    value,
                    expected: "a whole number in range",
                })
            })
            .transpose()
    }

    /// A number or `off`: `Some(None)` for `off`.
    pub fn optional_number<T: FromStr>(
        &self,
        var: &'static str,
    ) -> Result<Option<Option<T>>, EnvError> {
        match self.string(var) {
            Some(v) if is_off(&v) => Ok(Some(None)),
            Some(_) => self.number(var).map(|n| n.map(Some)),
            None => Ok(None),
        }
    }
}

fn is_off(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "off" | "none" | "never"
    )
}

fn strategy(var: &'static str, value: String) -> Result<Strategy, EnvError> {
    let name = value.trim().to_ascii_lowercase().replace('-', "_");
    Strategy::ALL
        .into_iter()
        .find(|s| strategy_name(*s) == name)
        .ok_or(EnvError::Invalid {
            var,
            value,
            expected: "round_robin, weighted_random, least_in_flight or peak_ewma",
        })
}

fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::RoundRobin => "round_robin",
        Strategy::WeightedRandom => "weighted_random",
        Strategy::LeastInFlight => "least_in_flight",
        Strategy::PeakEwma => "peak_ewma",
    }
}

impl EngineConfig {
    /// The defaults with every `STEADFAST_*` engine variable of the process
    /// environment applied (see [`crate::env`] for the names).
    pub fn from_env() -> Result<Self, EnvError> {
        Self::default().apply_env(&EnvVars::new(|k| std::env::var(k).ok()))
    }

    /// `self` with every variable `vars` holds applied on top.
    pub fn apply_env<F: Fn(&str) -> Option<String>>(
        mut self,
        vars: &EnvVars<F>,
    ) -> Result<Self, EnvError> {
        let durations: [(&'static str, &mut Duration); 10] = [
            ("STEADFAST_FETCH_TIMEOUT", &mut self.fetch_timeout),
            ("STEADFAST_FETCH_HEDGE_DELAY", &mut self.fetch_hedge_delay),
            (
                "STEADFAST_REGISTRY_CALL_TIMEOUT",
                &mut self.registry_call_timeout,
            ),
            ("STEADFAST_RECONCILE_INTERVAL", &mut self.reconcile_interval),
            ("STEADFAST_MASS_REMOVAL_GRACE", &mut self.mass_removal_grace),
            ("STEADFAST_SESSION_SPREAD", &mut self.session_spread),
            ("STEADFAST_SHUTDOWN_TIMEOUT", &mut self.shutdown_timeout),
            ("STEADFAST_TOMBSTONE_TTL", &mut self.caller.tombstone_ttl),
            ("STEADFAST_LOOKUP_TTL", &mut self.lookup.ttl),
            ("STEADFAST_SNAPSHOT_MAX_AGE", &mut self.snapshot.max_age),
        ];
        for (var, slot) in durations {
            if let Some(d) = vars.duration(var)? {
                *slot = d;
            }
        }
        for (var, slot) in [
            ("STEADFAST_FETCH_FANOUT", &mut self.fetch_fanout),
            ("STEADFAST_FETCH_RETRY_CALLS", &mut self.fetch_retry_calls),
            ("STEADFAST_CACHE_CAPACITY", &mut self.cache_capacity),
        ] {
            if let Some(n) = vars.number(var)? {
                *slot = n;
            }
        }
        if let Some(p) = vars.optional_duration("STEADFAST_REGISTRY_PROBE_INTERVAL")? {
            self.registry_probe_interval = p;
        }
        if let Some(l) = vars.optional_duration("STEADFAST_UNSUBSCRIBE_LINGER")? {
            self.caller.unsubscribe_linger = l;
        }
        if let Some(n) = vars.optional_number("STEADFAST_METADATA_MAX_ATTEMPTS")? {
            self.metadata_max_attempts = n;
        }
        if let Some(seed) = vars.number("STEADFAST_SEED")? {
            self.seed = seed;
        }
        if let Some(value) = vars.string("STEADFAST_STRATEGY") {
            self.caller.strategy = strategy("STEADFAST_STRATEGY", value)?;
        }
        if let Some(dir) = vars.string("STEADFAST_SNAPSHOT_DIR") {
            self.snapshot.dir = Some(dir.into());
        }
        Ok(self)
    }
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
