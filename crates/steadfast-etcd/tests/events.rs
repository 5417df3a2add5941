//! Versioned events against a real etcd: a Reset, then one Delta per change
//! at the etcd revision, lists at the same versions, and a wiped store whose
//! state a consumer applies (the epoch moved up) instead of ignoring it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use steadfast_core::EventStream;
use steadfast_core::{InstanceMap, RegistryError, RegistryEvent, Version};
use steadfast_etcd::harness::EtcdServer;
use steadfast_etcd::EtcdRegistry;

const WAIT: Duration = Duration::from_secs(10);

async fn next_event(s: &mut EventStream) -> Result<RegistryEvent, RegistryError> {
    tokio::time::timeout(WAIT, s.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
}

/// Applies events to `map` until `pred` holds, within `WAIT`; returns the
/// events applied.
async fn apply_until(
    s: &mut EventStream,
    map: &mut InstanceMap,
    pred: impl Fn(&InstanceMap) -> bool,
) -> Vec<RegistryEvent> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !pred(map) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.next()).await {
            Ok(Some(Ok(ev))) => {
                map.apply(ev.clone(), usize::MAX);
                seen.push(ev);
            }
            Ok(Some(Err(_))) => {}
            other => panic!("no state in time: {other:?}; held {map:?}"),
        }
    }
    seen
}

#[tokio::test]
async fn watch_events_yield_a_reset_then_one_delta_per_change_at_the_etcd_revision() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let (a, b) = (inst("web", "10.0.0.1"), inst("web", "10.0.0.2"));
        reg.register_now(&a).await.unwrap();
        let mut s = reg.watch_events("web").await.unwrap();
        let first = next_event(&mut s).await.unwrap();
        let RegistryEvent::Reset {
            version,
            items: instances,
        } = &first
        else {
            panic!("first is not a Reset: {first:?}")
        };
        assert_eq!(instances.len(), 1);
        assert_eq!(instances[0].to_record("web"), a);
        let listed = reg.list_events("web").await.unwrap();
        assert!(listed.version >= *version && listed.version.epoch == 0);

        reg.register_now(&b).await.unwrap();
        let key_b = reg.layout().instance_key("web", &b.id);
        let put_rev = raw.get(key_b.as_bytes()).await.unwrap().kvs[0].mod_revision;
        let reset_version = *version;
        match next_event(&mut s).await.unwrap() {
            RegistryEvent::Delta {
                base,
                version,
                upserts,
                removals,
            } => {
                assert_eq!(base, reset_version, "on top of the Reset");
                assert_eq!(version, Version::at(put_rev as u64));
                assert_eq!(upserts.len(), 1, "only what changed");
                assert_eq!(upserts[0].to_record("web"), b);
                assert!(removals.is_empty());
            }
            other => panic!("not a delta: {other:?}"),
        }
        reg.unregister_now(&a).await.unwrap();
        match next_event(&mut s).await.unwrap() {
            RegistryEvent::Delta {
                base,
                version,
                upserts,
                removals,
            } => {
                assert_eq!(base, Version::at(put_rev as u64), "on top of the put");
                assert!(version > Version::at(put_rev as u64));
                assert!(upserts.is_empty());
                assert_eq!(removals.len(), 1);
                assert_eq!(&*removals[0], a.id.as_str());
            }
            other => panic!("not a delta: {other:?}"),
        }
        let listed = reg.list_events("web").await.unwrap();
        assert_eq!(listed.instances.len(), 1);
        assert_eq!(listed.instances[0].to_record("web"), b);
    })
    .await;
}

#[tokio::test]
async fn a_wiped_store_moves_the_epoch_up_and_the_consumer_applies_its_state() {
    bounded(async {
        let mut etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        // Push the old store's revision well past what the new one reaches.
        for n in 0..30 {
            let k = format!("{}/filler/{n}", reg.layout().prefix());
            raw.put(k.as_bytes(), b"x", 0).await.unwrap();
        }
        let [a, c] = ["a", "c"].map(|h| inst("web", h));
        reg.register_now(&a).await.unwrap();
        let mut s = reg.watch_events("web").await.unwrap();
        let mut map = InstanceMap::default();
        apply_until(&mut s, &mut map, |m| m.len() == 1).await;
        let old = map.version().unwrap();
        assert_eq!(old.epoch, 0);

        etcd.wipe_and_restart().await.unwrap();
        let k = reg.layout().instance_key("web", &c.id);
        raw.put(k.as_bytes(), &serde_json::to_vec(&c).unwrap(), 0)
            .await
            .unwrap();
        // The new store's revisions are far below the old ones: only a new
        // epoch lets the consumer take its state.
        apply_until(&mut s, &mut map, |m| m.get(&c.id).is_some()).await;
        let now = map.version().unwrap();
        assert!(
            now.epoch >= 1 && now.revision < old.revision,
            "{old} -> {now}"
        );
        assert!(reg.epoch() >= 1);
        // Lists and new watches are in the new epoch too.
        assert!(reg.list_events("web").await.unwrap().version.epoch >= 1);
        let mut again = reg.watch_events("web").await.unwrap();
        assert!(next_event(&mut again).await.unwrap().version().epoch >= 1);
    })
    .await;
}
