//! Answers of every shape convert to MetadataInfo or to the typed error
//! the retry scheduler needs; ports follow Dubbo's consumer rule.

use std::collections::HashMap;

use proptest::prelude::*;
use steadfast_core::ErrorClass;

use super::*;

fn instance() -> ServiceInstance {
    let mut i = ServiceInstance::new("greeter", "10.0.0.7", 20880);
    i.metadata.insert(
        "dubbo.endpoints".into(),
        r#"[{"port":50052,"protocol":"tri"},{"port":20880,"protocol":"dubbo"}]"#.into(),
    );
    i
}

fn v2(port: i32) -> MetadataInfoV2 {
    let service = ServiceInfoV2 {
        name: "org.example.Greeter".into(),
        protocol: "tri".into(),
        port,
        path: "org.example.Greeter".into(),
        params: HashMap::from([("methods".to_string(), "sayHi".to_string())]),
        ..Default::default()
    };
    MetadataInfoV2 {
        app: "greeter".into(),
        version: "r1".into(),
        services: HashMap::from([("org.example.Greeter:tri".to_string(), service)]),
    }
}

#[test]
fn a_java_answer_converts_with_its_service_port() {
    let info = from_v2(v2(50051), &instance(), "r1").unwrap();
    let s = &info.services["org.example.Greeter:tri"];
    assert_eq!(
        (s.port, s.path.as_str(), s.group.as_ref()),
        (50051, "org.example.Greeter", None)
    );
    assert_eq!(s.params["methods"], "sayHi");
}

#[test]
fn a_service_without_a_port_keeps_port_zero_for_each_instance_to_derive() {
    let info = from_v2(v2(-1), &instance(), "r1").unwrap();
    assert_eq!(info.services["org.example.Greeter:tri"].port, 0);
}

#[test]
fn null_and_other_revisions_are_not_served_and_retried() {
    for answer in [MetadataInfoV2::default(), {
        let mut a = v2(1);
        a.version = "r0".into();
        a
    }] {
        let err = from_v2(answer, &instance(), "r1").unwrap_err();
        assert!(matches!(err, FetchError::UnknownRevision(_)), "{err:?}");
        assert_eq!(err.class(), ErrorClass::Transient);
    }
}

#[test]
fn another_app_and_impossible_services_are_final() {
    let mut other = v2(1);
    other.app = "db".into();
    assert!(matches!(
        from_v2(other, &instance(), "r1"),
        Err(FetchError::Mismatch { .. })
    ));
    let mut big = v2(70000);
    assert!(matches!(
        from_v2(big.clone(), &instance(), "r1"),
        Err(FetchError::Malformed(_))
    ));
    big.services.values_mut().for_each(|s| {
        s.port = 1;
        s.protocol.clear();
    });
    assert!(matches!(
        from_v2(big, &instance(), "r1"),
        Err(FetchError::Malformed(_))
    ));
}

#[test]
fn steadfast_metadata_survives_the_round_trip() {
    let service = ServiceInfo::builder("org.example.Greeter", 50051)
        .protocol("tri")
        .path("org.example.Greeter")
        .group("g")
        .version("1.0.0")
        .param("timeout", "3000")
        .build();
    let info = MetadataInfo::new("greeter", [service]);
    let back = from_v2(to_v2(&info), &instance(), &info.revision).unwrap();
    assert_eq!(back, info);
}

proptest! {
    /// No answer panics the conversion or the error's Display.
    #[test]
    fn any_answer_converts_without_panic(
        app in prop_oneof![Just("greeter".to_string()), ".{0,6}"],
        version in prop_oneof![Just("r1".to_string()), ".{0,6}"],
        port in any::<i32>(),
        name in ".{0,6}",
        protocol in ".{0,4}",
    ) {
        let mut a = v2(port);
        a.app = app;
        a.version = version;
        a.services.values_mut().for_each(|s| { s.name = name.clone(); s.protocol = protocol.clone(); });
        if let Err(e) = from_v2(a, &instance(), "r1") {
            let _ = e.to_string();
        }
    }
}
