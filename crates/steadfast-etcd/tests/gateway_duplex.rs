//! Executable evidence for the design of the shared watch stream: etcd's
//! JSON gateway (3.4, Go net/http over HTTP/1.1) answers a watch only once
//! its request body is complete. A streaming body that stays open to carry
//! later `create_request`s gets no response at all (not even the headers),
//! so create and cancel requests cannot be added to a live gateway stream;
//! a body that is complete before the answer can carry many creates (with
//! client-chosen watch ids, which etcd 3.4 honours) and even a cancel.

mod common;

use std::time::Duration;

use base64::Engine;
use common::bounded;
use futures::StreamExt;
use serde_json::json;
use steadfast_etcd::harness::EtcdServer;
use tokio::sync::mpsc;

/// One NDJSON `create_request` line watching `prefix` with `watch_id`.
fn create(prefix: &str, watch_id: i64) -> Vec<u8> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let end = format!("{}0", prefix.trim_end_matches('/'));
    let v = json!({"create_request": {"key": b64(prefix), "range_end": b64(&end), "watch_id": watch_id}});
    format!("{v}\n").into_bytes()
}

#[tokio::test]
async fn the_gateway_answers_a_watch_only_once_its_request_body_is_complete() {
    bounded(async {
        let etcd = EtcdServer::start().await.unwrap();
        let http = reqwest::Client::builder().http1_only().build().unwrap();
        let url = format!("{}/v3/watch", etcd.endpoint());

        // A body that stays open: the first create goes out at once.
        let (tx, rx) = mpsc::unbounded_channel::<Result<Vec<u8>, std::io::Error>>();
        tx.send(Ok(create("/a/", 7))).unwrap();
        let body = reqwest::Body::wrap_stream(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|i| (i, rx))
        }));
        let send = http.post(&url).body(body).send();
        tokio::pin!(send);
        let early = tokio::time::timeout(Duration::from_millis(1500), &mut send).await;
        assert!(
            early.is_err(),
            "no answer, not even headers, while the body is open"
        );
        // A second create and a cancel, then the end of the body: now every
        // request is answered, with the watch ids the client chose.
        tx.send(Ok(create("/b/", 9))).unwrap();
        let cancel = json!({"cancel_request": {"watch_id": 7}});
        tx.send(Ok(format!("{cancel}\n").into_bytes())).unwrap();
        drop(tx);
        let resp = tokio::time::timeout(Duration::from_secs(5), send)
            .await
            .expect("answered once the body ended")
            .unwrap();
        let mut body = resp.bytes_stream();
        let mut text = String::new();
        while !(text.contains(r#""watch_id":"9","created":true"#) && text.contains("canceled")) {
            let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
                .await
                .expect("more messages")
                .expect("stream open")
                .unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert!(text.contains(r#""watch_id":"7","created":true"#), "{text}");
        assert!(text.contains(r#""watch_id":"7","canceled":true"#), "{text}");
    })
    .await;
}
