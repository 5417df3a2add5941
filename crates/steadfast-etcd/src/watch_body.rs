//! The body of a watch answer as a stream of parsed messages: NDJSON lines
//! cut by [`LineFramer`] across arbitrary chunk boundaries, the buffer
//! flushed at end of stream (etcd's SIGTERM error object has no trailing
//! newline), a broken body turned into [`WatchError::Transport`].

use std::collections::VecDeque;

use futures::stream::{self, BoxStream, StreamExt};

use crate::framing::{parse_line, Line, LineFramer};
use crate::wire::{StreamError, WatchResponse};

/// Longest watch line buffered before the stream is declared malformed.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// Why a watch stream stopped delivering messages (a clean end of stream is
/// the stream's `None`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// etcd wrote a `{"error":…}` object (e.g. "transport is closing" on
    /// SIGTERM) and ends the stream.
    #[error("etcd ended the watch: {} (gRPC code {})", .0.message, .0.grpc_code)]
    Server(StreamError),
    /// The connection broke mid-body (e.g. etcd was SIGKILLed).
    #[error("watch connection broke: {0}")]
    Transport(String),
    /// A line was not a watch message.
    #[error("malformed watch message: {0}")]
    Malformed(String),
}

/// A live watch: parsed messages until the stream ends (`None`) or fails
/// (an `Err` item, after which it ends).
pub type WatchStream = BoxStream<'static, Result<WatchResponse, WatchError>>;

/// Turns a response body (chunks of bytes, or a transport error) into
/// parsed watch messages. Generic so it can be fed synthetic chunks.
pub fn watch_stream<S, B, E>(body: S) -> WatchStream
where
    S: futures::Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::error::Error + Send + 'static,
{
    struct State<S> {
        body: std::pin::Pin<Box<S>>,
        framer: LineFramer,
        lines: VecDeque<Vec<u8>>,
        ended: bool,
    }
    let state = State {
        body: Box::pin(body),
        framer: LineFramer::new(),
        lines: VecDeque::new(),
        ended: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(line) = st.lines.pop_front() {
                let item = match parse_line::<WatchResponse>(&line) {
                    Line::Message(m) => Ok(m),
                    Line::ServerError(e) => Err(WatchError::Server(e)),
                    Line::Malformed(m) => Err(WatchError::Malformed(m)),
                };
                if item.is_err() {
                    st.ended = true;
                    st.lines.clear();
                }
                return Some((item, st));
            }
            if st.ended {
                return None;
            }
            match st.body.next().await {
                Some(Ok(chunk)) => {
                    st.lines.extend(st.framer.push(chunk.as_ref()));
                    if st.framer.pending() > MAX_LINE {
                        st.ended = true;
                        let e = WatchError::Malformed(format!("line over {MAX_LINE} bytes"));
                        return Some((Err(e), st));
                    }
                }
                Some(Err(e)) => {
                    st.ended = true;
                    return Some((Err(WatchError::Transport(error_chain(&e))), st));
                }
                None => {
                    st.ended = true;
                    st.lines.extend(st.framer.finish());
                }
            }
        }
    })
    .boxed()
}

pub(crate) use steadfast_core::error_chain;

#[cfg(test)]
mod tests;
