//! The Nacos registry against a real rnacos server: register, push,
//! deregister, and a restart that forgets everything (redo).

use std::time::Duration;

use futures::StreamExt;
use steadfast_core::{Registry, RegistryEvent, ServiceInstance};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};

fn registry(server: &RnacosServer) -> NacosRegistry {
    NacosRegistry::new(NacosConfig::new([server.grpc_addr()]))
}

/// Reads events until the held set has `ids` (sorted), within 10 s.
async fn until_ids(
    stream: &mut steadfast_core::EventStream,
    held: &mut std::collections::BTreeMap<String, ()>,
    want: &[&str],
) {
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ids: Vec<&str> = held.keys().map(String::as_str).collect();
        if ids == want {
            return;
        }
        let next = tokio::time::timeout_at(end, stream.next())
            .await
            .unwrap_or_else(|_| panic!("never saw {want:?}; held {ids:?}"))
            .expect("stream open");
        match next {
            Ok(RegistryEvent::Reset { items, .. }) => {
                held.clear();
                for i in items {
                    held.insert(i.id().to_string(), ());
                }
            }
            Ok(RegistryEvent::Delta {
                upserts, removals, ..
            }) => {
                for r in removals {
                    held.remove(&*r);
                }
                for i in upserts {
                    held.insert(i.id().to_string(), ());
                }
            }
            Err(_) => {}
        }
    }
}

#[tokio::test]
async fn register_push_and_deregister_through_a_real_server() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    let consumer = registry(&server);
    let provider = registry(&server);
    let mut stream = consumer.watch("greeter").await.unwrap();
    let mut held = Default::default();
    until_ids(&mut stream, &mut held, &[]).await;
    let mut a = ServiceInstance::new("greeter", "127.0.0.1", 20001);
    a.set_revision("r1");
    let b = ServiceInstance::new("greeter", "127.0.0.1", 20002);
    // Registration may race the first connection: retried like the engine.
    for inst in [&a, &b] {
        let end = tokio::time::Instant::now() + Duration::from_secs(10);
        while provider.register(inst.clone()).await.is_err() {
            assert!(tokio::time::Instant::now() < end, "never registered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    until_ids(
        &mut stream,
        &mut held,
        &["127.0.0.1:20001", "127.0.0.1:20002"],
    )
    .await;
    let listed = consumer.list("greeter").await.unwrap();
    let rev = listed
        .instances
        .iter()
        .find(|i| i.id() == "127.0.0.1:20001")
        .and_then(|i| i.revision().map(str::to_string));
    assert_eq!(rev.as_deref(), Some("r1"));
    provider.unregister(b.clone()).await.unwrap();
    until_ids(&mut stream, &mut held, &["127.0.0.1:20001"]).await;
    // Dropping the provider closes its connection: the server drops its
    // ephemeral instance, and the push says so (an empty list included).
    drop(provider);
    until_ids(&mut stream, &mut held, &[]).await;
    assert!(consumer.stats().pushes >= 3);
}

#[tokio::test]
async fn a_restarted_server_gets_every_registration_and_subscription_again() {
    let mut server = RnacosServer::start().await.expect("rnacos starts");
    let consumer = registry(&server);
    let provider = registry(&server);
    let mut stream = consumer.watch("greeter").await.unwrap();
    let mut held = Default::default();
    let a = ServiceInstance::new("greeter", "127.0.0.1", 20011);
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while provider.register(a.clone()).await.is_err() {
        assert!(tokio::time::Instant::now() < end, "never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    until_ids(&mut stream, &mut held, &["127.0.0.1:20011"]).await;
    // SIGKILL and wipe: the new server knows nothing.
    server.wipe_and_restart().await.unwrap();
    // The consumer is told its state is stale; its next event is a Reset
    // (a full re-read), and the provider comes back once both clients
    // redid their work on the new server.
    let end = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut stale = false;
    loop {
        match tokio::time::timeout_at(end, stream.next()).await {
            Ok(Some(Err(_))) => stale = true,
            Ok(Some(Ok(event))) if stale => {
                let RegistryEvent::Reset { items, .. } = event else {
                    panic!("the first event after an outage is a Reset: {event:?}");
                };
                held.clear();
                for i in items {
                    held.insert(i.id().to_string(), ());
                }
                break;
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("never told stale, or no event after: {other:?}"),
        }
    }
    until_ids(&mut stream, &mut held, &["127.0.0.1:20011"]).await;
    let s = provider.stats();
    assert!(s.redone_registrations >= 1, "{s:?}");
    assert!(consumer.stats().redone_subscriptions >= 1);
}

/// A provider that restarts on its address with a new revision is seen
/// with the new revision (rnacos must run with its instance-metadata
/// persistence off, as the harness does; docs/registries.md).
#[tokio::test]
async fn a_restart_on_the_same_address_with_a_new_revision_is_seen() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    let consumer = registry(&server);
    let mut stream = consumer.watch("greeter").await.unwrap();
    for revision in ["r1", "r2", "r3"] {
        let provider = registry(&server);
        let mut inst = ServiceInstance::new("greeter", "127.0.0.1", 20021);
        inst.set_revision(revision);
        provider.register(inst).await.unwrap();
        let end = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut seen = None;
        while seen.as_deref() != Some(revision) {
            let event = tokio::time::timeout_at(end, stream.next())
                .await
                .unwrap_or_else(|_| panic!("never saw {revision}, last {seen:?}"))
                .unwrap();
            let items = match event {
                Ok(RegistryEvent::Reset { items, .. }) => items,
                Ok(RegistryEvent::Delta { upserts, .. }) => upserts,
                Err(_) => continue,
            };
            if let Some(i) = items.iter().find(|i| i.id() == "127.0.0.1:20021") {
                seen = i.revision().map(str::to_string);
            }
        }
        // The provider stops: its connection closes, the instance goes.
        drop(provider);
    }
}

/// 1000 subscribed services share the client's one connection, and each
/// gets its list.
#[tokio::test]
async fn a_thousand_services_share_one_connection() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    let provider = registry(&server);
    let consumer = registry(&server);
    let regs: Vec<_> = (0..1000u16)
        .map(|i| {
            provider.register(ServiceInstance::new(
                format!("svc-{i}"),
                "127.0.0.1",
                1000 + i,
            ))
        })
        .collect();
    for r in futures::future::join_all(regs).await {
        r.unwrap();
    }
    let mut streams = Vec::new();
    for i in 0..1000 {
        streams.push(consumer.watch(&format!("svc-{i}")).await.unwrap());
    }
    for (i, stream) in streams.iter_mut().enumerate() {
        let mut held = Default::default();
        let want = format!("127.0.0.1:{}", 1000 + i);
        until_ids(stream, &mut held, &[want.as_str()]).await;
    }
    assert_eq!(consumer.stats().connects, 1);
    assert_eq!(consumer.stats().connection_losses, 0);
}

/// Records no provider could serve (port 0, an empty ip) are typed errors,
/// counted and skipped; the good record of the same service is kept.
#[tokio::test]
async fn invalid_records_are_skipped_and_counted_and_nothing_else_is_lost() {
    let server = RnacosServer::start().await.expect("rnacos starts");
    let provider = registry(&server);
    let consumer = registry(&server);
    let mut stream = consumer.watch("mixed").await.unwrap();
    let mut good = ServiceInstance::new("mixed", "127.0.0.1", 20031);
    // Hostile but valid text travels as it is (outputs escape it).
    good.metadata
        .insert("note".into(), "<script>\u{0}\"\\\n".into());
    provider.register(good).await.unwrap();
    provider
        .register(ServiceInstance::new("mixed", "127.0.0.1", 0))
        .await
        .unwrap();
    provider
        .register(ServiceInstance::new("mixed", "", 20032))
        .await
        .unwrap();
    let mut held = Default::default();
    until_ids(&mut stream, &mut held, &["127.0.0.1:20031"]).await;
    // Wait for the push carrying every record, then check the count.
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while consumer.stats().invalid_records < 2 {
        assert!(tokio::time::Instant::now() < end, "{:?}", consumer.stats());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = consumer.list("mixed").await.unwrap();
    let ids: Vec<&str> = listed.instances.iter().map(|i| i.id()).collect();
    assert_eq!(ids, ["127.0.0.1:20031"]);
    let note = listed.instances[0].extra("note");
    assert_eq!(note, Some("<script>\u{0}\"\\\n"));
}
