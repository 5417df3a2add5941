//! [`EventQueue`]: the bounded queue between a registry backend's watch
//! driver (the etcd hub, the Nacos push router) and one subscriber's
//! [`EventStream`], shared by every backend.
//!
//! The driver pushes events and errors; the subscriber's stream pops them.
//! When the queue is full (a consumer slower than etcd), it collapses to a
//! Reset of the app's current state (plus the error, if the item pushed
//! was one): the consumer loses no state, only intermediate steps, and the
//! memory held stays bounded under any burst. Dropping the stream tells
//! the driver ([`Leavers`]: the app's watch can end); the driver closing
//! the queue ends the stream (the engine then re-subscribes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::stream::{self, StreamExt};
use tokio::sync::Notify;

use crate::backend::EventStream;
use crate::error::RegistryError;
use crate::event::RegistryEvent;

type Item = Result<RegistryEvent, RegistryError>;

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Item>,
    closed: bool,
    collapses: u64,
}

/// One subscriber's queue.
#[derive(Debug)]
pub struct EventQueue {
    state: Mutex<State>,
    ready: Notify,
    capacity: usize,
}

impl EventQueue {
    /// A feed holding at most `capacity` items (at least 2).
    pub fn new(capacity: usize) -> Arc<Self> {
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
    pub fn push(&self, item: Item, reset: impl FnOnce() -> Option<RegistryEvent>) {
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
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// How many times the queue collapsed to a Reset.
    pub fn collapses(&self) -> u64 {
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

/// The subscribers that left (by the driver's key for them), for the
/// driver to drop. Bounded by
/// construction: each subscription's stream adds its key once, when it is
/// dropped, so it never holds more keys than there are subscriptions (no
/// channel can grow under load).
#[derive(Debug)]
pub struct Leavers<K> {
    keys: std::sync::Mutex<Vec<K>>,
    wake: tokio::sync::Notify,
}

impl<K> Default for Leavers<K> {
    fn default() -> Self {
        Self {
            keys: std::sync::Mutex::new(Vec::new()),
            wake: tokio::sync::Notify::new(),
        }
    }
}

impl<K> Leavers<K> {
    /// `key`'s stream was dropped (from any thread; never blocks on the hub).
    fn left(&self, key: K) {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(key);
        // A permit is kept when the hub is not waiting: no wake-up is lost.
        self.wake.notify_one();
    }

    /// Waits until some subscriber left.
    pub async fn wait(&self) {
        self.wake.notified().await;
    }

    /// Takes every key that left.
    pub fn take(&self) -> Vec<K> {
        std::mem::take(
            &mut *self
                .keys
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Tells the hub when the subscriber's stream is dropped.
struct Leave<K: Copy> {
    key: K,
    leavers: Arc<Leavers<K>>,
}

impl<K: Copy> Drop for Leave<K> {
    fn drop(&mut self) {
        self.leavers.left(self.key);
    }
}

/// The subscriber's stream over `feed`; dropping it adds `key` to
/// `leavers`.
pub fn event_stream<K: Copy + Send + Sync + 'static>(
    feed: Arc<EventQueue>,
    key: K,
    leavers: Arc<Leavers<K>>,
) -> EventStream {
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

    use crate::{Instance, RevisionInterner, ServiceInstance, Version};

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
        let feed = EventQueue::new(4);
        let leavers = Arc::new(Leavers::<u64>::default());
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
