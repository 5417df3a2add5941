//! Engine configuration with the defaults a production consumer wants.

use std::time::Duration;

use steadfast_core::DEFAULT_PROBE_INTERVAL;
use steadfast_core::{
    BackoffError, BackoffPolicy, FetchPolicy, LookupConfig, RecoverPolicy, SubscriptionConfig,
    MAX_BACKOFF,
};
use thiserror::Error;

/// Tunables of one engine.
///
/// Deserializes (serde) from any format with every field optional: a
/// missing field takes its default, an unknown one is refused, durations
/// are humantime strings (`"5s"`, `"250ms"`, `"5m"`). The values are
/// checked by [`EngineConfig::validate`] (at `start()`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Retry schedule of unresolved metadata revisions (per revision).
    pub backoff: BackoffPolicy,
    /// Re-subscribe schedule of failed registry watches.
    pub registry_backoff: BackoffPolicy,
    /// Fetch attempts per revision before giving up (`None`: unlimited, the
    /// default — every transient fault heals on its own).
    pub metadata_max_attempts: Option<u32>,
    /// Revisions kept in the shared metadata cache.
    pub cache_capacity: usize,
    /// Deadline of one whole metadata fetch of a revision (default 5 s):
    /// every candidate instance it tries, hedged ones included, answers by
    /// then or counts as a timeout, and the fetch reports its failure then.
    #[serde(with = "humantime_serde")]
    pub fetch_timeout: Duration,
    /// Deadline of every registry or publisher call the engine makes: the
    /// subscription's watch open and list, and each call of an export
    /// (register, closing announcement, unregister, publish, withdraw).
    /// Default 5 s.
    #[serde(with = "humantime_serde")]
    pub registry_call_timeout: Duration,
    /// Longest `Engine::shutdown` waits for exports to announce closing and
    /// unregister before it stops every actor anyway. Default 15 s.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// A fetch with no answer after this long starts its remaining
    /// candidates in parallel (default 250 ms).
    #[serde(with = "humantime_serde")]
    pub fetch_hedge_delay: Duration,
    /// Candidate instances the first fetch of a revision may try (default 16).
    pub fetch_fanout: usize,
    /// Candidate instances each retry of a revision may try (default 2).
    pub fetch_retry_calls: usize,
    /// Seed of every random choice (jitter, endpoint selection).
    pub seed: u64,
    /// While the registry is down, one cheap probe (`list`) this often for
    /// the subscriptions (one per engine) and one for the registrations
    /// (while one waits), so the watch is re-opened and the registrations
    /// are made as soon as the registry answers instead of after the grown
    /// `registry_backoff` (default 1 s, jittered like the backoff; `None`:
    /// no probe).
    #[serde(with = "humantime_serde")]
    pub registry_probe_interval: Option<Duration>,
    /// Full re-read of every subscribed app, applying what the watch missed
    /// (default 5 min, jittered ±20 %; zero: only on resume after an outage).
    #[serde(with = "humantime_serde")]
    pub reconcile_interval: Duration,
    /// How long instances removed in a mass expiry right after a registry
    /// recovery are still served while their providers re-register
    /// (default 3 s; zero: never held).
    #[serde(with = "humantime_serde")]
    pub mass_removal_grace: Duration,
    /// Caller-side settings (tombstones, probes, handle lifetimes); the
    /// engine's copy can be replaced at run time with
    /// [`Engine::set_caller_config`](crate::Engine::set_caller_config).
    pub caller: crate::live_config::CallerConfig,
    /// The lookup cache of one-shot queries (`Engine::instances`) of apps
    /// the engine does not watch: TTL 60 s ±10 %, negative answers 5 s, no
    /// max staleness, at most one registry call per app per 5 s, 1024 apps.
    pub lookup: LookupConfig,
    /// Disk snapshots of the subscribed apps for cold starts (default: no
    /// directory, nothing written).
    pub snapshot: crate::snapshot_config::SnapshotConfig,
    /// Window over which a registry session loss spreads the
    /// re-registrations and re-subscriptions, each at a uniform random
    /// delay within it (default 5 s; zero: all at once).
    #[serde(with = "humantime_serde")]
    pub session_spread: Duration,
}

impl EngineConfig {
    /// The registry subscription machine's configuration.
    pub fn subscription(&self) -> SubscriptionConfig {
        let mut recover = RecoverPolicy::new(self.registry_backoff);
        if let Some(probe) = self.registry_probe_interval.filter(|p| !p.is_zero()) {
            recover = recover.with_probe(probe);
        }
        SubscriptionConfig {
            recover,
            reconcile_interval: self.reconcile_interval,
            mass_removal_grace: self.mass_removal_grace,
            call_timeout: self.registry_call_timeout,
        }
    }
}

impl EngineConfig {
    /// The failback registrar's configuration: the registry backoff
    /// (unlimited) with the registry probe, the registry call deadline and
    /// the session spread.
    pub fn registrar(&self) -> steadfast_core::RegistrarConfig {
        steadfast_core::RegistrarConfig {
            recover: self.subscription().recover,
            call_timeout: self.registry_call_timeout,
            session_spread: self.session_spread,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            backoff: BackoffPolicy::default(),
            registry_backoff: BackoffPolicy::default(),
            metadata_max_attempts: None,
            cache_capacity: 1024,
            fetch_timeout: Duration::from_secs(5),
            registry_call_timeout: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(15),
            fetch_hedge_delay: Duration::from_millis(250),
            fetch_fanout: 16,
            fetch_retry_calls: 2,
            seed: rand::random(),
            registry_probe_interval: Some(DEFAULT_PROBE_INTERVAL),
            reconcile_interval: Duration::from_secs(300),
            mass_removal_grace: Duration::from_secs(3),
            caller: Default::default(),
            lookup: LookupConfig::default(),
            snapshot: Default::default(),
            session_spread: steadfast_core::DEFAULT_SESSION_SPREAD,
        }
    }
}

impl EngineConfig {
    /// The fetch budget these settings give: their deadline, hedge delay and
    /// budgets; a failed revision's next fetch counts as a retry for 5 min,
    /// or twice the backoff cap when that is longer.
    pub fn fetch_policy(&self) -> FetchPolicy {
        let d = FetchPolicy::default();
        FetchPolicy {
            deadline: self.fetch_timeout,
            hedge_delay: self.fetch_hedge_delay,
            fanout: self.fetch_fanout,
            retry_calls: self.fetch_retry_calls,
            revision_memory: d.revision_memory.max(self.backoff.cap().saturating_mul(2)),
            ..d
        }
    }
}

/// Why an [`EngineConfig`] was refused at `start()`.
#[derive(Clone, Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A backoff policy makes no sense (zero start, cap below start or over
    /// a day, bad multiplier or jitter).
    #[error("invalid {field}")]
    Backoff {
        /// The config field.
        field: &'static str,
        /// What is wrong with it.
        #[source]
        source: BackoffError,
    },
    /// A duration is zero (where zero makes no sense) or longer than a day.
    #[error(
        "{field} must be at most one day (and above zero where zero would spin), got {value:?}"
    )]
    Duration {
        /// The config field.
        field: &'static str,
        /// The value given.
        value: Duration,
    },
    /// A count must be at least one.
    #[error("{field} must be at least 1")]
    Zero {
        /// The config field.
        field: &'static str,
    },
    /// A size is out of its range.
    #[error("{field} must be in {min}..={max}, got {value}")]
    Size {
        /// The config field.
        field: &'static str,
        /// The value given.
        value: usize,
        /// The lowest value allowed.
        min: usize,
        /// The highest value allowed.
        max: usize,
    },
    /// A percentage is out of its range.
    #[error("{field} must be a percentage in {min}..=100, got {value}")]
    Percent {
        /// The config field.
        field: &'static str,
        /// The lowest value allowed.
        min: u8,
        /// The value given.
        value: u8,
    },
    /// A fraction is out of its range.
    #[error("{field} must be a fraction in 0..={max}, got {value}")]
    Fraction {
        /// The config field.
        field: &'static str,
        /// The largest value allowed.
        max: f64,
        /// The value given.
        value: f64,
    },
}

impl EngineConfig {
    /// Checks every value: backoff policies (see
    /// [`BackoffPolicy::validate`]), durations above zero and at most a day,
    /// counts at least one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, policy) in [
            ("backoff", &self.backoff),
            ("registry_backoff", &self.registry_backoff),
        ] {
            policy
                .validate()
                .map_err(|source| ConfigError::Backoff { field, source })?;
        }
        for (field, value) in [
            ("fetch_timeout", self.fetch_timeout),
            ("registry_call_timeout", self.registry_call_timeout),
            ("shutdown_timeout", self.shutdown_timeout),
        ] {
            check_duration(field, value)?;
        }
        if let Some(probe) = self.registry_probe_interval {
            check_duration("registry_probe_interval", probe)?;
        }
        // Zero is meaningful for these (hedge at once, resync only on
        // resume, never hold, no tombstone veto); only an absurd length is
        // refused.
        for (field, value) in [
            ("fetch_hedge_delay", self.fetch_hedge_delay),
            ("reconcile_interval", self.reconcile_interval),
            ("mass_removal_grace", self.mass_removal_grace),
            ("caller.tombstone_ttl", self.caller.tombstone_ttl),
            ("session_spread", self.session_spread),
        ] {
            if value > MAX_BACKOFF {
                return Err(ConfigError::Duration { field, value });
            }
        }
        for (field, n) in [
            ("cache_capacity", self.cache_capacity),
            ("fetch_fanout", self.fetch_fanout),
            ("fetch_retry_calls", self.fetch_retry_calls),
        ] {
            if n == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        self.validate_balance()?;
        self.validate_lookup()?;
        if self.metadata_max_attempts == Some(0) {
            return Err(ConfigError::Zero {
                field: "metadata_max_attempts",
            });
        }
        check_duration("caller.min_probe_interval", self.caller.min_probe_interval)?;
        self.snapshot.validate()?;
        // Zero: unsubscribe as soon as the last handle drops.
        if let Some(linger) = self.caller.unsubscribe_linger {
            if linger > MAX_BACKOFF {
                return Err(ConfigError::Duration {
                    field: "caller.unsubscribe_linger",
                    value: linger,
                });
            }
        }
        Ok(())
    }
}

impl EngineConfig {
    /// Checks the balancing settings of `caller`: durations above zero and
    /// at most a day, `max_ejection_time >= base_ejection_time`,
    /// percentages in range.
    fn validate_balance(&self) -> Result<(), ConfigError> {
        let (p, o) = (&self.caller.peak_ewma, &self.caller.outlier);
        for (field, value) in [
            ("caller.peak_ewma.default_rtt", p.default_rtt),
            ("caller.peak_ewma.decay", p.decay),
            ("caller.outlier.base_ejection_time", o.base_ejection_time),
            ("caller.outlier.max_ejection_time", o.max_ejection_time),
        ] {
            check_duration(field, value)?;
        }
        if p.failure_penalty > MAX_BACKOFF {
            let (field, value) = ("caller.peak_ewma.failure_penalty", p.failure_penalty);
            return Err(ConfigError::Duration { field, value });
        }
        if o.max_ejection_time < o.base_ejection_time {
            let (field, value) = ("caller.outlier.max_ejection_time", o.max_ejection_time);
            return Err(ConfigError::Duration { field, value });
        }
        let percent = |field, min, value: u8| match value {
            v if (min..=100).contains(&v) => Ok(()),
            value => Err(ConfigError::Percent { field, min, value }),
        };
        percent(
            "caller.outlier.max_ejection_percent",
            0,
            o.max_ejection_percent,
        )?;
        if let Some(rate) = &o.failure_rate {
            percent("caller.outlier.failure_rate.percent", 1, rate.percent)?;
            check_duration("caller.outlier.failure_rate.window", rate.window)?;
        }
        Ok(())
    }
}

impl EngineConfig {
    /// Checks the lookup cache settings: TTL and retry interval above zero
    /// and at most a day, negative TTL and max staleness at most a day
    /// (zero: negatives not cached, stale copies never served), jitter a
    /// fraction in `0..=0.5`, capacity at least one.
    fn validate_lookup(&self) -> Result<(), ConfigError> {
        let l = &self.lookup;
        check_duration("lookup.ttl", l.ttl)?;
        check_duration("lookup.min_retry_interval", l.min_retry_interval)?;
        for (field, value) in [
            ("lookup.negative_ttl", Some(l.negative_ttl)),
            ("lookup.max_staleness", l.max_staleness),
        ] {
            if let Some(value) = value.filter(|v| *v > MAX_BACKOFF) {
                return Err(ConfigError::Duration { field, value });
            }
        }
        let max = steadfast_core::MAX_LOOKUP_TTL_JITTER;
        if !(0.0..=max).contains(&l.ttl_jitter) {
            let (field, value) = ("lookup.ttl_jitter", l.ttl_jitter);
            return Err(ConfigError::Fraction { field, max, value });
        }
        if l.capacity == 0 {
            return Err(ConfigError::Zero {
                field: "lookup.capacity",
            });
        }
        Ok(())
    }
}

/// A duration the engine waits on: above zero, at most [`MAX_BACKOFF`].
pub(crate) fn check_duration(field: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() || value > MAX_BACKOFF {
        return Err(ConfigError::Duration { field, value });
    }
    Ok(())
}

#[cfg(test)]
mod serde_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn defaults_are_valid_and_absurd_values_are_refused_with_their_field() {
        assert_eq!(EngineConfig::default().validate(), Ok(()));
        let mut c = EngineConfig::default();
        c.backoff.max = Duration::MAX;
        let e = c.validate().unwrap_err();
        assert!(matches!(
            e,
            ConfigError::Backoff {
                field: "backoff",
                ..
            }
        ));
        assert!(e.source().is_some(), "the cause is kept");
        let mut c = EngineConfig::default();
        c.registry_backoff.jitter = f64::NAN;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Backoff {
                field: "registry_backoff",
                ..
            })
        ));
        let c = EngineConfig {
            fetch_timeout: Duration::ZERO,
            ..EngineConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err(ConfigError::Duration {
                field: "fetch_timeout",
                value: Duration::ZERO
            })
        );
        let mut c = EngineConfig::default();
        c.caller.outlier.max_ejection_percent = 101;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Percent {
                field: "caller.outlier.max_ejection_percent",
                min: 0,
                value: 101
            })
        );
        let mut c = EngineConfig::default();
        c.caller.peak_ewma.decay = Duration::ZERO;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Duration {
                field: "caller.peak_ewma.decay",
                ..
            })
        ));
        let c = EngineConfig {
            cache_capacity: 0,
            ..EngineConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err(ConfigError::Zero {
                field: "cache_capacity"
            })
        );
    }

    #[test]
    fn lookup_settings_are_checked() {
        let mut c = EngineConfig::default();
        c.lookup.ttl = Duration::ZERO;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Duration {
                field: "lookup.ttl",
                ..
            })
        ));
        let mut c = EngineConfig::default();
        c.lookup.ttl_jitter = f64::NAN;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Fraction {
                field: "lookup.ttl_jitter",
                ..
            })
        ));
        c.lookup.ttl_jitter = 0.6;
        assert!(c.validate().is_err());
        let mut c = EngineConfig::default();
        c.lookup.capacity = 0;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Zero {
                field: "lookup.capacity"
            })
        );
        let mut c = EngineConfig::default();
        c.lookup.max_staleness = Some(Duration::MAX);
        assert!(c.validate().is_err());
        c.lookup.max_staleness = Some(Duration::ZERO);
        c.lookup.negative_ttl = Duration::ZERO;
        assert_eq!(c.validate(), Ok(()), "zero: never stale, no negatives");
        c.lookup.min_retry_interval = Duration::ZERO;
        assert!(c.validate().is_err(), "a zero throttle would stampede");
    }

    #[test]
    fn caller_probe_interval_and_linger_are_checked() {
        let mut c = EngineConfig::default();
        c.caller.min_probe_interval = Duration::ZERO;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Duration {
                field: "caller.min_probe_interval",
                ..
            })
        ));
        let mut c = EngineConfig::default();
        c.caller.unsubscribe_linger = Some(Duration::ZERO);
        assert_eq!(c.validate(), Ok(()), "zero linger: at once");
        c.caller.unsubscribe_linger = None;
        assert_eq!(c.validate(), Ok(()), "no linger: never");
        c.caller.unsubscribe_linger = Some(Duration::MAX);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Duration {
                field: "caller.unsubscribe_linger",
                ..
            })
        ));
    }
}
