//! `EngineConfig` from a config file: humantime durations, defaults for
//! missing fields, unknown fields refused, typed validation afterwards.

use std::time::Duration;

use steadfast_core::Strategy;

use super::*;

#[test]
fn a_partial_document_takes_the_defaults_for_the_rest() {
    let c: EngineConfig = serde_json::from_str(
        r#"{
            "fetch_timeout": "2s",
            "registry_probe_interval": null,
            "backoff": { "initial": "250ms", "max": "10s" },
            "caller": { "strategy": "round_robin", "outlier": { "base_ejection_time": "5s" } },
            "lookup": { "ttl": "30s", "max_staleness": "1h" },
            "snapshot": { "dir": "/var/lib/steadfast" },
            "seed": 7
        }"#,
    )
    .unwrap();
    let d = EngineConfig::default();
    assert_eq!(c.fetch_timeout, Duration::from_secs(2));
    assert_eq!(c.registry_probe_interval, None);
    assert_eq!(c.backoff.initial, Duration::from_millis(250));
    assert_eq!(c.backoff.max, Duration::from_secs(10));
    assert_eq!(c.backoff.multiplier, d.backoff.multiplier, "default kept");
    assert_eq!(c.caller.strategy, Strategy::RoundRobin);
    assert_eq!(c.caller.outlier.base_ejection_time, Duration::from_secs(5));
    assert_eq!(
        c.caller.outlier.max_ejection_time,
        d.caller.outlier.max_ejection_time
    );
    assert_eq!(c.lookup.ttl, Duration::from_secs(30));
    assert_eq!(c.lookup.max_staleness, Some(Duration::from_secs(3600)));
    assert_eq!(
        c.snapshot.dir.as_deref(),
        Some("/var/lib/steadfast".as_ref())
    );
    assert_eq!(c.snapshot.max_age, d.snapshot.max_age);
    assert_eq!(c.seed, 7);
    assert_eq!(c.cache_capacity, d.cache_capacity);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn it_serializes_back_to_the_same_settings() {
    let c = EngineConfig {
        seed: 3,
        ..EngineConfig::default()
    };
    let text = serde_json::to_string(&c).unwrap();
    assert!(text.contains(r#""fetch_timeout":"5s""#), "{text}");
    let back: EngineConfig = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
}

#[test]
fn typos_and_bad_shapes_are_refused_and_bad_values_fail_validation() {
    assert!(serde_json::from_str::<EngineConfig>(r#"{"fetch_timout":"2s"}"#).is_err());
    assert!(serde_json::from_str::<EngineConfig>(r#"{"fetch_timeout":"fast"}"#).is_err());
    assert!(serde_json::from_str::<EngineConfig>(r#"{"fetch_timeout":5}"#).is_err());
    assert!(serde_json::from_str::<EngineConfig>(r#"{"caller":{"strategy":"fastest"}}"#).is_err());
    let c: EngineConfig = serde_json::from_str(r#"{"fetch_fanout":0}"#).unwrap();
    assert_eq!(
        c.validate(),
        Err(ConfigError::Zero {
            field: "fetch_fanout"
        })
    );
    let c: EngineConfig = serde_json::from_str(r#"{"registry_backoff":{"initial":"0s"}}"#).unwrap();
    assert!(matches!(
        c.validate(),
        Err(ConfigError::Backoff {
            field: "registry_backoff",
            ..
        })
    ));
}
