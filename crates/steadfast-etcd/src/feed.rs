//! [`Feed`]: the bounded queue between the watch hub and one subscriber's
//! [`EventStream`].
//!
//! The hub pushes events and errors; the subscriber's stream pops them.
//! When the queue is full (a consumer slower than etcd), it collapses to a
//! Reset of the app's current state (plus the error, if the item pushed
//! was one): the consumer loses no state, only intermediate steps, and the
//! memory held stays bounded under any burst. Dropping the stream tells
//! the hub (the app's watch leaves the shared stream); the hub closing the
//! feed ends the stream (the engine then re-subscribes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::stream::{self, StreamExt};
use steadfast_core::{EventStream, RegistryError, RegistryEvent};
use tokio::sync::Notify;

use crate::mux::SubKey;

type Item = Result<RegistryEvent, RegistryError>;

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Item>,
    closed: bool,
    collapses: u64,
}

/// One subscriber's queue.
#[derive(Debug)]
pub(crate) struct Feed {
    state: Mutex<State>,
    ready: Notify,
    capacity: usize,
}

impl Feed {
    /// A feed holding at most `capacity` items (at least 2).
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            capacity: capacity.max(2),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item`; if the queue is full, replaces everything queued by
    /// `reset()` (the current state), then `item` if it is an error.
    pub(crate) fn push(&self, item: Item, reset: impl FnOnce() -> Option<RegistryEvent>) {
        let mut s = self.lock();
        if s.items.len() >= self.capacity {
            s.items.clear();
            s.collapses = s.collapses.saturating_add(1);
            if let Some(r) = reset() {
                s.items.push_back(Ok(r));
            }
            if item.is_err() {
                s.items.push_back(item);
            }
        } else {
            s.items.push_back(item);
        }
        drop(s);
        self.ready.notify_one();
    }

    /// Ends the stream once what is queued was read.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// How many times the queue collapsed to a Reset.
    #[cfg(test)]
    pub(crate) fn collapses(&self) -> u64 {
        self.lock().collapses
    }

    async fn pop(&self) -> Option<Item> {
        loop {
            {
                let mut s = self.lock();
                if let Some(item) = s.items.pop_front() {
                    return Some(item);
                }
                if s.closed {
                    return None;
                }
            }
            // `notify_one` keeps a permit when nobody waits: no lost wakeup.
            self.ready.notified().await;
        }
    }
}

/// The subscribers that left, for the hub to drop. Bounded by
/// construction: each subscription's stream adds its key once, when it is
/// dropped, so it never holds more keys than there are subscriptions (no
/// channel can grow under load).
#[derive(Debug, Default)]
pub(crate) struct Leavers {
    keys: std::sync::Mutex<Vec<SubKey>>,
    wake: tokio::sync::Notify,
}

impl Leavers {
    /// `key`'s stream was dropped (from any thread; never blocks on the hub).
    fn left(&self, key: SubKey) {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(key);
        // A permit is kept when the hub is not waiting: no wake-up is lost.
        self.wake.notify_one();
    }

    /// Waits until some subscriber left.
    pub(crate) async fn wait(&self) {
        self.wake.notified().await;
    }

    /// Takes every key that left.
    pub(crate) fn take(&self) -> Vec<SubKey> {
        std::mem::take(
            &mut *self
                .keys
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Tells the hub when the subscriber's stream is dropped.
struct Leave {
    key: SubKey,
    leavers: Arc<Leavers>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.leavers.left(self.key);
    }
}

/// The subscriber's stream over `feed`; dropping it adds `key` to
/// `leavers`.
pub(crate) fn event_stream(feed: Arc<Feed>, key: SubKey, leavers: Arc<Leavers>) -> EventStream {
    let guard = Leave { key, leavers };
    stream::unfold((feed, guard), |(feed, guard)| async move {
        let item = feed.pop().await?;
        Some((item, (feed, guard)))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use steadfast_core::{Instance, RevisionInterner, ServiceInstance, Version};

    use super::*;

    fn delta(rev: u64) -> Item {
        Ok(RegistryEvent::Delta {
            base: Version::at(rev.saturating_sub(1)),
            version: Version::at(rev),
            upserts: Vec::new(),
            removals: Vec::new(),
        })
    }

    fn reset(rev: u64) -> Option<RegistryEvent> {
        let i = ServiceInstance::new("a", "h", 1);
        let i = Arc::new(Instance::from_record(i, &mut RevisionInterner::default()));
        Some(RegistryEvent::Reset {
            version: Version::at(rev),
            items: vec![i],
        })
    }

    #[tokio::test]
    async fn a_full_queue_collapses_to_the_current_state_and_the_drop_is_told() {
        let feed = Feed::new(4);
        let leavers = Arc::new(Leavers::default());
        let mut s = event_stream(feed.clone(), 7, leavers.clone());
        for rev in 1..=1000 {
            feed.push(delta(rev), || reset(rev));
        }
        assert!(feed.collapses() > 0);
        assert!(feed.lock().items.len() <= 4, "bounded");
        // What is read ends at the latest state, never older.
        let mut last = 0;
        while let Ok(Some(item)) =
            tokio::time::timeout(std::time::Duration::from_millis(10), s.next()).await
        {
            let v = item.unwrap().version().revision;
            assert!(v > last);
            last = v;
        }
        assert_eq!(last, 1000);
        feed.push(Err(RegistryError::Unavailable("x".into())), || reset(1000));
        assert!(s.next().await.unwrap().is_err());
        feed.close();
        assert!(s.next().await.is_none());
        drop(s);
        leavers.wait().await;
        assert_eq!(leavers.take(), vec![7]);
    }
}
