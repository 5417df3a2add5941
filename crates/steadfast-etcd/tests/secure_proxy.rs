//! The etcd client ignores `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY` and
//! goes through a proxy only when `EtcdConfig::proxy` names one. Its own
//! test binary: it sets the proxy variables of the whole process.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use steadfast_etcd::harness::EtcdServer;
use steadfast_etcd::EtcdClient;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A "proxy" that records the first bytes of each connection and hangs up.
async fn fake_proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = [0u8; 256];
            let n = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            let head = String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned();
            log.lock().unwrap().push(head);
        }
    });
    (url, seen)
}

#[tokio::test]
async fn proxy_variables_are_ignored_unless_a_proxy_is_configured() {
    bounded(async {
        // etcd first: the harness' health check must not see the variables.
        let etcd = EtcdServer::start().await.unwrap();
        let (proxy, seen) = fake_proxy().await;
        for var in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            std::env::set_var(var, &proxy);
        }
        std::env::remove_var("NO_PROXY");
        std::env::remove_var("no_proxy");

        let plain = client(vec![etcd.endpoint()]);
        plain.put(b"/proxy/k", b"v", 0).await.unwrap();
        let configured = EtcdClient::from_config(&config(vec![etcd.endpoint()])).unwrap();
        configured.get(b"/proxy/k").await.unwrap();
        assert!(
            seen.lock().unwrap().is_empty(),
            "went through the proxy: {seen:?}"
        );

        // Asked for: every call goes to the proxy (which hangs up here).
        let via = config(vec![etcd.endpoint()]).proxy(&proxy);
        let via = EtcdClient::from_config(&via).unwrap();
        assert!(via.get(b"/proxy/k").await.is_err());
        let seen = seen.lock().unwrap().clone();
        let wanted = format!("POST {}/v3/kv/range", etcd.endpoint());
        assert!(seen.iter().any(|h| h.starts_with(&wanted)), "{seen:?}");
    })
    .await;
}
