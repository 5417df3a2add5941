//! Dubbo records on etcd in Java's and Go's spellings (the interop notes'
//! layouts) read as Steadfast instances; broken ones are typed errors.

use steadfast_core::DubboRecordError;

use crate::records::KeyLayout;

use super::*;

const KEY: &[u8] = b"/services/greeter/10.0.0.7:20880";

fn layout() -> KeyLayout {
    KeyLayout::new("")
}

/// Java's Gson of `DefaultServiceInstance` (dubbo-registry-etcd3).
const JAVA: &str = r#"{"serviceName":"greeter","host":"10.0.0.7","port":20880,"enabled":true,"healthy":true,
 "metadata":{"dubbo.metadata.revision":"871fbc9cb2730caea9b0d858852d5ede","dubbo.metadata.storage-type":"local",
 "dubbo.endpoints":"[{\"port\":50052,\"protocol\":\"tri\"}]",
 "dubbo.metadata-service.url-params":"{\"port\":\"50052\",\"protocol\":\"tri\",\"version\":\"1.0.0\"}",
 "meta-v":"2.0.0","timestamp":"1674960780647"}}"#;

/// dubbo-go's untagged struct, with the embedded MetadataInfo it writes.
const GO: &str = r#"{"ID":"10.0.0.7:20880","ServiceName":"greeter","Host":"10.0.0.7","Port":20880,"Weight":0,
 "Enable":true,"Healthy":true,"Metadata":{"dubbo.metadata.revision":"9673005772",
 "dubbo.metadata-service.url-params":"{\"port\":\"20000\",\"protocol\":\"tri\"}","meta-v":"2.0.0"},
 "ServiceMetadata":{"app":"greeter","revision":"9673005772","services":{}},
 "Address":"10.0.0.7:20880","GroupName":"","Tag":""}"#;

#[test]
fn a_java_record_reads_with_revision_port_and_incarnation() {
    let i = layout()
        .decode_instance("greeter", KEY, JAVA.as_bytes())
        .unwrap();
    assert_eq!(
        (i.id.as_str(), i.host.as_str(), i.port),
        ("10.0.0.7:20880", "10.0.0.7", 20880)
    );
    assert_eq!(i.revision(), Some("871fbc9cb2730caea9b0d858852d5ede"));
    assert_eq!(i.metadata_port(), 50052);
    assert_eq!(i.weight, 100);
    assert!(i.is_serving());
    assert_eq!(i.incarnation().unwrap().export_ms, 1_674_960_780_647);
}

#[test]
fn a_go_record_reads_and_weight_zero_is_the_default() {
    let i = layout()
        .decode_instance("greeter", KEY, GO.as_bytes())
        .unwrap();
    assert_eq!(i.revision(), Some("9673005772"));
    assert_eq!((i.metadata_port(), i.weight), (20000, 100));
    assert!(i.is_serving());
}

#[test]
fn a_disabled_java_instance_is_not_serving() {
    let v = JAVA.replace("\"enabled\":true", "\"enabled\":false");
    let i = layout()
        .decode_instance("greeter", KEY, v.as_bytes())
        .unwrap();
    assert!(!i.is_serving());
}

#[test]
fn broken_dubbo_records_are_typed_errors() {
    let foreign = JAVA.replace("\"serviceName\":\"greeter\"", "\"serviceName\":\"other\"");
    assert!(matches!(
        layout().decode_instance("greeter", KEY, foreign.as_bytes()),
        Err(InvalidRecord::ForeignApp { .. })
    ));
    let port = JAVA.replace("\"port\":20880", "\"port\":70000");
    assert!(matches!(
        layout().decode_instance("greeter", KEY, port.as_bytes()),
        Err(InvalidRecord::BadJson { .. })
    ));
    let params = JAVA.replace(r#"{\"port\":\"50052\""#, r#"[{\"port\":\"50052\""#);
    let err = layout()
        .decode_instance("greeter", KEY, params.as_bytes())
        .unwrap_err();
    assert!(matches!(
        err,
        InvalidRecord::Dubbo {
            source: DubboRecordError::MetadataParams(_),
            ..
        }
    ));
    assert!(std::error::Error::source(&err).is_some());
    // Not JSON at all, and not a Dubbo record: Steadfast's own error.
    assert!(matches!(
        layout().decode_instance("greeter", KEY, b"{\"x\":1}"),
        Err(InvalidRecord::BadJson { .. })
    ));
}

#[test]
fn a_dubbo_export_is_written_for_java_go_and_steadfast_readers() {
    let mut inst = ServiceInstance::new("greeter", "10.0.0.7", 20880);
    inst.set_revision("871fbc9cb2730caea9b0d858852d5ede");
    inst.metadata.insert("meta-v".into(), "2.0.0".into());
    inst.metadata.insert(
        "dubbo.metadata-service.url-params".into(),
        r#"{"port":"50052","protocol":"tri"}"#.into(),
    );
    let bytes = encode(&inst).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["serviceName"], "greeter");
    assert_eq!(
        (json["enabled"].as_bool(), json["enable"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(
        json["metadata"]["dubbo.metadata.revision"],
        "871fbc9cb2730caea9b0d858852d5ede"
    );
    assert_eq!(json["metadata"]["dubbo.metadata.storage-type"], "local");
    // Steadfast reads it as its own record.
    let back = layout().decode_instance("greeter", KEY, &bytes).unwrap();
    assert_eq!(back.revision(), inst.revision());
    assert_eq!(back.metadata_port(), inst.metadata_port());
    // Java's Gson fields alone read as a Dubbo record.
    let java: serde_json::Value = [
        "serviceName",
        "host",
        "port",
        "enabled",
        "healthy",
        "metadata",
    ]
    .iter()
    .map(|k| (k.to_string(), json[*k].clone()))
    .collect::<serde_json::Map<_, _>>()
    .into();
    let i = layout()
        .decode_instance("greeter", KEY, java.to_string().as_bytes())
        .unwrap();
    assert_eq!(i.revision(), inst.revision());
    assert_eq!(i.metadata_port(), 50052);
    // A record not exported for Dubbo is Steadfast's JSON as it is.
    let plain = ServiceInstance::new("greeter", "10.0.0.7", 20880);
    assert_eq!(encode(&plain).unwrap(), serde_json::to_vec(&plain).unwrap());
}
