//! The pool feed: keeps `pool.sync_endpoints(owner, addresses)` equal to
//! the addresses of the Caller's directory, so the clients of endpoints
//! that left drain and close. One task per Caller, ended by the first of:
//! the directory closing (its change stream ends) or the last clone of the
//! Caller dropping (its stop signal); the pool then forgets the owner.

use std::collections::BTreeSet;

use futures::StreamExt;
use steadfast_actors::Directory;
use steadfast_pool::{ClientFactory, ClientPool, OwnerId};
use tokio::sync::oneshot;

/// Dropped with the Caller's shared state: ends the feed task.
pub(crate) struct FeedStop {
    _stop: oneshot::Sender<()>,
}

/// The addresses (`host:port`) `dir` serves now (none once closed).
pub(crate) fn addresses(dir: &Directory) -> BTreeSet<String> {
    match dir.snapshot() {
        Ok(snapshot) => snapshot.iter().map(|e| e.address()).collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// Syncs the pool once now, then spawns the task that follows `dir`'s
/// changes. Must run inside a tokio runtime.
pub(crate) fn start<F: ClientFactory>(
    dir: &Directory,
    pool: &ClientPool<F>,
    owner: OwnerId,
) -> FeedStop {
    let (tx, mut stop) = oneshot::channel::<()>();
    let mut last = addresses(dir);
    pool.sync_endpoints(owner, last.iter().cloned());
    let changes = dir.changes();
    let dir = dir.clone();
    let pool = pool.clone();
    tokio::spawn(async move {
        let mut changes = std::pin::pin!(changes);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                next = changes.next() => {
                    if next.is_none() {
                        break;
                    }
                    let now = addresses(&dir);
                    if now != last {
                        pool.sync_endpoints(owner, now.iter().cloned());
                        last = now;
                    }
                }
            }
        }
        pool.drop_owner(owner);
    });
    FeedStop { _stop: tx }
}
