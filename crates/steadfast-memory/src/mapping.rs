//! Interface -> app mappings of the [`MemoryRegistry`] (Dubbo's
//! service-name mapping): per interface a set of apps, one entry per app so
//! providers of different apps never overwrite each other, and mapping
//! watches that yield the whole app set first and again after every change.
//!
//! Faults: [`MemoryRegistry::set_down`] and [`MemoryRegistry::delay_calls`]
//! apply to `register_mapping`, `unregister_mapping` and `watch_mapping`
//! like to every other call (down: fail with `Unavailable`, change nothing,
//! still counted). [`MemoryRegistry::fail_next_mapping_watches`] fails
//! opens, [`MemoryRegistry::panic_next_mapping_watches`] makes them panic;
//! [`MemoryRegistry::report_mapping_errors`] sends an `Err` item to
//! the live streams (kept open); [`MemoryRegistry::end_mapping_watches`]
//! ends them. Calls are counted ([`MemoryRegistry::mapping_watch_calls`],
//! [`MemoryRegistry::mapping_register_calls`]).
//!
//! Each watcher's queue is bounded: consecutive sets collapse into the
//! latest one (a set is the whole state), and a queue past
//! [`MAPPING_QUEUE_LIMIT`] items keeps only the latest set.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures::stream::Stream;
use steadfast_core::{MappingEvent, MappingStream, RegistryError, Version};

use crate::faults::{Budget, Counter};
use crate::MemoryRegistry;

/// Items a mapping watcher may fall behind by before only the latest set is
/// kept.
pub const MAPPING_QUEUE_LIMIT: usize = 64;

type Item = Result<MappingEvent, RegistryError>;

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    waker: Option<Waker>,
    ended: bool,
    dropped: bool,
}

#[derive(Default)]
struct Shared(Mutex<Queue>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut Queue)) {
        let waker = {
            let mut q = self.lock();
            if q.dropped || q.ended {
                return;
            }
            f(&mut q);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn push_set(&self, event: MappingEvent) {
        self.update(|q| {
            if matches!(q.items.back(), Some(Ok(_))) {
                q.items.pop_back();
            }
            if q.items.len() >= MAPPING_QUEUE_LIMIT {
                q.items.clear();
            }
            q.items.push_back(Ok(event));
        });
    }
}

struct Receiver(Arc<Shared>);

impl Stream for Receiver {
    type Item = Item;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let mut q = self.0.lock();
        if let Some(item) = q.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        if q.ended {
            return Poll::Ready(None);
        }
        q.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.0.lock().dropped = true;
    }
}

/// Every mapping of one registry, its watchers, faults and counters.
#[derive(Default)]
pub(crate) struct Mappings {
    state: Mutex<MapState>,
    /// Upcoming `watch_mapping` calls that fail.
    watch_failures: Budget,
    /// Upcoming `watch_mapping` calls whose future panics.
    #[cfg(any(test, feature = "faults"))]
    watch_panics: Budget,
    /// `watch_mapping` calls so far.
    watch_calls: Counter,
    /// `register_mapping` / `unregister_mapping` calls so far.
    register_calls: Counter,
}

#[derive(Default)]
struct MapState {
    apps: HashMap<String, BTreeSet<String>>,
    watchers: HashMap<String, Vec<Arc<Shared>>>,
    version: u64,
}

impl MapState {
    fn event(&self, interface: &str) -> MappingEvent {
        MappingEvent {
            version: Version::at(self.version),
            apps: self
                .apps
                .get(interface)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }

    fn watchers(&mut self, interface: &str) -> Vec<Arc<Shared>> {
        let list = self.watchers.entry(interface.to_string()).or_default();
        list.retain(|w| !w.lock().dropped);
        list.clone()
    }

    /// Applies a change; notifies when the set changed.
    fn change(&mut self, interface: &str, app: &str, add: bool) {
        let set = self.apps.entry(interface.to_string()).or_default();
        let changed = if add {
            set.insert(app.to_string())
        } else {
            set.remove(app)
        };
        if set.is_empty() {
            self.apps.remove(interface);
        }
        if !changed {
            return;
        }
        self.version = self.version.saturating_add(1);
        let event = self.event(interface);
        for w in self.watchers(interface) {
            w.push_set(event.clone());
        }
    }
}

impl Mappings {
    fn state(&self) -> MutexGuard<'_, MapState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemoryRegistry {
    fn mappings(&self) -> &Mappings {
        &self.inner.mappings
    }

    // ----- synchronous helpers -------------------------------------------

    /// Records that `app` serves `interface` (no fault, no counter).
    pub fn put_mapping(&self, interface: &str, app: &str) {
        self.mappings().state().change(interface, app, true);
    }

    /// Removes the record that `app` serves `interface` (no fault, no
    /// counter).
    pub fn remove_mapping(&self, interface: &str, app: &str) {
        self.mappings().state().change(interface, app, false);
    }

    /// The apps mapped to `interface`, sorted.
    pub fn mapped_apps(&self, interface: &str) -> Vec<String> {
        self.mappings().state().event(interface).apps
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes the next `n` `watch_mapping` calls fail with
    /// [`RegistryError::Injected`] (replaces any remaining budget).
    pub fn fail_next_mapping_watches(&self, n: usize) {
        self.mappings().watch_failures.set(n);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes the next `n` `watch_mapping` calls return a future that panics
    /// when polled (replaces any remaining budget).
    pub fn panic_next_mapping_watches(&self, n: usize) {
        self.mappings().watch_panics.set(n);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Whether this `watch_mapping` call must panic (counted as a call).
    pub(crate) fn mapping_watch_panics(&self) -> bool {
        let panics = self.mappings().watch_panics.take();
        if panics {
            self.mappings().watch_calls.bump();
        }
        panics
    }

    #[cfg(any(test, feature = "faults"))]
    /// Sends `Err(Unavailable)` to every live mapping watch of `interface`
    /// and keeps it open (the next change heals it).
    pub fn report_mapping_errors(&self, interface: &str) {
        let err = RegistryError::Unavailable(format!("injected unhealthy mapping of {interface}"));
        for w in self.mappings().state().watchers(interface) {
            w.update(|q| q.items.push_back(Err(err.clone())));
        }
    }

    #[cfg(any(test, feature = "faults"))]
    /// Ends every live mapping watch of `interface` (queued items are still
    /// delivered first).
    pub fn end_mapping_watches(&self, interface: &str) {
        let watchers = {
            let mut state = self.mappings().state();
            let list = state.watchers(interface);
            state.watchers.remove(interface);
            list
        };
        for w in watchers {
            w.update(|q| q.ended = true);
        }
    }

    /// The number of live mapping watches of `interface`.
    pub fn mapping_watcher_count(&self, interface: &str) -> usize {
        self.mappings().state().watchers(interface).len()
    }

    /// `watch_mapping` calls so far, failed ones included.
    pub fn mapping_watch_calls(&self) -> usize {
        self.mappings().watch_calls.get()
    }

    /// `register_mapping` / `unregister_mapping` calls so far, failed ones
    /// included.
    pub fn mapping_register_calls(&self) -> usize {
        self.mappings().register_calls.get()
    }

    // ----- trait bodies (synchronous) --------------------------------------

    pub(crate) fn change_mapping_now(
        &self,
        interface: &str,
        app: &str,
        add: bool,
    ) -> Result<(), RegistryError> {
        self.mappings().register_calls.bump();
        let what = if add { "register" } else { "unregister" };
        if let Some(e) = self.inner.faults.outage(&format!("{what} mapping")) {
            return Err(e);
        }
        if interface.is_empty() || app.is_empty() {
            return Err(RegistryError::Rejected(
                "an interface mapping needs an interface and an app".into(),
            ));
        }
        self.mappings().state().change(interface, app, add);
        Ok(())
    }

    pub(crate) fn watch_mapping_now(
        &self,
        interface: &str,
    ) -> Result<MappingStream, RegistryError> {
        self.mappings().watch_calls.bump();
        if let Some(e) = self
            .inner
            .faults
            .outage(&format!("mapping watch of {interface}"))
        {
            return Err(e);
        }
        if self.mappings().watch_failures.take() {
            return Err(RegistryError::Injected(format!(
                "mapping watch of {interface}"
            )));
        }
        let shared = Arc::new(Shared::default());
        let mut state = self.mappings().state();
        shared.push_set(state.event(interface));
        state.watchers(interface);
        state
            .watchers
            .entry(interface.to_string())
            .or_default()
            .push(shared.clone());
        Ok(Box::pin(Receiver(shared)))
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use steadfast_core::Registry;

    fn apps(item: Option<Item>) -> Vec<String> {
        item.expect("an item").expect("a set").apps
    }

    #[tokio::test]
    async fn a_watch_gets_the_whole_set_first_and_after_each_change() {
        let r = MemoryRegistry::new();
        r.register_mapping("a.B", "x").await.unwrap();
        let mut w = r.watch_mapping("a.B").await.unwrap();
        assert_eq!(apps(w.next().await), vec!["x"]);
        r.register_mapping("a.B", "y").await.unwrap();
        r.register_mapping("a.B", "y").await.unwrap(); // no change, no item
        r.register_mapping("other", "z").await.unwrap();
        r.unregister_mapping("a.B", "x").await.unwrap();
        // Consecutive sets collapse into the latest one.
        let e = w.next().await.unwrap().unwrap();
        assert_eq!(e.apps, vec!["y"]);
        r.report_mapping_errors("a.B");
        assert!(matches!(
            w.next().await,
            Some(Err(RegistryError::Unavailable(_)))
        ));
        r.put_mapping("a.B", "w");
        let e2 = w.next().await.unwrap().unwrap();
        assert_eq!(e2.apps, vec!["w", "y"]);
        assert!(e2.version > e.version);
        r.end_mapping_watches("a.B");
        assert!(w.next().await.is_none());
        assert_eq!(r.mapping_watch_calls(), 1);
        assert_eq!(r.mapping_register_calls(), 5);
        assert_eq!(r.mapped_apps("a.B"), vec!["w", "y"]);
    }

    #[tokio::test]
    async fn down_fails_every_mapping_call_and_changes_nothing() {
        let r = MemoryRegistry::new();
        r.set_down(true);
        assert!(matches!(
            r.register_mapping("a.B", "x").await,
            Err(RegistryError::Unavailable(_))
        ));
        assert!(r.watch_mapping("a.B").await.is_err());
        assert!(r.mapped_apps("a.B").is_empty());
        r.set_down(false);
        r.fail_next_mapping_watches(1);
        assert!(matches!(
            r.watch_mapping("a.B").await,
            Err(RegistryError::Injected(_))
        ));
        let mut w = r.watch_mapping("a.B").await.unwrap();
        assert!(apps(w.next().await).is_empty());
        assert_eq!(r.mapping_watch_calls(), 3);
        assert_eq!(r.mapping_register_calls(), 1);
        assert_eq!(r.mapping_watcher_count("a.B"), 1);
        drop(w);
        assert_eq!(r.mapping_watcher_count("a.B"), 0);
    }

    #[test]
    fn a_slow_reader_queue_stays_bounded() {
        let r = MemoryRegistry::new();
        let shared = Arc::new(Shared::default());
        for i in 0..1000 {
            shared.update(|q| q.items.push_back(Err(RegistryError::Timeout)));
            shared.push_set(MappingEvent {
                version: Version::at(i),
                apps: vec![],
            });
        }
        assert!(shared.lock().items.len() <= MAPPING_QUEUE_LIMIT + 1);
        drop(r);
    }
}
