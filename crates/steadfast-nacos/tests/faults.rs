//! Faults of real rnacos servers: a frozen server (SIGSTOP) is reported
//! stale within 10 s and healed after it thaws; with several servers the
//! clients move to a live one and redo everything there.

use std::time::{Duration, Instant};

use futures::StreamExt;
use steadfast_core::{EventStream, Registry, RegistryEvent, ServiceInstance};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};

async fn register(registry: &NacosRegistry, inst: &ServiceInstance) {
    let end = Instant::now() + Duration::from_secs(15);
    while let Err(e) = registry.register(inst.clone()).await {
        assert!(Instant::now() < end, "never registered: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the first `Err` item; returns how long it took.
async fn until_stale(stream: &mut EventStream, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        match tokio::time::timeout(within, stream.next()).await {
            Ok(Some(Err(_))) => return start.elapsed(),
            Ok(Some(Ok(_))) => {}
            other => panic!("not reported stale within {within:?}: {other:?}"),
        }
    }
}

/// Waits for a Reset holding `id` (the first event after an outage is a
/// Reset; the instance may come in a later one once its provider redid).
async fn until_held(stream: &mut EventStream, id: &str, within: Duration) {
    let end = tokio::time::Instant::now() + within;
    let mut held: Vec<String> = Vec::new();
    loop {
        match tokio::time::timeout_at(end, stream.next()).await {
            Ok(Some(Ok(RegistryEvent::Reset { items, .. }))) => {
                held = items.iter().map(|i| i.id().to_string()).collect();
            }
            Ok(Some(Ok(RegistryEvent::Delta {
                upserts, removals, ..
            }))) => {
                held.retain(|h| !removals.iter().any(|r| &**r == h));
                held.extend(upserts.iter().map(|i| i.id().to_string()));
            }
            Ok(Some(Err(_))) => {}
            other => panic!("{id} not back within {within:?} (held {held:?}): {other:?}"),
        }
        if held.iter().any(|h| h == id) {
            return;
        }
    }
}

#[tokio::test]
async fn a_frozen_server_is_stale_within_10_s_and_heals_after_20_s() {
    let mut server = RnacosServer::start().await.expect("rnacos starts");
    let config = NacosConfig::new([server.grpc_addr()]);
    let consumer = NacosRegistry::new(config.clone());
    let provider = NacosRegistry::new(config);
    let inst = ServiceInstance::new("frozen", "127.0.0.1", 21001);
    let mut stream = consumer.watch("frozen").await.unwrap();
    register(&provider, &inst).await;
    until_held(&mut stream, "127.0.0.1:21001", Duration::from_secs(10)).await;

    server.freeze().unwrap();
    let took = until_stale(&mut stream, Duration::from_secs(15)).await;
    println!("frozen server reported stale after {took:?}");
    assert!(took <= Duration::from_secs(10), "stale after {took:?}");
    let rest = Duration::from_secs(20).saturating_sub(took);
    tokio::time::sleep(rest).await;
    server.thaw().unwrap();
    until_held(&mut stream, "127.0.0.1:21001", Duration::from_secs(20)).await;
    assert!(consumer.stats().health_check_failures >= 2);
    assert!(provider.stats().redone_registrations >= 1);
}

#[tokio::test]
async fn clients_move_to_a_live_server_and_redo_everything_there() {
    let mut a = RnacosServer::start().await.expect("rnacos a starts");
    let b = RnacosServer::start().await.expect("rnacos b starts");
    let config = NacosConfig::new([a.grpc_addr(), b.grpc_addr()]);
    let consumer = NacosRegistry::new(config.clone());
    let provider = NacosRegistry::new(config);
    let inst = ServiceInstance::new("moving", "127.0.0.1", 21002);
    let mut stream = consumer.watch("moving").await.unwrap();
    register(&provider, &inst).await;
    until_held(&mut stream, "127.0.0.1:21002", Duration::from_secs(10)).await;
    assert_eq!(consumer.connected_server(), Some(a.grpc_addr()));

    a.kill().await.unwrap();
    until_stale(&mut stream, Duration::from_secs(10)).await;
    until_held(&mut stream, "127.0.0.1:21002", Duration::from_secs(15)).await;
    assert_eq!(consumer.connected_server(), Some(b.grpc_addr()));
    assert_eq!(provider.connected_server(), Some(b.grpc_addr()));
}

/// A server with auth on refuses a client that has no credentials: every
/// call is a typed error and every watcher hears why, never a silent empty
/// state.
#[tokio::test]
async fn a_server_with_auth_on_refuses_calls_and_watchers_hear_why() {
    let server = RnacosServer::start_with_env(&[("RNACOS_ENABLE_OPEN_API_AUTH", "true")])
        .await
        .expect("rnacos starts");
    let client = NacosRegistry::new(NacosConfig::new([server.grpc_addr()]));
    let mut stream = client.watch("locked").await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        Ok(Some(Err(e))) => assert!(e.to_string().contains("subscribe failed"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let err = client
        .register(ServiceInstance::new("locked", "127.0.0.1", 21003))
        .await
        .unwrap_err();
    assert!(
        matches!(err, steadfast_core::RegistryError::Rejected(_)),
        "{err:?}"
    );
}

/// With credentials the client logs in, sends its token with every call,
/// and works; a wrong password is a typed error that never shows it.
#[tokio::test]
async fn a_client_with_credentials_works_on_a_server_with_auth_on() {
    use steadfast_nacos::NacosAuth;
    let server = RnacosServer::start_with_env(&[
        ("RNACOS_ENABLE_OPEN_API_AUTH", "true"),
        ("RNACOS_INIT_ADMIN_USERNAME", "operator"),
        ("RNACOS_INIT_ADMIN_PASSWORD", "s3cret-pw"),
    ])
    .await
    .expect("rnacos starts");
    let mut config = NacosConfig::new([server.grpc_addr()]);
    config.auth = Some(NacosAuth::new("operator", "s3cret-pw"));
    let client = NacosRegistry::new(config.clone());
    let mut stream = client.watch("guarded").await.unwrap();
    register(
        &client,
        &ServiceInstance::new("guarded", "127.0.0.1", 21004),
    )
    .await;
    until_held(&mut stream, "127.0.0.1:21004", Duration::from_secs(10)).await;
    let shown = format!("{client:?} {config:?}");
    assert!(
        !shown.contains("s3cret-pw"),
        "no password in Debug: {shown}"
    );

    config.auth = Some(NacosAuth::new("operator", "not-the-password"));
    config.request_timeout = Duration::from_secs(1);
    let wrong = NacosRegistry::new(config);
    let err = wrong
        .register(ServiceInstance::new("guarded", "127.0.0.1", 21005))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("not-the-password"), "{err}");
    assert!(wrong.stats().connect_failures >= 1, "{:?}", wrong.stats());
}
