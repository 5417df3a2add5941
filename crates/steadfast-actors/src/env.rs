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
    /// Any text (a key prefix, a URL, a user name).
    Text,
    /// A secret (a password): never echoed in an error.
    Secret,
    /// A PEM file's path, set as the field's `{ "file": path }` source.
    PemFile,
}

/// One variable: its name, the config field it sets (its path in the serde
/// document, e.g. `caller.tombstone_ttl`) and what it takes. The value lands
/// in the config through the config's own serde shape
/// ([`EnvVars::apply`]), so a variable can only set what a config document
/// can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub var: &'static str,
    /// The field's path in the config document.
    pub field: &'static str,
    /// What the variable takes.
    pub takes: Takes,
}

impl EnvVar {
    /// Variable `var` sets `field` and takes `takes`.
    pub const fn new(var: &'static str, field: &'static str, takes: Takes) -> Self {
        Self { var, field, takes }
    }
}

const fn var(var: &'static str, field: &'static str, takes: Takes) -> EnvVar {
    EnvVar::new(var, field, takes)
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
            Takes::Path | Takes::PemFile => "a path",
            Takes::Text => "a value the config accepts",
            Takes::Secret => "a secret the config accepts (a password needs its user)",
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
            Takes::Path | Takes::Text | Takes::Secret => Some(Value::String(value.to_string())),
            Takes::PemFile => Some(serde_json::json!({ "file": value })),
        }
    }
}

impl EngineConfig {
    /// The defaults with every `STEADFAST_*` engine variable of the process
    /// environment applied (see [`ENGINE_VARS`](crate::ENGINE_VARS) for the names).
    pub fn from_env() -> Result<Self, EnvError> {
        Self::default().apply_env(&EnvVars::new(|k| std::env::var(k).ok()))
    }

    /// `self` with every variable `vars` holds applied on top
    /// ([`ENGINE_VARS`], through [`EnvVars::apply`]).
    pub fn apply_env<F: Fn(&str) -> Option<String>>(
        self,
        vars: &EnvVars<F>,
    ) -> Result<Self, EnvError> {
        let document = serde_json::to_value(&self).map_err(|_| EnvError::Invalid {
            var: "STEADFAST_CONFIG",
            value: String::new(),
            expected: "an engine config that serializes",
        })?;
        vars.apply(document, &[("", ENGINE_VARS)])
    }
}

impl<F: Fn(&str) -> Option<String>> EnvVars<F> {
    /// Reads `document` as a `T` after putting every variable of `tables`
    /// that is set at its field's path (below the table's prefix, `""` for
    /// the root), in table order. Each value is checked as it lands, so a
    /// value the document would refuse (out of range, unknown name, wrong
    /// shape) is refused naming its variable; a [`Takes::Secret`] value is
    /// never echoed. This is the one mapping from the environment to a
    /// config: the engine's and the facade's variables both go through it.
    pub fn apply<T: serde::de::DeserializeOwned>(
        &self,
        mut document: serde_json::Value,
        tables: &[(&str, &[EnvVar])],
    ) -> Result<T, EnvError> {
        let check = |document: &serde_json::Value| {
            serde_json::from_value::<T>(document.clone()).map_err(|_| ())
        };
        for (prefix, table) in tables {
            for v in *table {
                let Some(value) = self.string(v.var) else {
                    continue;
                };
                let refused = || EnvError::Invalid {
                    var: v.var,
                    value: match v.takes {
                        Takes::Secret => steadfast_core::REDACTED.to_string(),
                        _ => value.clone(),
                    },
                    expected: v.takes.expected(),
                };
                let patch = v.takes.document(&value).ok_or_else(refused)?;
                let path = prefix
                    .split('.')
                    .chain(v.field.split('.'))
                    .filter(|k| !k.is_empty());
                *slot(&mut document, path) = patch;
                check(&document).map_err(|()| refused())?;
            }
        }
        serde_json::from_value(document).map_err(|_| EnvError::Invalid {
            var: "STEADFAST_CONFIG",
            value: String::new(),
            expected: "a valid config document",
        })
    }
}

/// The node at `path` in `document`, made (as empty objects, over a `null`
/// or any non-object on the way) where missing.
fn slot<'d, 'k>(
    document: &'d mut serde_json::Value,
    path: impl Iterator<Item = &'k str>,
) -> &'d mut serde_json::Value {
    let mut node = document;
    for key in path {
        if !node.is_object() {
            *node = serde_json::Value::Object(Default::default());
        }
        node = match node {
            serde_json::Value::Object(map) => map.entry(key).or_insert(serde_json::Value::Null),
            other => other,
        };
    }
    node
}

#[cfg(test)]
mod tests;
