//! A 3-member rnacos cluster (Raft for config, distro sync for ephemeral
//! instances): a provider and a consumer connected to different members
//! see each other; when the provider's member is SIGKILLed the provider
//! moves to a live member and redoes its registration there, and the
//! consumer sees it again.

use std::time::Duration;

use futures::StreamExt;
use steadfast_core::{EventStream, Registry, RegistryEvent, ServiceInstance};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};

/// Folds `stream` until the held ids are `want` (sorted), within `within`.
async fn until_ids(
    stream: &mut EventStream,
    held: &mut Vec<String>,
    want: &[&str],
    within: Duration,
) {
    let end = tokio::time::Instant::now() + within;
    loop {
        let mut sorted = held.clone();
        sorted.sort();
        if sorted == want {
            return;
        }
        match tokio::time::timeout_at(end, stream.next()).await {
            Ok(Some(Ok(RegistryEvent::Reset { items, .. }))) => {
                *held = items.iter().map(|i| i.id().to_string()).collect();
            }
            Ok(Some(Ok(RegistryEvent::Delta {
                upserts, removals, ..
            }))) => {
                held.retain(|h| !removals.iter().any(|r| &**r == h));
                held.extend(upserts.iter().map(|i| i.id().to_string()));
            }
            Ok(Some(Err(_))) => {}
            other => panic!("never held {want:?} (held {held:?}): {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_killed_member_moves_its_clients_to_the_live_ones() {
    let first = RnacosServer::start_with_env(&[("RNACOS_RAFT_NODE_ID", "1")])
        .await
        .expect("member 1 starts");
    let join = first.grpc_addr();
    let mut members = vec![first];
    for id in ["2", "3"] {
        let m = RnacosServer::start_with_env(&[
            ("RNACOS_RAFT_NODE_ID", id),
            ("RNACOS_RAFT_AUTO_INIT", "false"),
            ("RNACOS_RAFT_JOIN_ADDR", join.as_str()),
        ])
        .await
        .expect("member starts");
        members.push(m);
    }
    let addrs: Vec<String> = members.iter().map(RnacosServer::grpc_addr).collect();
    // The provider prefers member 1, the consumer member 2.
    let provider = NacosRegistry::new(NacosConfig::new(addrs.clone()));
    let consumer = NacosRegistry::new(NacosConfig::new([
        addrs[1].clone(),
        addrs[2].clone(),
        addrs[0].clone(),
    ]));
    let mut stream = consumer.watch("clustered").await.unwrap();
    let inst = ServiceInstance::new("clustered", "127.0.0.1", 21101);
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    while provider.register(inst.clone()).await.is_err() {
        assert!(tokio::time::Instant::now() < end, "never registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut held = Vec::new();
    // Across members: distro sync carries the instance to member 2.
    until_ids(
        &mut stream,
        &mut held,
        &["127.0.0.1:21101"],
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(provider.connected_server(), Some(addrs[0].clone()));
    assert_eq!(consumer.connected_server(), Some(addrs[1].clone()));

    members[0].kill().await.unwrap();
    // The provider redoes its registration on a live member; whatever the
    // cluster does with member 1's instances meanwhile, the consumer ends
    // up holding the provider.
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if provider.connected_server().is_some_and(|s| s != addrs[0]) {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "provider never moved");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until_ids(
        &mut stream,
        &mut held,
        &["127.0.0.1:21101"],
        Duration::from_secs(30),
    )
    .await;
    assert!(
        provider.stats().redone_registrations >= 1,
        "{:?}",
        provider.stats()
    );
    // And the instance stays (not removed for good with member 1).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed = consumer.list("clustered").await.unwrap();
    assert!(
        listed.instances.iter().any(|i| i.id() == "127.0.0.1:21101"),
        "{:?}",
        listed.instances
    );
}
