//! Tests of `EngineConfig::from_env` through a map (the process environment
//! is shared by every test thread).

use std::collections::HashMap;
use std::time::Duration;

use super::*;
use steadfast_core::Strategy;

fn vars(pairs: &[(&str, &str)]) -> EnvVars<impl Fn(&str) -> Option<String>> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    EnvVars::new(move |k: &str| map.get(k).cloned())
}

#[test]
fn every_documented_variable_lands_in_its_field() {
    let c = EngineConfig::default()
        .apply_env(&vars(&[
            ("STEADFAST_FETCH_TIMEOUT", "2s"),
            ("STEADFAST_FETCH_HEDGE_DELAY", "100ms"),
            ("STEADFAST_FETCH_FANOUT", "4"),
            ("STEADFAST_FETCH_RETRY_CALLS", "3"),
            ("STEADFAST_METADATA_MAX_ATTEMPTS", "7"),
            ("STEADFAST_CACHE_CAPACITY", "64"),
            ("STEADFAST_REGISTRY_CALL_TIMEOUT", "1500ms"),
            ("STEADFAST_REGISTRY_PROBE_INTERVAL", "off"),
            ("STEADFAST_RECONCILE_INTERVAL", "1m"),
            ("STEADFAST_MASS_REMOVAL_GRACE", "0s"),
            ("STEADFAST_SESSION_SPREAD", "1s"),
            ("STEADFAST_SHUTDOWN_TIMEOUT", "3s"),
            ("STEADFAST_SEED", "42"),
            ("STEADFAST_STRATEGY", "round-robin"),
            ("STEADFAST_TOMBSTONE_TTL", "10s"),
            ("STEADFAST_UNSUBSCRIBE_LINGER", "never"),
            ("STEADFAST_LOOKUP_TTL", "30s"),
            ("STEADFAST_SNAPSHOT_DIR", "/tmp/sf"),
        ]))
        .unwrap();
    assert_eq!(c.fetch_timeout, Duration::from_secs(2));
    assert_eq!(c.fetch_hedge_delay, Duration::from_millis(100));
    assert_eq!((c.fetch_fanout, c.fetch_retry_calls), (4, 3));
    assert_eq!(c.metadata_max_attempts, Some(7));
    assert_eq!(c.cache_capacity, 64);
    assert_eq!(c.registry_call_timeout, Duration::from_millis(1500));
    assert_eq!(c.registry_probe_interval, None);
    assert_eq!(c.reconcile_interval, Duration::from_secs(60));
    assert_eq!(c.mass_removal_grace, Duration::ZERO);
    assert_eq!(c.session_spread, Duration::from_secs(1));
    assert_eq!(c.shutdown_timeout, Duration::from_secs(3));
    assert_eq!(c.seed, 42);
    assert_eq!(c.caller.strategy, Strategy::RoundRobin);
    assert_eq!(c.caller.tombstone_ttl, Duration::from_secs(10));
    assert_eq!(c.caller.unsubscribe_linger, None);
    assert_eq!(c.lookup.ttl, Duration::from_secs(30));
    assert_eq!(
        c.snapshot.dir.as_deref(),
        Some(std::path::Path::new("/tmp/sf"))
    );
    assert_eq!(c.validate(), Ok(()));
    for v in ENGINE_VARS {
        assert!(
            include_str!("../env.rs").contains(&format!("| `{}` | `{}`", v.var, v.field)),
            "{} is documented in the module table with its field",
            v.var
        );
    }
}

#[test]
fn unset_and_empty_variables_keep_the_defaults() {
    let d = EngineConfig::default();
    let c = d
        .clone()
        .apply_env(&vars(&[("STEADFAST_FETCH_TIMEOUT", " ")]))
        .unwrap();
    assert_eq!(c.fetch_timeout, d.fetch_timeout);
    assert_eq!(c.seed, d.seed);
    assert_eq!(c.registry_probe_interval, d.registry_probe_interval);
}

#[test]
fn a_malformed_value_is_refused_naming_its_variable() {
    let e = EngineConfig::default()
        .apply_env(&vars(&[("STEADFAST_FETCH_TIMEOUT", "soon")]))
        .unwrap_err();
    assert!(matches!(
        &e,
        EnvError::Invalid { var: "STEADFAST_FETCH_TIMEOUT", value, .. } if value == "soon"
    ));
    assert!(e.to_string().contains("STEADFAST_FETCH_TIMEOUT"));
    let e = EngineConfig::default()
        .apply_env(&vars(&[("STEADFAST_FETCH_FANOUT", "-1")]))
        .unwrap_err();
    assert!(matches!(
        e,
        EnvError::Invalid {
            var: "STEADFAST_FETCH_FANOUT",
            ..
        }
    ));
    let e = EngineConfig::default()
        .apply_env(&vars(&[("STEADFAST_STRATEGY", "fastest")]))
        .unwrap_err();
    assert!(matches!(
        e,
        EnvError::Invalid {
            var: "STEADFAST_STRATEGY",
            ..
        }
    ));
    // A number the field's type cannot hold: the config's serde shape
    // refuses it (metadata_max_attempts is a u32).
    let e = EngineConfig::default()
        .apply_env(&vars(&[("STEADFAST_METADATA_MAX_ATTEMPTS", "5000000000")]))
        .unwrap_err();
    assert!(matches!(
        e,
        EnvError::Invalid {
            var: "STEADFAST_METADATA_MAX_ATTEMPTS",
            ..
        }
    ));
    // Parsed but out of range: validate (at start) refuses it.
    let c = EngineConfig::default()
        .apply_env(&vars(&[("STEADFAST_FETCH_TIMEOUT", "0s")]))
        .unwrap();
    assert!(c.validate().is_err());
}
