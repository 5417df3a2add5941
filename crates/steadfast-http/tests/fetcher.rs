//! The HTTP fetcher against misbehaving peers over real loopback sockets:
//! oversized bodies, wrong or malformed metadata, server errors, silence,
//! closed ports, and hosts named anywhere but the registry record.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use steadfast_core::{FetchError, MetadataFetcher};
use steadfast_http::{HttpFetcherError, HttpMetadataFetcher, MetadataServer, MetadataStore};
use support::{closed_port, instance, metadata, BadServer, Reply, APP, MIB};

fn fetcher() -> HttpMetadataFetcher {
    HttpMetadataFetcher::builder()
        .timeout(Duration::from_millis(1500))
        .build()
        .expect("fetcher")
}

/// Fetches `tag`'s revision from a bad server answering `reply`.
async fn fetch_from(reply: Reply, f: &HttpMetadataFetcher) -> (FetchError, BadServer) {
    let server = BadServer::start(reply).await;
    let info = metadata(APP, 20880, "asked");
    let inst = instance(&info, "127.0.0.1", 20880, server.port());
    let err = f.fetch(&inst, &info.revision).await.unwrap_err();
    (err, server)
}

#[actix_rt::test]
async fn oversized_body_with_content_length_is_too_large() {
    let f = fetcher();
    let (err, server) = fetch_from(Reply::ok(&vec![b'a'; 2 * MIB]), &f).await;
    assert_eq!(err, FetchError::TooLarge { limit: MIB });
    assert_eq!(server.accepted(), 1);
    assert_eq!(f.metrics().by_label("too_large"), Some(1));
}

#[actix_rt::test]
async fn oversized_chunked_body_is_too_large() {
    let f = fetcher();
    let reply = Reply::Chunked {
        total: 2 * MIB,
        chunk: 64 * 1024,
    };
    let (err, _server) = fetch_from(reply, &f).await;
    assert_eq!(err, FetchError::TooLarge { limit: MIB });
    assert_eq!(f.metrics().by_label("too_large"), Some(1));
}

#[actix_rt::test]
async fn small_chunked_body_is_read_whole() {
    let info = metadata(APP, 20880, "chunked");
    let json = serde_json::to_vec(&info).unwrap();
    // A chunked body made of several small frames.
    let mut raw =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
    for part in json.chunks(7) {
        raw.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        raw.extend_from_slice(part);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let server = BadServer::start(Reply::Raw(Arc::new(raw))).await;
    let inst = instance(&info, "127.0.0.1", 20880, server.port());
    assert_eq!(fetcher().fetch(&inst, &info.revision).await.unwrap(), info);
}

#[actix_rt::test]
async fn metadata_of_another_revision_is_mismatch() {
    let other = metadata(APP, 20880, "other");
    let body = serde_json::to_vec(&other).unwrap();
    let f = fetcher();
    let (err, _server) = fetch_from(Reply::ok(&body), &f).await;
    assert!(matches!(err, FetchError::Mismatch { .. }), "{err:?}");
    assert_eq!(f.metrics().by_label("mismatch"), Some(1));
}

#[actix_rt::test]
async fn metadata_of_another_app_is_mismatch() {
    let asked = metadata(APP, 20880, "asked");
    let mut other = asked.clone();
    other.app = "impostor".into();
    let body = serde_json::to_vec(&other).unwrap();
    let (err, _server) = fetch_from(Reply::ok(&body), &fetcher()).await;
    assert_eq!(
        err,
        FetchError::Mismatch {
            expected: format!("{APP}@{}", asked.revision),
            actual: format!("impostor@{}", asked.revision),
        }
    );
}

#[actix_rt::test]
async fn malformed_json_is_malformed() {
    let f = fetcher();
    let (err, _server) = fetch_from(Reply::ok(b"{\"app\": \"greeter\", "), &f).await;
    assert!(matches!(err, FetchError::Malformed(_)), "{err:?}");
    let (err, _server) = fetch_from(Reply::ok(b"[1, 2, 3]"), &f).await;
    assert!(matches!(err, FetchError::Malformed(_)), "{err:?}");
    assert_eq!(f.metrics().by_label("malformed"), Some(2));
}

#[actix_rt::test]
async fn non_success_status_is_server_error_and_redirects_are_not_followed() {
    let f = fetcher();
    let (err, _server) = fetch_from(Reply::response("503 Service Unavailable", "", b""), &f).await;
    assert_eq!(err, FetchError::ServerError(503));

    let decoy = BadServer::start(Reply::ok(b"{}")).await;
    let location = format!("Location: http://127.0.0.1:{}/\r\n", decoy.port());
    let (err, _server) = fetch_from(Reply::response("302 Found", &location, b""), &f).await;
    assert_eq!(err, FetchError::ServerError(302));
    assert_eq!(decoy.accepted(), 0, "the redirect must not be followed");
    assert_eq!(f.metrics().by_label("server_error"), Some(2));
}

#[actix_rt::test]
async fn silent_server_times_out_within_the_configured_timeout() {
    let f = HttpMetadataFetcher::builder()
        .timeout(Duration::from_millis(250))
        .build()
        .unwrap();
    let start = Instant::now();
    let (err, server) = fetch_from(Reply::Silent, &f).await;
    let elapsed = start.elapsed();
    eprintln!("silent server: Timeout after {elapsed:?} (timeout 250 ms, bound 2 s)");
    assert_eq!(err, FetchError::Timeout);
    assert_eq!(server.accepted(), 1);
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(f.metrics().by_label("timeout"), Some(1));
}

#[actix_rt::test]
async fn closed_port_is_unreachable() {
    let f = fetcher();
    let info = metadata(APP, 20880, "asked");
    let inst = instance(&info, "127.0.0.1", 20880, closed_port());
    let err = f.fetch(&inst, &info.revision).await.unwrap_err();
    assert!(matches!(err, FetchError::Unreachable(_)), "{err:?}");
    assert_eq!(f.metrics().by_label("unreachable"), Some(1));
}

#[actix_rt::test]
async fn connection_closed_without_answer_is_unreachable() {
    let (err, _server) = fetch_from(Reply::Close, &fetcher()).await;
    assert!(matches!(err, FetchError::Unreachable(_)), "{err:?}");
}

#[actix_rt::test]
async fn host_named_in_metadata_params_is_ignored() {
    let store = MetadataStore::new();
    let info = metadata(APP, 20880, "record-host");
    store.publish(info.clone());
    let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let good = MetadataServer::start(bind, steadfast_http::DEFAULT_BASE_PATH, store).unwrap();
    let decoy_body = serde_json::to_vec(&info).unwrap();
    let decoy = BadServer::start(Reply::ok(&decoy_body)).await;
    let decoy_addr = format!("127.0.0.1:{}", decoy.port());

    let mut inst = instance(&info, "127.0.0.1", 20880, good.local_addr().port());
    for key in ["host", "steadfast.metadata.host", "metadata.host"] {
        inst.metadata.insert(key.into(), decoy_addr.clone());
    }
    inst.metadata
        .insert("url".into(), format!("http://{decoy_addr}/steadfast"));
    let f = fetcher();
    assert_eq!(
        f.url_for(&inst, &info.revision).unwrap().as_str(),
        format!(
            "http://127.0.0.1:{}/steadfast/metadata/{}",
            good.local_addr().port(),
            info.revision
        )
    );
    assert_eq!(f.fetch(&inst, &info.revision).await.unwrap(), info);

    // With an unusable record host the fetcher gives up; it does not fall
    // back to a host from the metadata.
    inst.host = String::new();
    let err = f.fetch(&inst, &info.revision).await.unwrap_err();
    assert!(matches!(err, FetchError::NoEndpoint(_)), "{err:?}");
    inst.host = format!("127.0.0.1:{}", decoy.port());
    let err = f.fetch(&inst, &info.revision).await.unwrap_err();
    assert!(matches!(err, FetchError::NoEndpoint(_)), "{err:?}");
    assert_eq!(decoy.accepted(), 0, "the decoy must never be contacted");
    let m = f.metrics();
    assert_eq!((m.successes, m.by_label("no_endpoint")), (1, Some(2)));
    good.stop(true).await;
}

#[test]
fn builder_rejects_invalid_settings() {
    let b = HttpMetadataFetcher::builder;
    assert!(matches!(
        b().timeout(Duration::ZERO).build(),
        Err(HttpFetcherError::ZeroTimeout("timeout"))
    ));
    assert!(matches!(
        b().connect_timeout(Duration::ZERO).build(),
        Err(HttpFetcherError::ZeroTimeout("connect_timeout"))
    ));
    assert!(matches!(
        b().max_body_bytes(0).build(),
        Err(HttpFetcherError::ZeroBodyLimit)
    ));
    for bad in ["/a b", "/x?y", "/../etc", "/%2e"] {
        assert!(
            matches!(
                b().base_path(bad).build(),
                Err(HttpFetcherError::InvalidBasePath(_))
            ),
            "{bad:?}"
        );
    }
    assert!(b().base_path("/a/b-c_d.e~/").build().is_ok());
}
