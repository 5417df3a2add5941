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
