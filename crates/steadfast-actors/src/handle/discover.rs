//! [`Directory::discover`]: the directory as a tower discovery stream
//! (`tower::discover::Discover`, feature `tower`), so a tower balancer or a
//! tonic channel (`Channel::balance_channel`) spreads calls over what the
//! directory serves. Each published change of the directory becomes the
//! `Change::Remove`s and `Change::Insert`s that take the consumer to it
//! (core's [`EndpointDiff`]); a consumer slower than the directory sees the
//! newest state, never a backlog. When the directory closes, every
//! endpoint is removed and the stream ends.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use steadfast_core::{DirectoryStatus, Endpoint, EndpointChange, EndpointDiff};
use tower::discover::Change;

use super::Directory;

/// The stream [`Directory::discover`] returns: `Change<String, S>` items,
/// keyed by [`steadfast_core::endpoint_key`], each inserted service made by
/// the caller's `make`.
pub struct DirectoryDiscover<F, S> {
    directory: Directory,
    changes: Pin<Box<dyn Stream<Item = (u64, DirectoryStatus)> + Send>>,
    diff: EndpointDiff,
    make: F,
    pending: VecDeque<Change<String, S>>,
    ended: bool,
}

impl Directory {
    /// The directory as a tower discovery stream: `make` builds the service
    /// of each endpoint inserted (a tonic `Endpoint`, a client, ...). The
    /// stream holds a handle of the directory (it keeps the engine running
    /// while it lives, see [`Directory`]).
    pub fn discover<F, S>(&self, make: F) -> DirectoryDiscover<F, S>
    where
        F: FnMut(&Endpoint) -> S,
    {
        DirectoryDiscover {
            directory: self.clone(),
            changes: Box::pin(self.changes()),
            diff: EndpointDiff::new(),
            make,
            pending: VecDeque::new(),
            ended: false,
        }
    }
}

impl<F, S> DirectoryDiscover<F, S>
where
    F: FnMut(&Endpoint) -> S,
{
    fn queue(&mut self, changes: Vec<EndpointChange>) {
        for change in changes {
            self.pending.push_back(match change {
                EndpointChange::Insert(key, endpoint) => {
                    Change::Insert(key, (self.make)(&endpoint))
                }
                EndpointChange::Remove(key) => Change::Remove(key),
            });
        }
    }
}

impl<F, S> Stream for DirectoryDiscover<F, S>
where
    F: FnMut(&Endpoint) -> S + Unpin,
    S: Unpin,
{
    type Item = Result<Change<String, S>, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(change) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(change)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match this.changes.as_mut().poll_next(cx) {
                Poll::Ready(Some(_)) => match this.directory.snapshot() {
                    Ok(snapshot) => {
                        let changes = this.diff.update(snapshot.iter());
                        this.queue(changes);
                    }
                    Err(_) => this.close(),
                },
                Poll::Ready(None) => this.close(),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<F, S> DirectoryDiscover<F, S>
where
    F: FnMut(&Endpoint) -> S,
{
    /// The directory closed: remove everything, then end.
    fn close(&mut self) {
        let changes = self.diff.clear();
        self.queue(changes);
        self.ended = true;
    }
}
