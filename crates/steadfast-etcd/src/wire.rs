//! Serde types of the etcd v3 JSON gateway (etcd 3.4 / 3.5).
//!
//! The gateway is protobuf-to-JSON: int64/uint64 fields come back as JSON
//! strings, bytes fields are standard base64 with padding, and every zero or
//! default value is omitted. So every field here is `#[serde(default)]`,
//! integers go through [`int`] (string or number), and bytes through [`b64`].
//! Unknown fields are ignored, as the gateway itself does.

use serde::{Deserialize, Deserializer};

/// Deserializes an integer sent either as a JSON string or a JSON number.
pub mod int {
    use std::str::FromStr;

    use serde::{de::Error, Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum StrOrNum<T> {
        Str(String),
        Num(T),
    }

    /// Reads `"123"` or `123` into `T`.
    pub fn de<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr + Deserialize<'de>,
        T::Err: std::fmt::Display,
    {
        match StrOrNum::<T>::deserialize(d)? {
            StrOrNum::Str(s) => s.parse().map_err(D::Error::custom),
            StrOrNum::Num(n) => Ok(n),
        }
    }
}

/// Base64 (standard alphabet, padded) encoding of gateway bytes fields.
pub mod b64 {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use serde::{de::Error, Deserialize, Deserializer};

    /// Encodes raw bytes for a request body.
    pub fn encode(bytes: impl AsRef<[u8]>) -> String {
        STANDARD.encode(bytes)
    }

    /// Reads a base64 string into raw bytes.
    pub fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD.decode(s.as_bytes()).map_err(D::Error::custom)
    }
}

/// The end of a prefix range: the prefix with its last byte incremented
/// (bytes equal to 0xff are dropped first; an all-0xff prefix means "to the
/// end of the keyspace", `\0`).
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The header every response carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ResponseHeader {
    /// Id of the cluster that answered (uint64).
    #[serde(default, deserialize_with = "int::de")]
    pub cluster_id: u64,
    /// Id of the member that answered (uint64).
    #[serde(default, deserialize_with = "int::de")]
    pub member_id: u64,
    /// Store revision when the response was made (absent on a
    /// compaction-cancel watch response).
    #[serde(default, deserialize_with = "int::de")]
    pub revision: i64,
    /// Raft term of the member that answered.
    #[serde(default, deserialize_with = "int::de")]
    pub raft_term: u64,
}

/// One key-value pair.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct KeyValue {
    /// The key bytes.
    #[serde(default, deserialize_with = "b64::de")]
    pub key: Vec<u8>,
    /// Revision of the key's creation.
    #[serde(default, deserialize_with = "int::de")]
    pub create_revision: i64,
    /// Revision of the key's last modification.
    #[serde(default, deserialize_with = "int::de")]
    pub mod_revision: i64,
    /// Number of modifications since creation.
    #[serde(default, deserialize_with = "int::de")]
    pub version: i64,
    /// The value bytes (absent when empty).
    #[serde(default, deserialize_with = "b64::de")]
    pub value: Vec<u8>,
    /// Lease the key is attached to (0 = none).
    #[serde(default, deserialize_with = "int::de")]
    pub lease: i64,
}

/// Answer of `POST /v3/kv/range`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct RangeResponse {
    /// Response header.
    #[serde(default)]
    pub header: ResponseHeader,
    /// Matching pairs (absent when none).
    #[serde(default)]
    pub kvs: Vec<KeyValue>,
    /// Whether more pairs exist than were returned (only with a limit).
    #[serde(default)]
    pub more: bool,
    /// Number of matching keys.
    #[serde(default, deserialize_with = "int::de")]
    pub count: i64,
}

/// Answer of `POST /v3/kv/txn` (only what the batched ranges read).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct TxnResponse {
    /// Response header (the only full one: the ranges inside carry just
    /// the revision).
    #[serde(default)]
    pub header: ResponseHeader,
    /// Whether the compare succeeded (absent = false).
    #[serde(default)]
    pub succeeded: bool,
    /// One answer per operation, in order.
    #[serde(default)]
    pub responses: Vec<ResponseOp>,
}

/// One operation's answer inside a [`TxnResponse`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ResponseOp {
    /// The answer of a `request_range`.
    #[serde(default)]
    pub response_range: Option<RangeResponse>,
}

/// Answer of `POST /v3/kv/put`, `/v3/kv/compaction` and `/v3/lease/revoke`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct HeaderOnly {
    /// Response header.
    #[serde(default)]
    pub header: ResponseHeader,
}

/// Answer of `POST /v3/kv/deleterange`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct DeleteRangeResponse {
    /// Response header.
    #[serde(default)]
    pub header: ResponseHeader,
    /// Number of keys deleted.
    #[serde(default, deserialize_with = "int::de")]
    pub deleted: i64,
}

/// Answer of `POST /v3/lease/grant`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct LeaseGrantResponse {
    /// Response header.
    #[serde(default)]
    pub header: ResponseHeader,
    /// The granted lease id.
    #[serde(rename = "ID", default, deserialize_with = "int::de")]
    pub id: i64,
    /// The granted TTL in seconds (at least 2 with default election timeouts).
    #[serde(rename = "TTL", default, deserialize_with = "int::de")]
    pub ttl: i64,
    /// Server-side error text, if any.
    #[serde(default)]
    pub error: String,
}

/// One answer of `POST /v3/lease/keepalive` (inside the `result` wrapper).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct LeaseKeepAliveResponse {
    /// Response header.
    #[serde(default)]
    pub header: ResponseHeader,
    /// The lease id.
    #[serde(rename = "ID", default, deserialize_with = "int::de")]
    pub id: i64,
    /// The refreshed TTL; absent (0) when the lease is gone.
    #[serde(rename = "TTL", default, deserialize_with = "int::de")]
    pub ttl: i64,
}

/// Answer of `POST /v3/maintenance/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct StatusResponse {
    /// Response header (its `member_id` is the answering member).
    #[serde(default)]
    pub header: ResponseHeader,
    /// Member id of the current leader (0 = none).
    #[serde(default, deserialize_with = "int::de")]
    pub leader: u64,
    /// Server version.
    #[serde(default)]
    pub version: String,
}

/// Kind of a watch event. The gateway omits `type` for PUT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum EventType {
    /// A key was created or modified.
    #[default]
    #[serde(rename = "PUT")]
    Put,
    /// A key was deleted (or its lease expired).
    #[serde(rename = "DELETE")]
    Delete,
}

/// One watch event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Event {
    /// PUT (default, omitted on the wire) or DELETE.
    #[serde(rename = "type", default)]
    pub kind: EventType,
    /// The pair after the event (a DELETE carries only key and mod_revision).
    #[serde(default)]
    pub kv: KeyValue,
    /// The pair before the event, when asked for.
    #[serde(default)]
    pub prev_kv: Option<KeyValue>,
}

/// One message of a watch stream (inside the `result` wrapper).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct WatchResponse {
    /// Response header (`revision` is the store's current revision; it is
    /// absent on a compaction cancel).
    #[serde(default)]
    pub header: ResponseHeader,
    /// Id of the watch on its stream (absent = 0 for the first one).
    #[serde(default, deserialize_with = "int::de")]
    pub watch_id: i64,
    /// Set on the answer to a create request.
    #[serde(default)]
    pub created: bool,
    /// Set when the server cancelled the watch.
    #[serde(default)]
    pub canceled: bool,
    /// Set with `canceled` when the start revision was compacted.
    #[serde(default, deserialize_with = "int::de")]
    pub compact_revision: i64,
    /// Why the watch was cancelled, if the server says.
    #[serde(default)]
    pub cancel_reason: String,
    /// Events of this message (one or more revisions).
    #[serde(default)]
    pub events: Vec<Event>,
}

impl WatchResponse {
    /// Whether this is a progress notification: nothing but a header.
    pub fn is_progress(&self) -> bool {
        !self.created && !self.canceled && self.events.is_empty()
    }
}

/// The error object of a unary call: `{"error","message","code"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct UnaryError {
    /// Error text.
    #[serde(default)]
    pub error: String,
    /// Error text (same as `error`).
    #[serde(default)]
    pub message: String,
    /// gRPC status code.
    #[serde(default)]
    pub code: i64,
}

/// The error object inside a stream:
/// `{"error":{"grpc_code","http_code","message","http_status"}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct StreamError {
    /// gRPC status code (14 = unavailable, e.g. "transport is closing").
    #[serde(default)]
    pub grpc_code: i64,
    /// HTTP status code equivalent.
    #[serde(default)]
    pub http_code: i64,
    /// Error text.
    #[serde(default)]
    pub message: String,
    /// HTTP status text.
    #[serde(default)]
    pub http_status: String,
}

/// One line of a streamed answer: `{"result":…}` or `{"error":{…}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamLine<T> {
    /// A `result` message.
    Result(T),
    /// A server-side stream error.
    Error(StreamError),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for StreamLine<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw<T> {
            #[serde(default = "Option::default")]
            result: Option<T>,
            #[serde(default)]
            error: Option<StreamError>,
        }
        let raw = Raw::<T>::deserialize(d)?;
        match (raw.result, raw.error) {
            (_, Some(e)) => Ok(StreamLine::Error(e)),
            (Some(r), None) => Ok(StreamLine::Result(r)),
            (None, None) => Err(serde::de::Error::custom(
                "stream line has neither `result` nor `error`",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_come_as_strings_or_numbers_and_defaults_are_omitted() {
        let r: RangeResponse = serde_json::from_str(
            r#"{"header":{"cluster_id":"14841639068965178418","revision":"5","raft_term":2}}"#,
        )
        .unwrap();
        assert_eq!(r.header.cluster_id, 14841639068965178418);
        assert_eq!(r.header.revision, 5);
        assert_eq!(r.header.raft_term, 2);
        assert!(r.kvs.is_empty() && r.count == 0 && !r.more);
    }

    #[test]
    fn watch_event_without_type_is_a_put_and_delete_has_only_key() {
        let line = r#"{"result":{"header":{"revision":"16"},"events":[
            {"kv":{"key":"YQ==","mod_revision":"15","value":"aGVsbG8="}},
            {"type":"DELETE","kv":{"key":"YQ==","mod_revision":"16"}}]}}"#;
        let StreamLine::Result(w) =
            serde_json::from_str::<StreamLine<WatchResponse>>(line).unwrap()
        else {
            panic!("not a result")
        };
        assert_eq!(w.events[0].kind, EventType::Put);
        assert_eq!(w.events[0].kv.value, b"hello");
        assert_eq!(w.events[1].kind, EventType::Delete);
        assert!(w.events[1].kv.value.is_empty());
        assert_eq!(w.watch_id, 0);
    }

    #[test]
    fn stream_error_object_and_lease_gone() {
        let e = r#"{"error":{"grpc_code":14,"http_code":503,"message":"transport is closing","http_status":"Service Unavailable"}}"#;
        match serde_json::from_str::<StreamLine<WatchResponse>>(e).unwrap() {
            StreamLine::Error(e) => assert_eq!(e.grpc_code, 14),
            other => panic!("{other:?}"),
        }
        let k = r#"{"result":{"header":{},"ID":"2324035701326297874"}}"#;
        match serde_json::from_str::<StreamLine<LeaseKeepAliveResponse>>(k).unwrap() {
            StreamLine::Result(k) => assert_eq!((k.id, k.ttl), (2324035701326297874, 0)),
            other => panic!("{other:?}"),
        }
        assert!(serde_json::from_str::<StreamLine<WatchResponse>>("{}").is_err());
    }

    #[test]
    fn prefix_range_end_increments_the_last_byte() {
        assert_eq!(prefix_range_end(b"/a/"), b"/a0");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b"\xff"), vec![0]);
    }
}
