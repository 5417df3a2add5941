//! Newline-delimited JSON framing of the gateway's streamed answers.
//!
//! The gateway writes one JSON object plus `\n` per HTTP chunk, but the HTTP
//! client promises no chunk boundaries, so lines are cut here across
//! arbitrary byte boundaries. The error object etcd writes on SIGTERM has no
//! trailing newline, so the buffer must be flushed at end of stream
//! ([`LineFramer::finish`]). Sans-IO: bytes in, lines out.

use serde::de::DeserializeOwned;

use crate::wire::{StreamError, StreamLine};

/// Splits a byte stream into lines.
#[derive(Debug, Default)]
pub struct LineFramer {
    buf: Vec<u8>,
}

impl LineFramer {
    /// An empty framer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk and returns every complete, non-blank line it closed
    /// (without the newline).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut parts = chunk.split(|&b| b == b'\n');
        // The last part has no newline after it: it stays buffered.
        let mut part = parts.next().unwrap_or_default();
        for next in parts {
            self.buf.extend_from_slice(part);
            let line = std::mem::take(&mut self.buf);
            if !is_blank(&line) {
                lines.push(line);
            }
            part = next;
        }
        self.buf.extend_from_slice(part);
        lines
    }

    /// Ends the stream: returns the unterminated last line, if not blank.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let line = std::mem::take(&mut self.buf);
        (!is_blank(&line)).then_some(line)
    }

    /// Bytes buffered waiting for a newline.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// What one line of a stream turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line<T> {
    /// A `{"result":…}` message.
    Message(T),
    /// A `{"error":{…}}` object: the server ended the stream.
    ServerError(StreamError),
    /// The line is not valid JSON of the expected shape.
    Malformed(String),
}

/// Parses one line of a streamed answer.
pub fn parse_line<T: DeserializeOwned>(line: &[u8]) -> Line<T> {
    match serde_json::from_slice::<StreamLine<T>>(line) {
        Ok(StreamLine::Result(m)) => Line::Message(m),
        Ok(StreamLine::Error(e)) => Line::ServerError(e),
        Err(e) => {
            let head: Vec<u8> = line.iter().copied().take(200).collect();
            Line::Malformed(format!("{e}: {}", String::from_utf8_lossy(&head)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WatchResponse;

    const CREATED: &str = r#"{"result":{"header":{"revision":"13"},"created":true}}"#;
    const EVENT: &str = r#"{"result":{"header":{"revision":"14"},"events":[{"kv":{"key":"YQ==","mod_revision":"14","value":"aGVsbG8="}}]}}"#;
    const SIGTERM: &str = r#"{"error":{"grpc_code":14,"http_code":503,"message":"transport is closing","http_status":"Service Unavailable"}}"#;

    #[test]
    fn a_message_split_across_chunks_at_every_byte_is_reassembled() {
        let all = format!("{CREATED}\n{EVENT}\n");
        for cut in 0..all.len() {
            let mut f = LineFramer::new();
            let (a, b) = all.as_bytes().split_at(cut);
            let mut lines = f.push(a);
            lines.extend(f.push(b));
            assert_eq!(lines.len(), 2, "cut at {cut}");
            assert_eq!(lines[0], CREATED.as_bytes());
            assert_eq!(lines[1], EVENT.as_bytes());
            assert_eq!(f.finish(), None);
        }
    }

    #[test]
    fn byte_by_byte_and_many_messages_in_one_chunk() {
        let all = format!("{CREATED}\n\n{EVENT}\r\n{CREATED}\n");
        let mut f = LineFramer::new();
        let mut n = 0;
        for b in all.as_bytes() {
            n += f.push(std::slice::from_ref(b)).len();
        }
        assert_eq!(n, 3);
        let mut f = LineFramer::new();
        let lines = f.push(all.as_bytes());
        assert_eq!(lines.len(), 3);
        // A CRLF line still parses: JSON allows trailing whitespace.
        assert!(matches!(
            parse_line::<WatchResponse>(&lines[1]),
            Line::Message(_)
        ));
    }

    #[test]
    fn the_error_object_without_newline_is_flushed_at_eof() {
        let mut f = LineFramer::new();
        let body = format!("{EVENT}\n{SIGTERM}");
        let (a, b) = body.as_bytes().split_at(body.len() - 10);
        assert_eq!(f.push(a).len(), 1);
        assert!(f.push(b).is_empty());
        assert!(f.pending() > 0);
        let last = f.finish().expect("flushed");
        match parse_line::<WatchResponse>(&last) {
            Line::ServerError(e) => {
                assert_eq!(e.grpc_code, 14);
                assert_eq!(e.message, "transport is closing");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f.finish(), None);
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        assert!(matches!(
            parse_line::<WatchResponse>(b"{\"result\":"),
            Line::Malformed(_)
        ));
        assert!(matches!(
            parse_line::<WatchResponse>(b"\xff\xfe"),
            Line::Malformed(_)
        ));
    }
}
