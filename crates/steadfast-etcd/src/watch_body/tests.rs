//! Unit tests of the watch body parser, on synthetic chunks.

use std::convert::Infallible;
use std::fmt;

use futures::executor::block_on;
use futures::stream;

use super::*;

const CREATED: &str = r#"{"result":{"header":{"revision":"13"},"created":true}}"#;
const EVENT: &str = r#"{"result":{"header":{"revision":"14"},"events":[{"kv":{"key":"YQ==","mod_revision":"14","value":"aGVsbG8="}}]}}"#;
const SIGTERM: &str = r#"{"error":{"grpc_code":14,"http_code":503,"message":"transport is closing","http_status":"Service Unavailable"}}"#;

#[derive(Debug)]
struct Eof;

impl fmt::Display for Eof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unexpected EOF during chunk size line")
    }
}

impl std::error::Error for Eof {}

fn collect(s: WatchStream) -> Vec<Result<WatchResponse, WatchError>> {
    block_on(s.collect::<Vec<_>>())
}

#[test]
fn messages_split_across_chunks_then_the_sigterm_object_without_newline() {
    let body = format!("{CREATED}\n{EVENT}\n{SIGTERM}");
    let chunks: Vec<Result<Vec<u8>, Infallible>> =
        body.as_bytes().chunks(7).map(|c| Ok(c.to_vec())).collect();
    let items = collect(watch_stream(stream::iter(chunks)));
    assert_eq!(items.len(), 3);
    assert!(items[0].as_ref().unwrap().created);
    assert_eq!(items[1].as_ref().unwrap().events[0].kv.mod_revision, 14);
    match &items[2] {
        Err(WatchError::Server(e)) => assert_eq!(e.grpc_code, 14),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_broken_body_yields_complete_lines_then_a_transport_error_and_ends() {
    let chunks: Vec<Result<Vec<u8>, Eof>> = vec![
        Ok(format!("{CREATED}\n{}", EVENT.get(..20).unwrap()).into_bytes()),
        Err(Eof),
        Ok(b"never read".to_vec()),
    ];
    let items = collect(watch_stream(stream::iter(chunks)));
    assert_eq!(items.len(), 2);
    assert!(items[0].is_ok());
    assert!(matches!(&items[1], Err(WatchError::Transport(m)) if m.contains("EOF")));
}

#[test]
fn a_clean_eof_ends_the_stream_and_garbage_is_malformed() {
    let ok: Vec<Result<&[u8], Infallible>> = vec![Ok(CREATED.as_bytes()), Ok(b"\n")];
    let items = collect(watch_stream(stream::iter(ok)));
    assert_eq!(items.len(), 1);
    let bad: Vec<Result<&[u8], Infallible>> = vec![Ok(b"{\"result\":\n"), Ok(CREATED.as_bytes())];
    let items = collect(watch_stream(stream::iter(bad)));
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(WatchError::Malformed(_))));
}
