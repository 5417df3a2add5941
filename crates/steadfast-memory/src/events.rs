//! Event watches: one bounded queue per watcher, fed by the registry under
//! its state lock and drained by an [`EventStream`].
//!
//! A queue holds concrete items (events and errors, in version order) and
//! at most one *pending Reset* at its tail: "the whole current state, read
//! when the stream gets to it". A pending Reset is what a new watch starts
//! with, what `set_instances` queues, and what replaces the queued items of
//! a watcher that falls `limit` items behind (coalescing). While a pending
//! Reset is last, later deltas are not queued: the Reset, read later, covers
//! them. So a queue never holds more than `limit + 1` items whatever the
//! burst, and its reader still ends on the registry's state.
//!
//! Anything queued after a pending Reset (an error, the end of the stream)
//! first turns it into a concrete Reset of the state at that moment, so
//! order is kept and a closed queue never needs the registry again.
//!
//! Lock order: the registry's state lock, then a queue lock; the stream
//! never takes the state lock while it holds its queue lock.

use std::collections::VecDeque;
use std::pin::Pin;
#[cfg(any(test, feature = "faults"))]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use futures::stream::Stream;
use steadfast_core::{EventStream, RegistryError, RegistryEvent};

use crate::registry::Inner;

/// Items a watcher may fall behind by before its queue is coalesced into
/// one Reset (see [`crate::MemoryRegistry::with_event_queue_limit`]).
pub const DEFAULT_EVENT_QUEUE_LIMIT: usize = 1024;

/// One item of an event stream.
type EventItem = Result<RegistryEvent, RegistryError>;

/// One queued slot.
enum Slot {
    /// A concrete item.
    Item(EventItem),
    /// The whole state of the app, read when the stream reaches it.
    Reset,
}

/// A watcher's queue and wake-up state.
#[derive(Default)]
struct Queue {
    slots: VecDeque<Slot>,
    waker: Option<Waker>,
    /// The registry side is gone: the stream ends once drained.
    ended: bool,
    /// The stream was dropped: the registry prunes the watcher.
    dropped: bool,
}

impl Queue {
    fn tail_is_reset(&self) -> bool {
        matches!(self.slots.back(), Some(Slot::Reset))
    }
}

/// What the registry side and the stream share.
#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Set: the stream panics when it is next polled.
    #[cfg(any(test, feature = "faults"))]
    poison: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the queue, then wakes the stream (outside the lock).
    fn update(&self, f: impl FnOnce(&mut Queue)) {
        let waker = {
            let mut q = self.lock();
            if q.dropped {
                return;
            }
            f(&mut q);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The registry's handle of one event watch. Dropping it ends the stream
/// after what is queued.
pub(crate) struct EventWatcher {
    shared: Arc<Shared>,
    limit: usize,
}

impl EventWatcher {
    /// A watcher whose stream starts with a pending Reset, and that stream.
    pub(crate) fn subscribe(limit: usize, registry: Weak<Inner>, app: &str) -> (Self, EventStream) {
        let shared = Arc::new(Shared::default());
        shared.lock().slots.push_back(Slot::Reset);
        let stream = EventReceiver {
            shared: shared.clone(),
            registry,
            app: app.into(),
        };
        (
            Self {
                shared,
                limit: limit.max(1),
            },
            Box::pin(stream),
        )
    }

    /// Whether the stream was dropped.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().dropped
    }

    /// Items queued and not yet read (a pending Reset counts as one).
    pub(crate) fn queued(&self) -> usize {
        self.shared.lock().slots.len()
    }

    /// Queues `delta`, unless a pending Reset already covers it; a watcher
    /// `limit` items behind has its queue replaced by one pending Reset.
    pub(crate) fn push_delta(&self, delta: &RegistryEvent) {
        let limit = self.limit;
        self.shared.update(|q| {
            if q.tail_is_reset() {
                return;
            }
            if q.slots.len() >= limit {
                q.slots.clear();
                q.slots.push_back(Slot::Reset);
            } else {
                q.slots.push_back(Slot::Item(Ok(delta.clone())));
            }
        });
    }

    /// Queues a pending Reset (the whole state replaced); a watcher `limit`
    /// items behind drops its queued items first.
    pub(crate) fn push_reset(&self) {
        let limit = self.limit;
        self.shared.update(|q| {
            if q.tail_is_reset() {
                return;
            }
            if q.slots.len() >= limit {
                q.slots.clear();
            }
            q.slots.push_back(Slot::Reset);
        });
    }

    #[cfg(any(test, feature = "faults"))]
    /// Queues `err` (a repeat of the last queued error is not queued again,
    /// so errors alone cannot grow the queue); `reset` reads the current
    /// state if a pending Reset must be made concrete first.
    pub(crate) fn push_err(&self, err: RegistryError, reset: &dyn Fn() -> RegistryEvent) {
        self.shared.update(|q| {
            settle_tail(q, reset);
            if !matches!(q.slots.back(), Some(Slot::Item(Err(last))) if *last == err) {
                q.slots.push_back(Slot::Item(Err(err)));
            }
        });
    }

    #[cfg(any(test, feature = "faults"))]
    /// Ends the stream after what is queued (a pending Reset is read now).
    pub(crate) fn end(self, reset: &dyn Fn() -> RegistryEvent) {
        self.shared.update(|q| settle_tail(q, reset));
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes the stream panic when it is next polled, and wakes it.
    pub(crate) fn poison(&self) {
        self.shared.poison.store(true, Ordering::SeqCst);
        self.shared.update(|_| {});
    }
}

impl Drop for EventWatcher {
    fn drop(&mut self) {
        self.shared.update(|q| q.ended = true);
    }
}

#[cfg(any(test, feature = "faults"))]
/// Turns a pending Reset at the tail into a concrete one read by `reset`.
fn settle_tail(q: &mut Queue, reset: &dyn Fn() -> RegistryEvent) {
    if q.tail_is_reset() {
        q.slots.pop_back();
        q.slots.push_back(Slot::Item(Ok(reset())));
    }
}

/// The reading side of an event watch.
struct EventReceiver {
    shared: Arc<Shared>,
    /// The registry, to read the state of a pending Reset.
    registry: Weak<Inner>,
    app: Box<str>,
}

impl EventReceiver {
    /// The front item, a concrete one or `read()` for a pending Reset.
    fn pop(q: &mut Queue, read: impl FnOnce() -> Option<RegistryEvent>) -> Option<EventItem> {
        match q.slots.pop_front()? {
            Slot::Item(item) => Some(item),
            Slot::Reset => read().map(Ok),
        }
    }
}

impl Stream for EventReceiver {
    type Item = EventItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventItem>> {
        let this = self.get_mut();
        #[cfg(any(test, feature = "faults"))]
        if this.shared.poison.swap(false, Ordering::SeqCst) {
            panic!("injected panic in the event stream of {}", this.app);
        }
        {
            let mut q = this.shared.lock();
            match q.slots.front() {
                Some(Slot::Item(_)) => return Poll::Ready(Self::pop(&mut q, || None)),
                Some(Slot::Reset) => {}
                None if q.ended => return Poll::Ready(None),
                None => {
                    q.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
        }
        // A pending Reset: read the state under the registry's lock, which
        // keeps the queue's front as it is now (only the registry changes
        // it besides this stream).
        let Some(inner) = this.registry.upgrade() else {
            return Poll::Ready(None);
        };
        let state = inner.state();
        let mut q = this.shared.lock();
        Poll::Ready(Self::pop(&mut q, || Some(state.reset_event(&this.app))))
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.dropped = true;
        q.slots.clear();
        q.waker = None;
    }
}
