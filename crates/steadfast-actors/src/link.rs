//! The data path between actors: a bounded [`ChangeQueue`] per producer and
//! consumer (registry actor -> resolver, resolver -> directory) instead of
//! one mailbox message per change. The producer queues changes and sends
//! the consumer one [`Wake`] when its queue stops being empty; the consumer
//! takes everything queued in one go and publishes once. A consumer that
//! falls behind by more than the producer's state has its queue replaced by
//! one Reset of that state, so the queue never holds more than about twice
//! the state, whatever the burst. Only the queue is shared; each side's
//! state stays its actor's own.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actix::prelude::*;
use actix::WeakRecipient;
use steadfast_core::{ChangeQueue, Pushed};

use crate::stats::EngineStats;

/// A consumer's queue is not empty any more: take what it holds.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct Wake;

type Shared<T> = Arc<Mutex<ChangeQueue<T>>>;

fn lock<T>(q: &Shared<T>) -> MutexGuard<'_, ChangeQueue<T>> {
    q.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The consumer's end of one link.
pub struct Inbox<T> {
    queue: Shared<T>,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Self {
            queue: Arc::new(Mutex::new(ChangeQueue::default())),
        }
    }
}

impl<T> Inbox<T> {
    /// The producer's end, waking `wake`.
    pub fn sender(&self, wake: WeakRecipient<Wake>) -> Outbox<T> {
        Outbox {
            queue: self.queue.clone(),
            wake,
        }
    }

    /// Everything queued, oldest first.
    pub fn drain(&self) -> Vec<T> {
        lock(&self.queue).drain()
    }
}

/// The producer's end of one link.
pub struct Outbox<T> {
    queue: Shared<T>,
    wake: WeakRecipient<Wake>,
}

impl<T> Clone for Outbox<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<T> Outbox<T> {
    /// Queues `entry`, which carries `items` items; when the consumer is
    /// more than `bound` items behind (the producer's state size), the queue
    /// is replaced by `reset()` (the whole state and its size) instead, and
    /// counted. Returns whether the consumer is still there.
    pub fn send(
        &self,
        entry: T,
        items: usize,
        bound: usize,
        stats: &EngineStats,
        reset: impl FnOnce() -> Option<(T, usize)>,
    ) -> bool {
        let Some(wake) = self.wake.upgrade() else {
            return false;
        };
        let woke = {
            let mut q = lock(&self.queue);
            match q.push(entry, items, bound) {
                Pushed::Wake => true,
                Pushed::Queued => false,
                Pushed::Full => {
                    EngineStats::bump(&stats.queue_collapses);
                    match reset() {
                        Some((reset, n)) => q.replace(reset, n),
                        None => false,
                    }
                }
            }
        };
        if woke {
            wake.do_send(Wake);
        }
        true
    }
}
