//! The batched gateway calls of the shared watch hub: many prefix ranges in
//! one transaction, and one watch request carrying many creates.
//!
//! * A txn with an empty compare always succeeds and runs its operations
//!   at one revision; the gateway answers
//!   `{"header":{…},"succeeded":true,"responses":[{"response_range":{"header":{"revision":…},"kvs":[…]}},…]}`
//!   (checked on etcd 3.4.23): only the outer header is complete, so each
//!   range is given that one. etcd refuses more than `--max-txn-ops`
//!   (default 128) operations ("too many operations in txn request").
//! * The JSON gateway answers a watch only once its body is complete, and
//!   then honours every `create_request` line of it with the client-chosen
//!   `watch_id` (`tests/gateway_duplex.rs`): a shared stream is one
//!   complete NDJSON body of creates.
//! * But Go's HTTP/1 server, when the handler flushes its first answer
//!   (etcd's first `created`) while less than 256 KiB of the body is
//!   unread, *discards* the rest of the body (net/http
//!   `maxPostHandlerReadBytes`): the creates the gateway had not decoded
//!   yet are lost, silently (measured: 5 to 196 of 1000 creates honoured).
//!   With 256 KiB or more unread it leaves the body readable (and closes
//!   the connection after the answer, which a watch stream does anyway).
//!   So the body ends with [`BODY_PAD`] bytes of whitespace, which the
//!   gateway's JSON decoder skips: either every create was decoded before
//!   the first answer, or what remains is over the limit and is read on
//!   (measured: 1000 of 1000, every time; `tests/shared_watch.rs`).

use serde_json::{json, Value};

use super::{Attempt, EtcdClient};
use crate::error::GatewayError;
use crate::watch_body::WatchStream;
use crate::wire::{b64, prefix_range_end, RangeResponse, TxnResponse};

/// Most operations etcd accepts in one txn by default (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Whitespace appended to a watch body of several creates: above Go's
/// 256 KiB discard limit (see the module doc).
pub const BODY_PAD: usize = (256 << 10) + 1024;

/// One watch of a shared stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchCreate {
    /// The client-chosen watch id (above 0: id 0 is the gateway's
    /// "absent").
    pub watch_id: i64,
    /// The key prefix watched.
    pub prefix: String,
    /// First revision wanted (0 = from now).
    pub start_revision: i64,
}

impl EtcdClient {
    /// The pairs under each of `prefixes`, read in one txn (at one
    /// revision), in order. At most `MAX_TXN_OPS` prefixes.
    pub async fn range_prefixes(
        &self,
        prefixes: &[String],
    ) -> Result<Vec<RangeResponse>, GatewayError> {
        let ops: Vec<Value> = prefixes
            .iter()
            .map(|p| {
                json!({"request_range": {
                    "key": b64::encode(p),
                    "range_end": b64::encode(prefix_range_end(p.as_bytes())),
                }})
            })
            .collect();
        let t: TxnResponse = self.unary("/v3/kv/txn", json!({ "success": ops })).await?;
        if !t.succeeded || t.responses.len() != prefixes.len() {
            return Err(GatewayError::Decode(format!(
                "txn of {} ranges answered {} (succeeded: {})",
                prefixes.len(),
                t.responses.len(),
                t.succeeded
            )));
        }
        t.responses
            .into_iter()
            .map(|op| {
                let mut r = op.response_range.ok_or_else(|| {
                    GatewayError::Decode("txn answer without a range".to_string())
                })?;
                r.header = t.header.clone();
                Ok(r)
            })
            .collect()
    }

    /// Opens one watch stream carrying every watch of `creates`, optionally
    /// with progress notifications; returns it with the index of the
    /// endpoint that accepted it. Messages carry their `watch_id`.
    pub async fn open_watches(
        &self,
        creates: &[WatchCreate],
        progress_notify: bool,
    ) -> Result<(WatchStream, usize), GatewayError> {
        let mut body = Vec::with_capacity(creates.len().saturating_mul(160));
        for c in creates {
            let prefix = c.prefix.as_bytes();
            let mut create = json!({
                "key": b64::encode(prefix),
                "range_end": b64::encode(prefix_range_end(prefix)),
                "watch_id": c.watch_id,
            });
            if c.start_revision > 0 {
                create["start_revision"] = Value::String(c.start_revision.to_string());
            }
            if progress_notify {
                create["progress_notify"] = Value::Bool(true);
            }
            body.extend_from_slice(json!({ "create_request": create }).to_string().as_bytes());
            body.push(b'\n');
        }
        if creates.len() > 1 {
            body.resize(body.len().saturating_add(BODY_PAD), b' ');
            body.push(b'\n');
        }
        let timeout = self.watch_open_timeout;
        self.rotating_at(|endpoint, _| {
            let body = &body;
            async move {
                let r: Result<_, Attempt> = self.open_stream(&endpoint, body, timeout).await;
                r
            }
        })
        .await
    }
}
