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

use thiserror::Error;

use crate::config::EngineConfig;

/// Why an environment variable was refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
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
    /// A variable that must be set is not.
    #[error("{var} is not set: {what}")]
    Missing {
        /// The variable.
        var: &'static str,
        /// What it gives.
        what: &'static str,
    },
}

/// What an engine variable takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Takes {
    /// A humantime duration (`5s`, `250ms`).
    Duration,
    /// A duration, or `off` / `none` / `never` (the field's `None`).
    DurationOrOff,
    /// A whole number.
    Number,
    /// A whole number, or `off` (the field's `None`).
    NumberOrOff,
    /// A balancing strategy name (`round_robin`, `weighted_random`,
    /// `least_in_flight`, `peak_ewma`; `-` for `_` accepted).
    Strategy,
    /// A filesystem path.
    Path,
}

/// One engine variable: its name, the [`EngineConfig`] field it sets (its
/// path in the serde tree, e.g. `caller.tombstone_ttl`) and what it takes.
/// The value lands in the config through the config's own serde shape, so
/// a variable can only set what a config document can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub var: &'static str,
    /// The field's path in the config document.
    pub field: &'static str,
    /// What the variable takes.
    pub takes: Takes,
}

const fn var(var: &'static str, field: &'static str, takes: Takes) -> EnvVar {
    EnvVar { var, field, takes }
}

/// Every variable [`EngineConfig::from_env`] reads: the one mapping from
/// the environment to the config.
pub const ENGINE_VARS: &[EnvVar] = &[
    var("STEADFAST_FETCH_TIMEOUT", "fetch_timeout", Takes::Duration),
    var(
        "STEADFAST_FETCH_HEDGE_DELAY",
        "fetch_hedge_delay",
        Takes::Duration,
    ),
    var("STEADFAST_FETCH_FANOUT", "fetch_fanout", Takes::Number),
    var(
        "STEADFAST_FETCH_RETRY_CALLS",
        "fetch_retry_calls",
        Takes::Number,
    ),
    var(
        "STEADFAST_METADATA_MAX_ATTEMPTS",
        "metadata_max_attempts",
        Takes::NumberOrOff,
    ),
    var("STEADFAST_CACHE_CAPACITY", "cache_capacity", Takes::Number),
    var(
        "STEADFAST_REGISTRY_CALL_TIMEOUT",
        "registry_call_timeout",
        Takes::Duration,
    ),
    var(
        "STEADFAST_REGISTRY_PROBE_INTERVAL",
        "registry_probe_interval",
        Takes::DurationOrOff,
    ),
    var(
        "STEADFAST_RECONCILE_INTERVAL",
        "reconcile_interval",
        Takes::Duration,
    ),
    var(
        "STEADFAST_MASS_REMOVAL_GRACE",
        "mass_removal_grace",
        Takes::Duration,
    ),
    var(
        "STEADFAST_SESSION_SPREAD",
        "session_spread",
        Takes::Duration,
    ),
    var(
        "STEADFAST_SHUTDOWN_TIMEOUT",
        "shutdown_timeout",
        Takes::Duration,
    ),
    var("STEADFAST_SEED", "seed", Takes::Number),
    var("STEADFAST_STRATEGY", "caller.strategy", Takes::Strategy),
    var(
        "STEADFAST_TOMBSTONE_TTL",
        "caller.tombstone_ttl",
        Takes::Duration,
    ),
    var(
        "STEADFAST_UNSUBSCRIBE_LINGER",
        "caller.unsubscribe_linger",
        Takes::DurationOrOff,
    ),
    var("STEADFAST_LOOKUP_TTL", "lookup.ttl", Takes::Duration),
    var("STEADFAST_SNAPSHOT_DIR", "snapshot.dir", Takes::Path),
    var(
        "STEADFAST_SNAPSHOT_MAX_AGE",
        "snapshot.max_age",
        Takes::Duration,
    ),
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

impl Takes {
    /// What a refused value should have been, for the error.
    fn expected(self) -> &'static str {
        match self {
            Takes::Duration => "a duration such as 5s or 250ms",
            Takes::DurationOrOff => "a duration such as 5s, or off",
            Takes::Number => "a whole number in range",
            Takes::NumberOrOff => "a whole number in range, or off",
            Takes::Strategy => "round_robin, weighted_random, least_in_flight or peak_ewma",
            Takes::Path => "a path",
        }
    }

    /// The value as the config document holds it (`None`: refused).
    fn document(self, value: &str) -> Option<serde_json::Value> {
        use serde_json::Value;
        let v = value.trim();
        match self {
            Takes::DurationOrOff | Takes::NumberOrOff if is_off(v) => Some(Value::Null),
            Takes::Duration | Takes::DurationOrOff => humantime::parse_duration(v)
                .ok()
                .map(|_| Value::String(v.to_string())),
            Takes::Number | Takes::NumberOrOff => v.parse::<u64>().ok().map(Value::from),
            Takes::Strategy => Some(Value::String(v.to_ascii_lowercase().replace('-', "_"))),
            Takes::Path => Some(Value::String(value.to_string())),
        }
    }
}

impl EngineConfig {
    /// The defaults with every `STEADFAST_*` engine variable of the process
    /// environment applied (see [`ENGINE_VARS`](crate::ENGINE_VARS) for the names).
    pub fn from_env() -> Result<Self, EnvError> {
        Self::default().apply_env(&EnvVars::new(|k| std::env::var(k).ok()))
    }

    /// `self` with every variable `vars` holds applied on top: each value
    /// is put at its field's path in the config document ([`ENGINE_VARS`])
    /// and read back through the config's serde shape, so a value the
    /// document would refuse (out of range, unknown name) is refused here.
    pub fn apply_env<F: Fn(&str) -> Option<String>>(
        self,
        vars: &EnvVars<F>,
    ) -> Result<Self, EnvError> {
        let mut config = self;
        for v in ENGINE_VARS {
            let Some(value) = vars.string(v.var) else {
                continue;
            };
            let refused = || EnvError::Invalid {
                var: v.var,
                value: value.clone(),
                expected: v.takes.expected(),
            };
            let patch = v.takes.document(&value).ok_or_else(refused)?;
            let mut tree = serde_json::to_value(&config).map_err(|_| refused())?;
            let slot = v
                .field
                .split('.')
                .try_fold(&mut tree, |node, key| node.get_mut(key))
                .ok_or_else(refused)?;
            *slot = patch;
            config = serde_json::from_value(tree).map_err(|_| refused())?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests;
