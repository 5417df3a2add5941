//! Captured Dubbo records (Java on ZooKeeper, Go on Nacos, from the interop
//! notes) read as Steadfast instances; broken embedded JSON is a typed
//! error; no input panics.

use proptest::prelude::*;

use super::*;
use crate::model::ServiceInstance;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The metadata of a real Java 3.1.4 provider's record (dubbo-website).
fn java_3_1_4() -> BTreeMap<String, String> {
    map(&[
        ("dubbo.endpoints", r#"[{"port":20880,"protocol":"dubbo"}]"#),
        (
            "dubbo.metadata-service.url-params",
            r#"{"connections":"1","version":"1.0.0","dubbo":"2.0.2","release":"3.1.4","side":"provider","port":"20880","protocol":"dubbo"}"#,
        ),
        (
            "dubbo.metadata.revision",
            "871fbc9cb2730caea9b0d858852d5ede",
        ),
        ("dubbo.metadata.storage-type", "local"),
        ("timestamp", "1674960780647"),
    ])
}

/// The metadata of a real dubbo-go provider on Nacos (apache/dubbo-go#2939).
fn go_on_nacos() -> BTreeMap<String, String> {
    map(&[
        (
            "dubbo.metadata-service.url-params",
            r#"{"group":"test-demo","port":"28001","protocol":"dubbo","release":"3.2.0","serialization":"hessian2","version":"1.0.0"}"#,
        ),
        ("dubbo.subscribed-services.revision", "0"),
        (
            "dubbo.endpoints",
            r#"[{"port":21001,"protocol":"tri"},{"port":28001,"protocol":"dubbo"}]"#,
        ),
        ("dubbo.metadata.revision", "10527924560"),
        ("dubbo.metadata.storage-type", "local"),
        ("id", ""),
        ("meta-v", "2.0.0"),
    ])
}

#[test]
fn a_java_record_gives_revision_metadata_port_and_incarnation() {
    let mut inst = ServiceInstance::new("first-dubbo-provider", "30.221.146.35", 20880);
    inst.metadata = java_3_1_4();
    adopt_dubbo_metadata(&mut inst.metadata).unwrap();
    assert_eq!(inst.revision(), Some("871fbc9cb2730caea9b0d858852d5ede"));
    assert_eq!(inst.metadata_port(), 20880);
    let inc = inst.incarnation().expect("timestamp is the incarnation");
    assert_eq!(inc.export_ms, 1_674_960_780_647);
    let service = metadata_service(&inst.metadata).unwrap().unwrap();
    assert_eq!(
        (service.protocol.as_str(), service.port),
        ("dubbo", Some(20880))
    );
    assert_eq!(
        dubbo_endpoints(&inst.metadata).unwrap(),
        vec![DubboEndpoint {
            protocol: "dubbo".into(),
            port: 20880
        }]
    );
}

#[test]
fn a_restart_is_a_later_incarnation() {
    let mut first = java_3_1_4();
    adopt_dubbo_metadata(&mut first).unwrap();
    let mut second = java_3_1_4();
    second.insert("timestamp".into(), "1674960999999".into());
    adopt_dubbo_metadata(&mut second).unwrap();
    let (a, b) = (
        crate::Incarnation::from_metadata(&first).unwrap(),
        crate::Incarnation::from_metadata(&second).unwrap(),
    );
    assert!(b.export_ms > a.export_ms);
    assert_ne!(a.boot_id, b.boot_id);
}

#[test]
fn a_go_record_on_nacos_reads_with_both_endpoints() {
    let mut m = go_on_nacos();
    adopt_dubbo_metadata(&mut m).unwrap();
    assert_eq!(m.get(REVISION_KEY).map(String::as_str), Some("10527924560"));
    assert_eq!(m.get(METADATA_PORT_KEY).map(String::as_str), Some("28001"));
    assert_eq!(dubbo_endpoints(&m).unwrap().len(), 2);
    assert_eq!(
        m.get(DUBBO_META_VERSION_KEY).map(String::as_str),
        Some(META_V2)
    );
    // Go writes no timestamp: no incarnation.
    assert!(crate::Incarnation::from_metadata(&m).is_none());
}

#[test]
fn a_no_services_revision_is_not_a_revision() {
    let mut inst = ServiceInstance::new("a", "h", 1);
    inst.metadata = map(&[("dubbo.metadata.revision", "0")]);
    adopt_dubbo_metadata(&mut inst.metadata).unwrap();
    assert_eq!(inst.revision(), None);
}

#[test]
fn steadfast_keys_win_and_a_plain_map_is_untouched() {
    let mut m = map(&[
        ("steadfast.metadata.port", "9000"),
        (
            "dubbo.metadata-service.url-params",
            r#"{"port":"1","protocol":"tri"}"#,
        ),
    ]);
    adopt_dubbo_metadata(&mut m).unwrap();
    assert_eq!(m.get(METADATA_PORT_KEY).map(String::as_str), Some("9000"));
    let mut plain = map(&[("steadfast.metadata.revision", "r"), ("x", "y")]);
    let before = plain.clone();
    adopt_dubbo_metadata(&mut plain).unwrap();
    assert_eq!(plain, before);
}

#[test]
fn writing_then_adopting_gives_the_map_back() {
    let mut m = map(&[("steadfast.metadata.revision", "r1"), ("k", "v")]);
    dubbo_metadata(&mut m);
    assert_eq!(m.get(DUBBO_REVISION_KEY).map(String::as_str), Some("r1"));
    assert_eq!(m.get(DUBBO_STORAGE_KEY).map(String::as_str), Some("local"));
    adopt_dubbo_metadata(&mut m).unwrap();
    assert_eq!(m.get(REVISION_KEY).map(String::as_str), Some("r1"));
}

#[test]
fn broken_embedded_metadata_is_a_typed_error() {
    type Case = (&'static str, &'static str, fn(&DubboRecordError) -> bool);
    let cases: [Case; 7] = [
        ("dubbo.endpoints", "not json", |e| {
            matches!(e, DubboRecordError::Endpoints(_))
        }),
        ("dubbo.endpoints", r#"[{"port":1}]"#, |e| {
            matches!(e, DubboRecordError::Endpoints(_))
        }),
        (
            "dubbo.endpoints",
            r#"[{"port":70000,"protocol":"tri"}]"#,
            |e| matches!(e, DubboRecordError::Port { .. }),
        ),
        ("dubbo.metadata-service.url-params", "[]", |e| {
            matches!(e, DubboRecordError::MetadataParams(_))
        }),
        (
            "dubbo.metadata-service.url-params",
            r#"{"port":"-1"}"#,
            |e| matches!(e, DubboRecordError::Port { .. }),
        ),
        (
            "dubbo.metadata-service.url-params",
            r#"{"a":{"b":1}}"#,
            |e| matches!(e, DubboRecordError::MetadataParams(_)),
        ),
        ("dubbo.metadata.storage-type", "cloud", |e| {
            matches!(e, DubboRecordError::StorageType(_))
        }),
    ];
    for (key, value, is) in cases {
        let mut m = java_3_1_4();
        m.insert(key.into(), value.into());
        let err = adopt_dubbo_metadata(&mut m).unwrap_err();
        assert!(is(&err), "{key}={value}: {err:?}");
        assert!(!err.to_string().is_empty());
    }
}

proptest! {
    /// No map, however hostile, panics the reader or its `Display`.
    #[test]
    fn any_metadata_reads_without_panic(
        entries in proptest::collection::btree_map(
            prop_oneof![
                Just(DUBBO_ENDPOINTS_KEY.to_string()),
                Just(DUBBO_METADATA_PARAMS_KEY.to_string()),
                Just(DUBBO_REVISION_KEY.to_string()),
                Just(DUBBO_STORAGE_KEY.to_string()),
                Just(DUBBO_TIMESTAMP_KEY.to_string()),
                ".{0,8}",
            ],
            prop_oneof![
                ".{0,40}",
                Just(r#"[{"port":"9","protocol":"tri"}]"#.to_string()),
                Just(r#"{"port":99999999999999999999,"protocol":"tri"}"#.to_string()),
                "[\\[\\]{}\":,0-9a-z]{0,30}",
            ],
            0..6,
        )
    ) {
        let mut m = entries;
        if let Err(e) = adopt_dubbo_metadata(&mut m) {
            let _ = e.to_string();
        }
        let _ = dubbo_endpoints(&m);
        let _ = metadata_service(&m);
    }
}

/// A remote report as dubbo-go writes it (notes §3: `tag`,
/// `lastUpdatedTime`, absent group and version as `""`, keyed by its own
/// match key) reads as the service a plain reference matches; Java's
/// (null fields omitted) too; bad JSON and another revision are typed.
#[test]
fn remote_reports_of_go_and_java_read_as_steadfast_metadata() {
    use crate::{decode_report, FetchError};
    let go = br#"{"app":"shop","revision":"1234","tag":"","lastUpdatedTime":"2026-01-01",
        "services":{"demo.Greeter:tri":{"name":"demo.Greeter","group":"","version":"",
        "protocol":"tri","port":20000,"path":"demo.Greeter","params":{"Greet.timeout":"3000"}}}}"#;
    let info = decode_report("shop", "1234", go).unwrap();
    let s = &info.services["demo.Greeter:tri"];
    assert_eq!((s.group.as_deref(), s.version.as_deref()), (None, None));
    assert_eq!(s.match_key(), "demo.Greeter:tri");

    let java = br#"{"app":"shop","revision":"77","services":{"g1/demo.Greeter:1.0:tri":{
        "name":"demo.Greeter","group":"g1","version":"1.0","protocol":"tri","port":20000,
        "path":"demo.Greeter","params":{"methods":"Greet"}}}}"#;
    let info = decode_report("shop", "77", java).unwrap();
    let s = info.services.values().next().unwrap();
    assert_eq!(info.services.keys().next(), Some(&s.match_key()));
    assert_eq!(s.group.as_deref(), Some("g1"));

    assert!(matches!(
        decode_report("shop", "1234", b"{not json"),
        Err(FetchError::Malformed(_))
    ));
    assert!(matches!(
        decode_report("shop", "9999", go),
        Err(FetchError::Mismatch { .. })
    ));
}

proptest! {
    /// No content, however hostile, panics the report reader or the
    /// `Display` of its error.
    #[test]
    fn any_report_content_reads_without_panic(
        content in proptest::collection::vec(any::<u8>(), 0..256),
        app in ".{0,8}",
    ) {
        if let Err(e) = crate::decode_report(&app, "r", &content) {
            let _ = e.to_string();
        }
    }
}
