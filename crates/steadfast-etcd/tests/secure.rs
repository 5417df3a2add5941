//! A secured etcd, for real: a user with a password (tokens sent on every
//! call, renewed when revoked, expired or lost by a restart, watches
//! resumed without loss), and TLS with a CA made at test time and a client
//! certificate (a wrong or missing CA is a typed error).

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use steadfast_core::{Registry, RegistryError};
use steadfast_etcd::harness::secure::{AuthEtcd, TlsEtcd};
use steadfast_etcd::harness::unique_prefix;
use steadfast_etcd::{EtcdClient, EtcdConfig, EtcdRegistry, EtcdTls, GatewayError};

const WAIT: Duration = Duration::from_secs(10);

fn authed(etcd: &AuthEtcd) -> EtcdConfig {
    config(vec![etcd.endpoint()]).with_auth(&etcd.user, &etcd.password)
}

#[tokio::test]
async fn with_auth_register_watch_and_list_work_and_without_it_nothing_does() {
    bounded(async {
        let etcd = AuthEtcd::start(&[]).await.unwrap();
        // Without credentials every call is refused (the symptom).
        let anonymous = EtcdRegistry::new(config(vec![etcd.endpoint()])).unwrap();
        match anonymous.register(inst("web", "10.0.0.9")).await {
            Err(RegistryError::Rejected(m)) => assert!(m.contains("user name is empty"), "{m}"),
            other => panic!("anonymous register: {other:?}"),
        }
        // A wrong password is a typed authentication error.
        let wrong = config(vec![etcd.endpoint()]).with_auth(&etcd.user, "wrong");
        let raw = EtcdClient::from_config(&wrong).unwrap();
        assert!(matches!(
            raw.put(b"/k", b"v", 0).await,
            Err(GatewayError::Auth(_))
        ));

        let reg = EtcdRegistry::new(authed(&etcd)).unwrap();
        let a = inst("web", "10.0.0.1");
        let mut w = watch(&reg, "web").await;
        let first = next_item(&mut w, WAIT).await.unwrap().unwrap();
        assert!(first.is_empty());
        reg.register(a.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a", |s| s == [a.clone()]).await;
        assert_eq!(listed(&reg, "web").await, vec![a.clone()]);
        // One token served the range, the watch, the put and the lease.
        assert_eq!(reg.client().authentications(), 1);
        reg.unregister(a.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "empty", |s| s.is_empty()).await;
    })
    .await;
}

#[tokio::test]
async fn credentials_do_no_harm_on_an_etcd_without_auth() {
    bounded(async {
        let etcd = steadfast_etcd::harness::EtcdServer::start().await.unwrap();
        let c = config(vec![etcd.endpoint()]).with_auth("svc", "pw");
        let raw = EtcdClient::from_config(&c).unwrap();
        raw.put(b"/noauth/k", b"v", 0).await.unwrap();
        assert_eq!(raw.get(b"/noauth/k").await.unwrap().kvs.len(), 1);
        assert_eq!(raw.authentications(), 0, "no token exists to fetch");
    })
    .await;
}

#[tokio::test]
async fn a_revoked_token_is_renewed_and_the_watch_loses_nothing() {
    bounded(async {
        let mut etcd = AuthEtcd::start(&[]).await.unwrap();
        let reg = EtcdRegistry::new(authed(&etcd)).unwrap();
        let (a, b, c) = (
            inst("web", "10.0.0.1"),
            inst("web", "10.0.0.2"),
            inst("web", "10.0.0.3"),
        );
        let mut w = watch(&reg, "web").await;
        reg.register(a.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a", |s| s.len() == 1).await;
        assert_eq!(reg.client().authentications(), 1);

        // Revoked (password change): the next call fetches a new token.
        etcd.revoke_tokens().await.unwrap();
        reg.register(b.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a+b", |s| s.len() == 2).await;
        assert_eq!(reg.client().authentications(), 2);

        // A restart loses every simple token: the watch re-opens with a
        // new one from its last revision, the keepalives carry on. A probe
        // that lands while the server is down reports the outage (an error
        // item: the source is stale), which is the truth, not a loss.
        let before = reg.stats();
        etcd.server.restart().await.unwrap();
        reg.register(c.clone()).await.unwrap();
        let (s, _outages) =
            wait_snapshot_through_stale(&mut w, WAIT, "a+b+c", |s| s.len() == 3).await;
        assert_eq!(ids(&s), ids_of(&[&a, &b, &c]));
        let after = reg.stats();
        assert!(reg.client().authentications() >= 3);
        assert_eq!(
            after.resyncs, before.resyncs,
            "resumed, not re-read: {after:?}"
        );
        assert_eq!(listed(&reg, "web").await.len(), 3);
    })
    .await;
}

#[tokio::test]
async fn a_watch_refused_for_its_token_reopens_from_its_revision() {
    bounded(async {
        let etcd = AuthEtcd::start(&[]).await.unwrap();
        let raw = EtcdClient::from_config(&authed(&etcd)).unwrap();
        let prefix = unique_prefix();
        let k1 = format!("{prefix}/k1");
        let rev = raw
            .put(k1.as_bytes(), b"v1", 0)
            .await
            .unwrap()
            .header
            .revision;
        etcd.revoke_tokens().await.unwrap();
        // etcd would answer this watch `created` + `canceled` (token
        // revoked); the client renews the token and re-opens it.
        let mut s = raw.watch(prefix.as_bytes(), rev, false).await.unwrap();
        let created = s.next().await.unwrap().unwrap();
        assert!(created.created && !created.canceled, "{created:?}");
        let replay = tokio::time::timeout(WAIT, s.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(replay.events.len(), 1);
        assert_eq!(replay.events[0].kv.key, k1.as_bytes());
        assert_eq!(raw.authentications(), 2);
    })
    .await;
}

#[tokio::test]
async fn an_expired_token_is_renewed() {
    bounded(async {
        // Simple tokens live 1 s after their last use here.
        let etcd = AuthEtcd::start(&["--auth-token-ttl=1"]).await.unwrap();
        let raw = EtcdClient::from_config(&authed(&etcd)).unwrap();
        raw.put(b"/exp/k", b"v1", 0).await.unwrap();
        assert_eq!(raw.authentications(), 1);
        // etcd drops expired simple tokens on a 1 s tick: wait past both.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        raw.put(b"/exp/k", b"v2", 0).await.unwrap();
        assert_eq!(raw.authentications(), 2);
        let got = raw.get(b"/exp/k").await.unwrap();
        assert_eq!(got.kvs[0].value, b"v2");
    })
    .await;
}

fn tls_config(etcd: &TlsEtcd, tls: Option<EtcdTls>) -> EtcdConfig {
    let c = config(vec![etcd.endpoint()]);
    match tls {
        Some(t) => c.with_tls(t),
        None => c,
    }
}

#[tokio::test]
async fn tls_with_the_custom_ca_and_a_client_certificate_works() {
    bounded(async {
        let etcd = TlsEtcd::start().await.unwrap();
        assert!(etcd.endpoint().starts_with("https://"));
        let tls = EtcdTls::default()
            .with_ca_pem(&etcd.ca_pem)
            .with_client_identity_pem(&etcd.client_cert_pem, &etcd.client_key_pem);
        let reg = EtcdRegistry::new(tls_config(&etcd, Some(tls))).unwrap();
        let a = inst("web", "10.0.0.1");
        let mut w = watch(&reg, "web").await;
        reg.register(a.clone()).await.unwrap();
        wait_snapshot(&mut w, WAIT, "a", |s| s == [a.clone()]).await;
        assert_eq!(listed(&reg, "web").await, vec![a]);
    })
    .await;
}

#[tokio::test]
async fn a_wrong_or_missing_ca_or_no_client_certificate_fails_typed() {
    bounded(async {
        let etcd = TlsEtcd::start().await.unwrap();
        let identity =
            |t: EtcdTls| t.with_client_identity_pem(&etcd.client_cert_pem, &etcd.client_key_pem);
        // The web roots alone do not know the test CA (the symptom).
        let none = EtcdClient::from_config(&tls_config(&etcd, None)).unwrap();
        match none.get(b"/k").await {
            Err(GatewayError::Tls { reason, .. }) => {
                assert!(reason.contains("UnknownIssuer"), "{reason}")
            }
            other => panic!("no CA: {other:?}"),
        }
        let wrong = identity(EtcdTls::default().with_ca_pem(&etcd.other_ca_pem));
        let wrong = EtcdClient::from_config(&tls_config(&etcd, Some(wrong))).unwrap();
        assert!(matches!(
            wrong.get(b"/k").await,
            Err(GatewayError::Tls { .. })
        ));
        // Trusting the server is not enough: etcd wants a client certificate.
        let anonymous = EtcdTls::default().with_ca_pem(&etcd.ca_pem);
        let anonymous = EtcdClient::from_config(&tls_config(&etcd, Some(anonymous))).unwrap();
        let err = anonymous.get(b"/k").await.unwrap_err();
        assert!(
            matches!(err, GatewayError::Tls { .. }),
            "no client certificate: {err:?}"
        );
        // A PEM that is no certificate is refused when the client is built.
        let junk = EtcdTls::default().with_ca_pem("junk");
        assert!(matches!(
            EtcdClient::from_config(&tls_config(&etcd, Some(junk))),
            Err(GatewayError::TlsConfig(_))
        ));
    })
    .await;
}

#[tokio::test]
async fn concurrent_callers_share_one_authentication() {
    bounded(async {
        let etcd = AuthEtcd::start(&[]).await.unwrap();
        let raw = EtcdClient::from_config(&authed(&etcd)).unwrap();
        let puts = |round: usize| {
            let raw = &raw;
            futures::future::join_all((0..16).map(move |i| async move {
                let key = format!("/concurrent/{round}/{i}");
                raw.put(key.as_bytes(), b"v", 0).await
            }))
        };
        // Sixteen callers without a token: one authenticates, the others
        // wait for its token (no lock held across its call).
        for r in puts(0).await {
            r.unwrap();
        }
        assert_eq!(raw.authentications(), 1);
        // Sixteen callers refused for a revoked token: one new token.
        etcd.revoke_tokens().await.unwrap();
        for r in puts(1).await {
            r.unwrap();
        }
        assert_eq!(raw.authentications(), 2);
    })
    .await;
}
