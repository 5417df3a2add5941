//! Leased keys: remote metadata report keys die with their publisher's
//! lease but survive while another publisher of the same revision lives;
//! one slow key never delays another, and every operation has a deadline.

use std::time::{Duration, Instant};

use steadfast_core::{Registry, RegistryError};
use steadfast_etcd::harness::EtcdServer;
use steadfast_etcd::wire::b64;
use steadfast_etcd::EtcdRegistry;

use crate::common::slow_http::SlowRelay;
use crate::common::*;

const WAIT: Duration = Duration::from_secs(10);
/// The per-key operation deadline of the slow-key test: long enough that a
/// fast key's register on a loaded machine never comes near it.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the relay holds the slow key's calls: past the deadline.
const HOLD: Duration = Duration::from_secs(6);

#[tokio::test]
async fn metadata_keys_die_with_their_publishers_lease_and_survive_while_another_publishes() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        // Two providers of one app and revision, each its own process
        // (registry, client, leases); 2 s leases.
        let cfg = config(vec![etcd.endpoint()]);
        let p1 = EtcdRegistry::new(cfg.clone()).unwrap();
        let p2 = EtcdRegistry::new(cfg.clone()).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let shared = info("web", 50051);
        let key = p1.metadata_report().key_of("web", &shared.revision);
        let lease_on_key = || async {
            raw.get(key.as_bytes())
                .await
                .unwrap()
                .kvs
                .first()
                .map(|kv| kv.lease)
        };

        p2.metadata_report().publish(&shared).await.unwrap();
        p1.metadata_report().publish(&shared).await.unwrap();
        let l1 = p1
            .metadata_report()
            .lease_of("web", &shared.revision)
            .unwrap();
        let l2 = p2
            .metadata_report()
            .lease_of("web", &shared.revision)
            .unwrap();
        assert_eq!(lease_on_key().await, Some(l1), "the last put wins");
        // Publishing again updates in place, under the same lease.
        p1.metadata_report().publish(&shared).await.unwrap();
        assert_eq!(
            p1.metadata_report().lease_of("web", &shared.revision),
            Some(l1)
        );

        // p1 dies without withdrawing: its lease expires with the key, and
        // p2, which still publishes the revision, puts it back.
        drop(p1);
        let died = Instant::now();
        eventually(WAIT, "the key back under p2's lease", || async {
            lease_on_key().await == Some(l2)
        })
        .await;
        let restored = died.elapsed();

        // A provider alone with its revision leaves nothing once dead.
        let p3 = EtcdRegistry::new(cfg.clone()).unwrap();
        let own = info("web", 50052);
        p3.metadata_report().publish(&own).await.unwrap();
        let own_key = p3.metadata_report().key_of("web", &own.revision);
        drop(p3);
        let died = Instant::now();
        eventually(WAIT, "the dead provider's key gone", || async {
            raw.get(own_key.as_bytes()).await.unwrap().kvs.is_empty()
        })
        .await;
        let gone = died.elapsed();

        // withdraw stops the keeper and deletes the key at once.
        p2.metadata_report()
            .withdraw("web", &shared.revision)
            .await
            .unwrap();
        assert_eq!(lease_on_key().await, None);
        // Its keeper is gone (nothing left to put the key back) ...
        assert_eq!(p2.metadata_report().lease_of("web", &shared.revision), None);
        // ... and one keepalive round later (a third of the 2 s TTL) the
        // key is still absent.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(lease_on_key().await, None, "nobody puts it back");
        // etcd expires the lease at most a TTL after the last keepalive.
        let gone_limit = cfg.lease_ttl * 2 + SLACK;
        println!(
            "metadata report (2 s leases): shared key back under the survivor's lease {restored:?} \
             after a publisher died; a lone dead publisher's key gone after {gone:?} (bound \
             {gone_limit:?})"
        );
        assert!(gone <= gone_limit, "{gone:?}");
    })
    .await;
}

#[tokio::test]
async fn a_slow_key_never_delays_another_and_every_operation_has_a_deadline() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let relay = SlowRelay::start(etcd.endpoint()).await;
        let mut cfg = config(vec![relay.endpoint()]);
        // The relay holds the slow key past the operation deadline (and the
        // request deadline past that), so the test waits real time only for
        // the deadlines themselves.
        cfg.operation_timeout = OP_TIMEOUT;
        cfg.request_timeout = OP_TIMEOUT * 2;
        assert!(cfg.request_timeout < HOLD);
        let reg = EtcdRegistry::new(cfg).unwrap();
        let [slow, fast] = ["slow", "fast"].map(|h| inst("web", h));
        let slow_key = reg.layout().instance_key("web", &slow.id);
        relay.slow_down(b64::encode(&slow_key).as_bytes(), HOLD);

        let started = Instant::now();
        let r = reg.clone();
        let s = slow.clone();
        let slow_call = tokio::spawn(async move { r.register(s).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = Instant::now();
        reg.register(fast.clone()).await.unwrap();
        let fast_took = t.elapsed();
        // Not held up: done while the hung key still waits for its deadline.
        assert!(
            !slow_call.is_finished(),
            "the fast register ended after the slow one's deadline ({fast_took:?})"
        );
        let slow_result = slow_call.await.unwrap();
        let slow_took = started.elapsed();
        assert_eq!(slow_result, Err(RegistryError::Timeout));
        assert!(reg.lease_of(&fast).is_some());
        // Unregistering the slow key is bounded too; the fast one is not held up.
        let t = Instant::now();
        let r = reg.clone();
        let s = slow.clone();
        let slow_unreg = tokio::spawn(async move { r.unregister(s).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t2 = Instant::now();
        reg.unregister(fast.clone()).await.unwrap();
        let fast_unreg = t2.elapsed();
        assert!(
            !slow_unreg.is_finished(),
            "the fast unregister ended after the slow one's deadline ({fast_unreg:?})"
        );
        let slow_unreg = slow_unreg.await.unwrap();
        let unreg_took = t.elapsed();
        assert_eq!(slow_unreg, Err(RegistryError::Timeout));
        println!(
            "per-key operations: a register took {fast_took:?} while another key's hung; the hung \
             one failed with Timeout after {slow_took:?} (deadline {OP_TIMEOUT:?}, relay hold \
             {HOLD:?}); unregister likewise ({fast_unreg:?} vs Timeout after {unreg_took:?})"
        );
        // Within their own deadline (and, above, before the hung key's).
        assert!(fast_took < OP_TIMEOUT, "{fast_took:?}");
        assert!(fast_unreg < OP_TIMEOUT, "{fast_unreg:?}");
        // Cut by the deadline, not by the relay letting the call through.
        assert!(slow_took < HOLD, "{slow_took:?}");
        assert!(unreg_took < HOLD, "{unreg_took:?}");
    })
    .await;
}
