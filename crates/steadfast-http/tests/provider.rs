//! Provider side over real loopback sockets: the standalone MetadataServer,
//! the scope mounted in a user's own App, and the store behind both, read
//! back through the real HttpMetadataFetcher.

mod support;

use std::net::SocketAddr;

use actix_web::{web, App, HttpResponse, HttpServer};
use steadfast_core::{FetchError, MetadataFetcher};
use steadfast_http::{
    metadata_scope, HttpMetadataFetcher, MetadataServer, MetadataStore, DEFAULT_BASE_PATH,
};
use support::{instance, metadata, APP};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A GET through a client that ignores proxy settings of the environment.
async fn plain_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    let client = reqwest::Client::builder().no_proxy().build()?;
    client.get(url).send().await
}

fn fetcher() -> HttpMetadataFetcher {
    HttpMetadataFetcher::builder().build().expect("fetcher")
}

#[test]
fn store_publishes_withdraws_and_shares_between_clones() {
    let store = MetadataStore::new();
    let a = metadata(APP, 20880, "a");
    let b = metadata(APP, 20880, "b");
    assert!(store.is_empty());
    assert!(store.publish(a.clone()).is_none());
    let clone = store.clone();
    clone.publish(b.clone());
    assert_eq!(store.len(), 2);
    assert_eq!(store.get(&a.revision).as_deref(), Some(&a));
    let mut revs = vec![a.revision.clone(), b.revision.clone()];
    revs.sort();
    assert_eq!(store.revisions(), revs);
    assert_eq!(store.publish(a.clone()).as_deref(), Some(&a));
    assert_eq!(clone.withdraw(&a.revision).as_deref(), Some(&a));
    assert!(store.get(&a.revision).is_none());
    assert!(store.withdraw(&a.revision).is_none());
}

#[actix_rt::test]
async fn server_serves_a_published_revision() {
    let store = MetadataStore::new();
    let info = metadata(APP, 20880, "good");
    store.publish(info.clone());
    let server = MetadataServer::start(loopback(), DEFAULT_BASE_PATH, store).expect("server");
    assert_ne!(server.local_addr().port(), 0);
    let f = fetcher();
    let inst = instance(&info, "127.0.0.1", 20880, server.local_addr().port());
    let got = f.fetch(&inst, &info.revision).await.expect("fetched");
    assert_eq!(got, info);
    let m = f.metrics();
    assert_eq!((m.successes, m.errors()), (1, 0));
    server.stop(true).await;
}

#[actix_rt::test]
async fn unknown_and_withdrawn_revisions_are_404() {
    let store = MetadataStore::new();
    let info = metadata(APP, 20880, "gone");
    store.publish(info.clone());
    let server =
        MetadataServer::start(loopback(), DEFAULT_BASE_PATH, store.clone()).expect("server");
    let port = server.local_addr().port();
    let f = fetcher();
    let inst = instance(&info, "127.0.0.1", 20880, port);

    let err = f.fetch(&inst, "nope").await.unwrap_err();
    assert_eq!(err, FetchError::UnknownRevision("nope".into()));

    store.withdraw(&info.revision);
    let err = f.fetch(&inst, &info.revision).await.unwrap_err();
    assert_eq!(err, FetchError::UnknownRevision(info.revision.clone()));
    assert_eq!(f.metrics().by_label("unknown_revision"), Some(2));

    // The 404 carries a small JSON error body.
    let url = format!("http://127.0.0.1:{port}/steadfast/metadata/nope");
    let resp = plain_get(&url).await.expect("answer");
    assert_eq!(resp.status().as_u16(), 404);
    let body: serde_json::Value = resp.json().await.expect("json body");
    assert_eq!(body["error"], "unknown_revision");
    assert_eq!(body["revision"], "nope");
    server.stop(false).await;
}

#[actix_rt::test]
async fn scope_mounts_in_a_users_own_app_under_a_custom_base() {
    let store = MetadataStore::new();
    let info = metadata(APP, 20880, "custom");
    store.publish(info.clone());
    let server = HttpServer::new(move || {
        App::new()
            .route("/health", web::get().to(HttpResponse::Ok))
            .service(metadata_scope("custom/meta/", store.clone()))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(loopback())
    .expect("bind");
    let port = server.addrs()[0].port();
    let server = server.run();
    let handle = server.handle();
    let task = tokio::spawn(server);

    let inst = instance(&info, "127.0.0.1", 20880, port);
    let custom = HttpMetadataFetcher::builder()
        .base_path("/custom/meta")
        .build()
        .expect("fetcher");
    assert_eq!(
        custom.fetch(&inst, &info.revision).await.expect("fetched"),
        info
    );
    // The default base path is not mounted in this App: a plain 404.
    let err = fetcher().fetch(&inst, &info.revision).await.unwrap_err();
    assert_eq!(err, FetchError::UnknownRevision(info.revision.clone()));
    let health = plain_get(format!("http://127.0.0.1:{port}/health"))
        .await
        .expect("health");
    assert!(health.status().is_success());

    handle.stop(true).await;
    task.await.expect("join").expect("server ran");
}

#[actix_rt::test]
async fn body_cap_is_inclusive() {
    let store = MetadataStore::new();
    let info = metadata(APP, 20880, "cap");
    store.publish(info.clone());
    let len = serde_json::to_vec(&info).unwrap().len();
    let server = MetadataServer::start(loopback(), DEFAULT_BASE_PATH, store).expect("server");
    let inst = instance(&info, "127.0.0.1", 20880, server.local_addr().port());

    let exact = HttpMetadataFetcher::builder()
        .max_body_bytes(len)
        .build()
        .unwrap();
    assert_eq!(exact.fetch(&inst, &info.revision).await.unwrap(), info);
    let short = HttpMetadataFetcher::builder()
        .max_body_bytes(len - 1)
        .build()
        .unwrap();
    assert_eq!(
        short.fetch(&inst, &info.revision).await.unwrap_err(),
        FetchError::TooLarge { limit: len - 1 }
    );
    server.stop(true).await;
}

#[actix_rt::test]
async fn stopped_server_is_unreachable() {
    let store = MetadataStore::new();
    let info = metadata(APP, 20880, "stop");
    store.publish(info.clone());
    let server = MetadataServer::start(loopback(), "/", store).expect("server");
    let inst = instance(&info, "127.0.0.1", 20880, server.local_addr().port());
    let f = HttpMetadataFetcher::builder()
        .base_path("")
        .build()
        .unwrap();
    assert_eq!(f.fetch(&inst, &info.revision).await.unwrap(), info);
    server.stop(false).await;
    // A pooled keep-alive connection may still be answered until the
    // worker thread has wound down: allow a short, bounded grace.
    assert_eventually_unreachable(&f, &inst, &info.revision).await;
    // A fresh client (no pooled connection) is refused too.
    assert_eventually_unreachable(&fetcher(), &inst, &info.revision).await;
}

async fn assert_eventually_unreachable(
    f: &HttpMetadataFetcher,
    inst: &steadfast_core::ServiceInstance,
    revision: &str,
) {
    let start = std::time::Instant::now();
    loop {
        match f.fetch(inst, revision).await {
            Err(FetchError::Unreachable(_)) => return,
            other => {
                // A generous failure bound (real time, shared machine).
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(10),
                    "still not Unreachable 10 s after stop: {other:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
