//! The Dubbo-layout record codec, both ways, and hostile records.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use steadfast_core::{ServiceInstance, DUBBO_REVISION_KEY, DUBBO_STORAGE_KEY, REVISION_KEY};

use super::*;

#[test]
fn a_steadfast_instance_round_trips_in_dubbo_layout() {
    let mut inst = ServiceInstance::new("greeter", "10.0.0.5", 8080);
    inst.set_revision("r1");
    inst.metadata
        .insert("steadfast.export-ms".into(), "123".into());
    let record = encode(&inst);
    assert_eq!(
        record.metadata.get(DUBBO_REVISION_KEY).map(String::as_str),
        Some("r1")
    );
    assert_eq!(
        record.metadata.get(DUBBO_STORAGE_KEY).map(String::as_str),
        Some("local")
    );
    assert!(!record.metadata.contains_key(REVISION_KEY));
    assert!((record.weight - 1.0).abs() < f64::EPSILON);
    let back = decode("greeter", &serde_json::to_string(&record).unwrap()).unwrap();
    // What Dubbo needs stays on the way back; nothing else changed.
    let mut expected = inst.clone();
    expected
        .metadata
        .insert(DUBBO_STORAGE_KEY.into(), "local".into());
    assert_eq!(back, expected);
}

#[test]
fn a_dubbo_providers_record_reads_as_an_instance() {
    let host = serde_json::json!({
        "instanceId": "10.0.0.5#20880", "ip": "10.0.0.5", "port": 20880, "weight": 1.0,
        "healthy": true, "enabled": true, "ephemeral": true, "clusterName": "DEFAULT",
        "serviceName": "DEFAULT_GROUP@@greeter",
        "metadata": { "dubbo.metadata.revision": "871fbc9c", "dubbo.metadata.storage-type": "local",
                      "timestamp": "1674960780647", "meta-v": "2.0.0" }
    });
    let i = decode("greeter", &host.to_string()).unwrap();
    assert_eq!(
        (i.id.as_str(), i.port, i.weight),
        ("10.0.0.5:20880", 20880, 100)
    );
    assert_eq!(i.revision(), Some("871fbc9c"));
    assert_eq!(
        i.metadata.get("steadfast.export-ms").map(String::as_str),
        Some("1674960780647")
    );
}

#[test]
fn hostile_records_are_typed_errors() {
    let base = serde_json::json!({ "ip": "h", "port": 1, "weight": 1.0, "healthy": true,
                                   "enabled": true, "ephemeral": true, "metadata": {} });
    let with = |k: &str, v: serde_json::Value| {
        let mut h = base.clone();
        h[k] = v;
        decode("a", &h.to_string())
    };
    assert_eq!(with("port", 0.into()), Err(InvalidInstance::Port(0)));
    assert_eq!(
        with("port", 70000.into()),
        Err(InvalidInstance::Port(70000))
    );
    assert_eq!(with("port", (-1).into()), Err(InvalidInstance::Port(-1)));
    assert_eq!(with("weight", (-1.0).into()), Err(InvalidInstance::Weight));
    assert_eq!(with("ip", "".into()), Err(InvalidInstance::Ip));
    assert!(matches!(
        with("metadata", 5.into()),
        Err(InvalidInstance::Shape(_))
    ));
    assert!(matches!(
        decode("a", "[1, 2]"),
        Err(InvalidInstance::Shape(_))
    ));
    assert_eq!(with("weight", 1e300.into()).unwrap().weight, u32::MAX);
}

/// Random JSON values never panic the decoder, and whatever it accepts
/// encodes and decodes to itself.
#[test]
fn random_records_never_panic() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let strings = [
        "",
        "h",
        "10.0.0.1",
        "\u{0}",
        "é",
        "a@@b",
        "#",
        "dubbo.metadata.revision",
    ];
    for _ in 0..20_000 {
        let mut value = serde_json::json!({});
        for key in [
            "ip",
            "port",
            "weight",
            "healthy",
            "enabled",
            "metadata",
            "instanceId",
        ] {
            if rng.gen_bool(0.8) {
                value[key] = match rng.gen_range(0..6) {
                    0 => rng.gen::<i64>().into(),
                    1 => rng.gen_range(-2i64..70_000).into(),
                    2 => (rng.gen::<f64>() * 1e6 - 10.0).into(),
                    3 => strings[rng.gen_range(0..strings.len())].into(),
                    4 => rng.gen::<bool>().into(),
                    _ => serde_json::json!({ strings[rng.gen_range(0..strings.len())]: "v" }),
                };
            }
        }
        if let Ok(i) = decode("app", &value.to_string()) {
            let again = decode("app", &serde_json::to_string(&encode(&i)).unwrap()).unwrap();
            assert_eq!(again.id, i.id);
            assert_eq!(again.metadata, i.metadata);
        }
    }
}
