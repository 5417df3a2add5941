//! Unit tests of the client's endpoint handling, without etcd.

use super::*;

#[test]
fn endpoints_are_normalised_and_an_empty_list_is_refused() {
    let t = Duration::from_secs(1);
    assert_eq!(
        EtcdClient::new(vec![], t, t).unwrap_err(),
        GatewayError::NoEndpoints
    );
    let c = EtcdClient::new(vec!["http://a:1/".into(), "".into()], t, t).unwrap();
    assert_eq!(c.endpoints(), ["http://a:1".to_string()]);
    assert_eq!(c.current_endpoint(), "http://a:1");
}

#[tokio::test]
async fn one_pass_over_dead_endpoints_then_unreachable() {
    let ports = crate::harness::free_ports(2).unwrap();
    let eps = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let c = EtcdClient::new(eps, Duration::from_secs(1), Duration::from_secs(1)).unwrap();
    let started = std::time::Instant::now();
    match c.range_prefix(b"/x/").await {
        Err(GatewayError::Unreachable { endpoint, .. }) => {
            assert_eq!(endpoint, format!("http://127.0.0.1:{}", ports[1]));
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(
        c.watch(b"/x/", 0, false).await,
        Err(GatewayError::Unreachable { .. })
    ));
}

/// A client holding a live token, and a registry over it: neither their
/// `Debug` nor the config's `Debug` / `Serialize` shows the password, the
/// token or an inline private key.
#[test]
fn debug_of_a_client_holding_a_token_shows_no_secret() {
    let tls = crate::EtcdTls::default().with_client_identity_pem(
        "-----BEGIN CERTIFICATE-----\nCERTBODY\n-----END CERTIFICATE-----",
        "-----BEGIN PRIVATE KEY-----\nKEYBODY\n-----END PRIVATE KEY-----",
    );
    let config = crate::EtcdConfig {
        tls: Some(tls),
        ..crate::EtcdConfig::new(["http://127.0.0.1:1"]).with_auth("svc", "pw-s3cret")
    };
    // The PEM above is not a real identity: build the client without
    // it, then install a token the way an authenticate answer does.
    let plain = crate::EtcdConfig {
        tls: None,
        ..config.clone()
    };
    let client = EtcdClient::from_config(&plain).unwrap();
    client
        .auth
        .as_ref()
        .unwrap()
        .install("ZNZXlivetoken.42".into());
    let client = std::sync::Arc::new(client);
    let registry = crate::EtcdRegistry::with_client(client.clone(), plain).unwrap();
    let shown = format!(
        "{client:?} {client:#?} {registry:?} {config:?} {config:#?} {}",
        serde_json::to_string(&config).unwrap()
    );
    for secret in ["pw-s3cret", "ZNZXlivetoken", "KEYBODY", "CERTBODY"] {
        assert!(!shown.contains(secret), "{secret} shown in {shown}");
    }
    assert!(shown.contains("svc"));
}
