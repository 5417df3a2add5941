//! Registry behaviour against a real etcd: register/watch/unregister, lease
//! expiry and keepalive, re-registration after a lease is revoked or a key
//! deleted behind the registry's back, invalid records, and the give-up
//! error when etcd stays away.

mod common;

use std::time::{Duration, Instant};

use common::*;
use steadfast_core::{Registry, RegistryError};
use steadfast_etcd::harness::EtcdServer;
use steadfast_etcd::EtcdRegistry;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn register_is_watched_listed_replaced_and_unregistered() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let (a, b) = (inst("web", "10.0.0.1"), inst("web", "10.0.0.2"));

        let mut w = watch(&reg, "web").await;
        let first = next_item(&mut w, WAIT).await.unwrap().unwrap();
        assert!(first.is_empty());

        reg.register(a.clone()).await.unwrap();
        let s = wait_snapshot(&mut w, WAIT, "a", |s| s.len() == 1).await;
        assert_eq!(s, vec![a.clone()]);
        reg.register(b.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;
        // A same-prefix app must not leak in (`web/` vs `webx/`).
        reg.register(inst("webx", "10.0.0.9")).await.unwrap();
        assert_eq!(ids(&listed(&reg, "web").await), ids_of(&[&a, &b]));

        // Re-registering updates the record in place, under the same lease.
        let lease_a = reg.lease_of(&a).unwrap();
        let mut a2 = a.clone();
        a2.set_revision("r2");
        reg.register(a2.clone()).await.unwrap();
        let s = wait_snapshot(&mut w, WAIT, "a updated", |s| s.contains(&a2)).await;
        assert_eq!(s.len(), 2);
        assert_eq!(reg.lease_of(&a2), Some(lease_a));
        let key_a = reg.layout().instance_key("web", &a.id);
        assert_eq!(
            raw.get(key_a.as_bytes()).await.unwrap().kvs[0].lease,
            lease_a
        );
        assert!(raw.lease_keepalive(lease_a).await.unwrap().is_some());

        let lease_a2 = reg.lease_of(&a2).unwrap();
        reg.unregister(a2.clone()).await.unwrap();
        let s = wait_snapshot(&mut w, WAIT, "only b", |s| s.len() == 1).await;
        assert_eq!(s, vec![b.clone()]);
        assert_eq!(reg.lease_of(&a2), None);
        assert_eq!(
            raw.lease_keepalive(lease_a2).await.unwrap(),
            None,
            "lease revoked"
        );

        // Ids that cannot be one key segment are refused.
        let mut bad = inst("web", "h");
        bad.id = "a/b".into();
        assert!(matches!(
            reg.register(bad).await,
            Err(RegistryError::Rejected(_))
        ));
    })
    .await;
}

#[tokio::test]
async fn leases_expire_without_keepalive_and_live_with_it() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let (kept, orphan) = (inst("web", "kept"), inst("web", "orphan"));

        // `kept` is registered first, so without its keepalive it would
        // expire before `orphan`, whose lease nobody refreshes.
        reg.register(kept.clone()).await.unwrap();
        let lease = raw.lease_grant(2).await.unwrap().id;
        let key = reg.layout().instance_key("web", &orphan.id);
        let value = serde_json::to_vec(&orphan).unwrap();
        raw.put(key.as_bytes(), &value, lease).await.unwrap();
        let granted = Instant::now();

        let mut w = watch(&reg, "web").await;
        wait_snapshot(&mut w, WAIT, "both", |s| s.len() == 2).await;
        let s = wait_snapshot(&mut w, WAIT, "orphan expired", |s| s.len() == 1).await;
        assert!(granted.elapsed() >= Duration::from_millis(1500));
        assert_eq!(s, vec![kept.clone()]);

        // Dropping the last registry clone stops the keepalive: `kept`
        // expires too. The watch stream does not hold the registry.
        drop(reg);
        let s = wait_snapshot(&mut w, WAIT, "kept expired", |s| s.is_empty()).await;
        assert!(s.is_empty());
    })
    .await;
}

#[tokio::test]
async fn keepalive_registers_again_after_revoke_or_delete_behind_its_back() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let a = inst("web", "10.0.0.1");
        reg.register(a.clone()).await.unwrap();
        let key = reg.layout().instance_key("web", &a.id);
        let mut w = watch(&reg, "web").await;
        wait_snapshot(&mut w, WAIT, "a", |s| s.len() == 1).await;

        let lease0 = reg.lease_of(&a).unwrap();
        assert!(raw.lease_revoke(lease0).await.unwrap());
        wait_snapshot(&mut w, WAIT, "a revoked", |s| s.is_empty()).await;
        let s = wait_snapshot(&mut w, WAIT, "a back", |s| s.len() == 1).await;
        assert_eq!(s, vec![a.clone()]);
        // The task records the new lease right after its put.
        eventually(WAIT, "new lease recorded", || async {
            reg.lease_of(&a) != Some(lease0)
        })
        .await;
        let lease1 = reg.lease_of(&a).unwrap();
        assert_eq!(raw.get(key.as_bytes()).await.unwrap().kvs[0].lease, lease1);
        eventually(WAIT, "1 re-registration", || async {
            reg.stats().reregistrations >= 1
        })
        .await;

        raw.delete(key.as_bytes()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a deleted", |s| s.is_empty()).await;
        wait_snapshot(&mut w, WAIT, "a back again", |s| s == [a.clone()]).await;
        // The task counts right after its put, which the watch may beat.
        eventually(WAIT, "2 re-registrations", || async {
            reg.stats().reregistrations >= 2
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn invalid_records_are_skipped_and_counted_while_valid_ones_are_delivered() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let (a, b) = (inst("web", "10.0.0.1"), inst("web", "10.0.0.2"));
        reg.register(a.clone()).await.unwrap();
        let l = reg.layout().clone();
        let foreign = serde_json::to_vec(&inst("db", "10.0.0.3")).unwrap();
        let bad: Vec<(String, Vec<u8>)> = vec![
            (l.instance_key("web", "x"), b"{not json".to_vec()),
            (
                l.instance_key("web", "y"),
                br#"{"id":"y","app":"web"}"#.to_vec(),
            ),
            (l.instance_key("web", "10.0.0.3:8080"), foreign),
            (
                format!("{}z/extra", l.app_prefix("web")),
                serde_json::to_vec(&b).unwrap(),
            ),
        ];
        for (k, v) in &bad {
            raw.put(k.as_bytes(), v, 0).await.unwrap();
        }

        assert_eq!(listed(&reg, "web").await, vec![a.clone()]);
        assert_eq!(reg.stats().invalid_records, 4);
        let mut w = watch(&reg, "web").await;
        assert_eq!(
            next_item(&mut w, WAIT).await.unwrap().unwrap(),
            vec![a.clone()]
        );
        assert_eq!(reg.stats().invalid_records, 8);

        let b_key = l.instance_key("web", &b.id);
        raw.put(b_key.as_bytes(), &serde_json::to_vec(&b).unwrap(), 0)
            .await
            .unwrap();
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;
        // A good record turning bad removes that provider.
        let a_key = l.instance_key("web", &a.id);
        raw.put(a_key.as_bytes(), b"garbage", 0).await.unwrap();
        let s = wait_snapshot(&mut w, WAIT, "a gone", |s| s.len() == 1).await;
        assert_eq!(s, vec![b]);
        assert_eq!(reg.stats().invalid_records, 9);
    })
    .await;
}

#[tokio::test]
async fn a_watch_reports_unavailable_once_while_etcd_is_away_keeps_going_and_resumes() {
    bounded(async {
        let mut etcd = EtcdServer::start().await.unwrap();
        let mut cfg = config(vec![etcd.endpoint()]);
        cfg.stale_after = Duration::from_secs(1);
        // A dead etcd breaks the stream: reported after `stale_after` and a
        // failed re-read, or by the liveness probe, whichever is first;
        // twice that, plus slack.
        let report_limit =
            (cfg.stale_after + cfg.request_timeout).min(liveness_deadline(&cfg)) * 2 + SLACK;
        let reg = EtcdRegistry::new(cfg).unwrap();
        let a = inst("web", "h");
        let mut w = watch(&reg, "web").await;
        assert!(next_item(&mut w, WAIT).await.unwrap().is_ok());

        etcd.kill().await.unwrap();
        let started = Instant::now();
        match next_item(&mut w, WAIT).await {
            Some(Err(RegistryError::Unavailable(_))) => {}
            other => panic!("expected Unavailable, got {other:?}"),
        }
        let reported = started.elapsed();
        eprintln!("etcd killed: Unavailable reported after {reported:?} (bound {report_limit:?})");
        assert!(reported < report_limit, "{reported:?}");
        // Subscribing again fails at once while etcd is down, and so does a
        // registration.
        assert!(matches!(
            reg.watch("web").await,
            Err(RegistryError::Unavailable(_))
        ));
        assert!(matches!(
            reg.register(a.clone()).await,
            Err(RegistryError::Unavailable(_))
        ));
        // The stream stays open and says nothing more while etcd is away.
        assert!(tokio::time::timeout(Duration::from_secs(2), w.rx_next())
            .await
            .is_err());

        etcd.restart().await.unwrap();
        reg.register(a.clone()).await.unwrap();
        let s = wait_snapshot(&mut w, WAIT, "resumed with a", |s| !s.is_empty()).await;
        assert_eq!(s, vec![a]);
        let st = reg.stats();
        assert_eq!(st.unavailable_reports, 1, "{st:?}");
        assert!(st.resumes >= 1 && st.rereads >= 1, "{st:?}");
    })
    .await;
}

#[tokio::test]
async fn an_update_in_place_is_what_the_keeper_registers_again() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let reg = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        let raw = client(vec![etcd.endpoint()]);
        let a = inst("web", "10.0.0.1");
        reg.register(a.clone()).await.unwrap();
        let lease = reg.lease_of(&a).unwrap();
        // A closing announcement: the same record, now unhealthy, in place.
        let mut closing = a.clone();
        closing.healthy = false;
        reg.register(closing.clone()).await.unwrap();
        assert_eq!(reg.lease_of(&a), Some(lease), "no new lease");
        assert_eq!(
            raw.lease_keepalive(lease).await.unwrap().map(|t| t > 0),
            Some(true)
        );
        let mut w = watch(&reg, "web").await;
        wait_snapshot(&mut w, WAIT, "closing", |s| s == [closing.clone()]).await;

        // The lease is revoked behind the registry's back: the keeper puts
        // back the closing record, not the first one.
        assert!(raw.lease_revoke(lease).await.unwrap());
        wait_snapshot(&mut w, WAIT, "revoked", |s| s.is_empty()).await;
        let s = wait_snapshot(&mut w, WAIT, "back", |s| !s.is_empty()).await;
        assert_eq!(s, vec![closing]);
        assert_ne!(reg.lease_of(&a), Some(lease));
    })
    .await;
}

#[tokio::test]
async fn liveness_probes_per_interval_do_not_grow_with_the_number_of_watched_apps() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        // Two clients (one registry each): one watched app vs eight. Probes
        // every 250 ms without jitter (the cadence is a knob; 2 s by default).
        const EVERY: Duration = Duration::from_millis(250);
        let quick = || {
            let mut c = config(vec![etcd.endpoint()]);
            c.liveness_probe_interval = Some(EVERY);
            c
        };
        let one = EtcdRegistry::new(quick()).unwrap();
        let eight = EtcdRegistry::new(quick()).unwrap();
        let mut watches = vec![watch(&one, "app0").await];
        for n in 0..8 {
            watches.push(watch(&eight, &format!("app{n}")).await);
        }
        for w in &mut watches {
            assert!(next_item(w, WAIT).await.unwrap().is_ok());
        }
        let before = (one.client().probes_sent(), eight.client().probes_sent());
        let t = Instant::now();
        // Until the single-app client has sent 3 more probes (bounded).
        eventually(WAIT, "three probe intervals", || async {
            one.client().probes_sent() - before.0 >= 3
        })
        .await;
        let took = t.elapsed();
        let p1 = one.client().probes_sent() - before.0;
        let p8 = eight.client().probes_sent() - before.1;
        // Three probes take at least two intervals; at most three
        // intervals and three probe deadlines, twice, plus slack.
        let probe_timeout = one.config().probe_timeout;
        let limit = (EVERY + probe_timeout) * 3 * 2 + SLACK;
        println!(
            "liveness probes in {took:?} (bound {limit:?}): 1 watched app {p1}, 8 watched apps {p8}"
        );
        // One probe per interval per client; per-watch probing sent 8 times more.
        assert!(
            took >= EVERY * 2 && took <= limit,
            "{took:?} for {p1} probes"
        );
        assert!(p8 <= p1 + 1, "{p8} probes for 8 apps vs {p1} for one");
        assert_eq!(eight.stats().probes_sent, eight.client().probes_sent());
        assert_eq!(eight.stats().liveness_failures, 0);
    })
    .await;
}
