//! The [`MemoryRegistry`] itself: shared state behind an `Arc<Mutex<..>>`,
//! the [`Registry`] implementation, the synchronous test helpers and the
//! fault-injection knobs.
//!
//! Every operation takes effect when it is called; the futures returned by
//! the [`Registry`] methods are already complete. No lock is ever held across
//! an `await` (there is none inside).

use std::collections::HashMap;

use rustc_hash::FxHashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::channel::mpsc;
use futures::future::{self, BoxFuture, FutureExt};
use futures::stream::StreamExt;
use steadfast_core::{Registry, RegistryError, ServiceInstance, SnapshotStream};

use crate::faults::Faults;

/// One item of a watch stream.
type Item = Result<Arc<Vec<ServiceInstance>>, RegistryError>;

/// The sending half of one live watch, with its scripted-panic flag.
struct Watcher {
    tx: mpsc::UnboundedSender<Item>,
    /// Set: the stream panics when it yields its next item.
    poison: Arc<AtomicBool>,
}

impl Watcher {
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    fn send(&self, item: Item) -> bool {
        self.tx.unbounded_send(item).is_ok()
    }
}

/// Everything the registry knows about one app.
#[derive(Default)]
struct AppState {
    /// Instances in registration order (ids unique), shared with watchers:
    /// a push never copies the snapshot, a change copies it only while a
    /// watcher still holds the previous one.
    instances: Arc<Vec<ServiceInstance>>,
    /// Live watches of the app (closed ones are pruned lazily).
    watchers: Vec<Watcher>,
    /// Upcoming pushes that are swallowed instead of delivered.
    drop_pushes: usize,
}

impl AppState {
    /// The full current snapshot, in registration order.
    fn snapshot(&self) -> Arc<Vec<ServiceInstance>> {
        self.instances.clone()
    }

    /// Inserts or replaces (in place) the instance with `instance.id`.
    fn upsert(&mut self, instance: ServiceInstance) {
        let list = Arc::make_mut(&mut self.instances);
        match list.iter_mut().find(|i| i.id == instance.id) {
            Some(slot) => *slot = instance,
            None => list.push(instance),
        }
    }

    /// Removes the instance with `id`; true when it was there.
    fn delete(&mut self, id: &str) -> bool {
        match self.instances.iter().position(|i| i.id == id) {
            Some(pos) => {
                Arc::make_mut(&mut self.instances).remove(pos);
                true
            }
            None => false,
        }
    }

    /// Pushes the current snapshot to every live watcher, unless a dropped
    /// push is scripted; prunes closed watchers either way.
    fn push(&mut self, app: &str) {
        if self.drop_pushes > 0 {
            self.drop_pushes -= 1;
            self.watchers.retain(|w| !w.is_closed());
            tracing::debug!(app, remaining = self.drop_pushes, "dropping scripted push");
            return;
        }
        let snapshot = self.snapshot();
        self.watchers.retain(|w| w.send(Ok(snapshot.clone())));
        tracing::trace!(
            app,
            instances = snapshot.len(),
            watchers = self.watchers.len(),
            "pushed snapshot"
        );
    }
}

/// State shared by every clone of one registry.
#[derive(Default)]
struct Inner {
    /// Per-app state.
    apps: Mutex<HashMap<String, AppState>>,
    /// Fault budgets and call counters.
    faults: Faults,
}

/// An in-process [`Registry`] with scriptable faults.
///
/// Cheap to clone: all clones share the same state. State is a map
/// app -> (instance id -> instance); every change of an app pushes the full
/// snapshot of that app to each of its live watchers.
#[derive(Clone, Default)]
pub struct MemoryRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MemoryRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let apps = self.apps();
        let mut names: Vec<&String> = apps.keys().collect();
        names.sort();
        f.debug_struct("MemoryRegistry")
            .field("apps", &names)
            .finish_non_exhaustive()
    }
}

impl MemoryRegistry {
    /// Creates an empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Locks the app map; a poisoned lock is recovered (the map stays
    /// consistent because no operation panics half-way through an update).
    fn apps(&self) -> MutexGuard<'_, HashMap<String, AppState>> {
        self.inner
            .apps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state of `app`, creating it if needed.
    fn with_app<R>(&self, app: &str, f: impl FnOnce(&mut AppState) -> R) -> R {
        let mut apps = self.apps();
        f(apps.entry(app.to_string()).or_default())
    }

    // ----- synchronous helpers -------------------------------------------

    /// Inserts or replaces (by id) `instance` under `instance.app` and pushes
    /// the new snapshot of that app. Always pushes, even when the instance is
    /// unchanged.
    pub fn put(&self, instance: ServiceInstance) {
        let app = instance.app.clone();
        self.with_app(&app, |st| {
            st.upsert(instance);
            st.push(&app);
        });
    }

    /// Removes instance `id` of `app`. Pushes a snapshot and returns `true`
    /// when it was present; does nothing and returns `false` otherwise.
    pub fn remove(&self, app: &str, id: &str) -> bool {
        self.with_app(app, |st| {
            let removed = st.delete(id);
            if removed {
                st.push(app);
            }
            removed
        })
    }

    /// Replaces every instance of `app` with `instances` and pushes exactly
    /// one snapshot. Instances are stored under `app` (their `app` field is
    /// overwritten); a later instance with the same id replaces an earlier one.
    pub fn set_instances(&self, app: &str, instances: Vec<ServiceInstance>) {
        let instances = Self::normalized(app, instances);
        self.with_app(app, |st| {
            st.instances = Arc::new(instances);
            st.push(app);
        });
    }

    /// `instances` stored under `app`, the last of each id kept in its
    /// first position.
    fn normalized(app: &str, mut instances: Vec<ServiceInstance>) -> Vec<ServiceInstance> {
        for i in instances.iter_mut().filter(|i| i.app != app) {
            i.app = app.to_string();
        }
        let has_duplicates = {
            let mut seen = FxHashSet::with_capacity_and_hasher(instances.len(), Default::default());
            !instances.iter().all(|i| seen.insert(i.id.as_str()))
        };
        if has_duplicates {
            // Duplicate ids: keep the last of each, in its first position.
            let mut last: HashMap<String, ServiceInstance> = HashMap::new();
            let mut order = Vec::new();
            for i in instances {
                if !last.contains_key(&i.id) {
                    order.push(i.id.clone());
                }
                last.insert(i.id.clone(), i);
            }
            instances = order.iter().filter_map(|id| last.remove(id)).collect();
        }
        instances
    }

    /// Replaces every instance of `app` like [`MemoryRegistry::set_instances`]
    /// but notifies no watcher: a lost notification. The state (and so
    /// `list` and any new watch) changes; live watches see nothing until a
    /// later push.
    pub fn set_instances_silently(&self, app: &str, instances: Vec<ServiceInstance>) {
        let instances = Self::normalized(app, instances);
        self.with_app(app, |st| st.instances = Arc::new(instances));
    }

    /// The current instances of `app`, in registration order (no fault, no
    /// counter).
    pub fn instances(&self, app: &str) -> Vec<ServiceInstance> {
        self.apps()
            .get(app)
            .map(|st| st.instances.as_ref().clone())
            .unwrap_or_default()
    }

    /// The number of live watch streams of `app` (closed ones are pruned).
    pub fn watcher_count(&self, app: &str) -> usize {
        self.apps().get_mut(app).map_or(0, |st| {
            st.watchers.retain(|w| !w.is_closed());
            st.watchers.len()
        })
    }

    // ----- scriptable faults ---------------------------------------------

    /// Makes the next `n` `list` calls fail with [`RegistryError::Injected`]
    /// (replaces any remaining budget; 0 cancels it).
    pub fn fail_next_lists(&self, n: usize) {
        self.inner.faults.lists.set(n);
    }

    /// Makes the next `n` `watch` calls fail with [`RegistryError::Injected`]
    /// (replaces any remaining budget; 0 cancels it).
    pub fn fail_next_watches(&self, n: usize) {
        self.inner.faults.watches.set(n);
    }

    /// Makes the next `n` `register` / `unregister` calls (one shared budget)
    /// fail with [`RegistryError::Injected`] without changing state
    /// (replaces any remaining budget; 0 cancels it).
    pub fn fail_next_registers(&self, n: usize) {
        self.inner.faults.registers.set(n);
    }

    /// Swallows the next `n` pushes of `app`: state still changes, but the
    /// watchers see nothing until a later push (replaces any remaining count).
    pub fn drop_next_pushes(&self, app: &str, n: usize) {
        self.with_app(app, |st| st.drop_pushes = n);
    }

    /// Makes the next `n` `watch` calls return a future that panics when
    /// polled (replaces any remaining budget; 0 cancels it).
    pub fn panic_next_watches(&self, n: usize) {
        self.inner.faults.watch_panics.set(n);
    }

    /// Makes the next `n` `list` calls return a future that panics when
    /// polled (replaces any remaining budget; 0 cancels it).
    pub fn panic_next_lists(&self, n: usize) {
        self.inner.faults.list_panics.set(n);
    }

    /// Makes every live watch stream of `app` panic while it is polled for
    /// its next item (each panics once; new watches are not affected).
    pub fn panic_watch_streams(&self, app: &str) {
        if let Some(st) = self.apps().get_mut(app) {
            let snapshot = st.snapshot();
            for w in &st.watchers {
                w.poison.store(true, Ordering::SeqCst);
                // Wakes the stream so the panic happens now.
                w.send(Ok(snapshot.clone()));
            }
        }
    }

    /// Sends `Err(RegistryError::Unavailable(..))` to every live watch
    /// stream of `app` and keeps the streams open: the registry is unhealthy
    /// for now, and the next push heals them (see the stream contract of
    /// [`SnapshotStream`]).
    pub fn report_watch_errors(&self, app: &str) {
        if let Some(st) = self.apps().get_mut(app) {
            let err = RegistryError::Unavailable(format!("injected unhealthy watch for {app}"));
            st.watchers.retain(|w| w.send(Err(err.clone())));
        }
    }

    /// Ends every live watch stream of `app` cleanly: items already sent are
    /// still delivered, then each stream yields `None`.
    pub fn end_watches(&self, app: &str) {
        if let Some(st) = self.apps().get_mut(app) {
            tracing::debug!(app, watchers = st.watchers.len(), "ending watches");
            st.watchers.clear();
        }
    }

    /// Sends `Err(RegistryError::WatchEnded(..))` to every live watch stream
    /// of `app`, then ends it.
    pub fn error_watches(&self, app: &str) {
        if let Some(st) = self.apps().get_mut(app) {
            tracing::debug!(app, watchers = st.watchers.len(), "erroring watches");
            for w in st.watchers.drain(..) {
                // A closed receiver has nothing left to tell.
                let _ = w.send(Err(RegistryError::WatchEnded(format!(
                    "injected watch error for {app}"
                ))));
            }
        }
    }

    // ----- counters ------------------------------------------------------

    /// `list` calls made through the [`Registry`] trait, failed ones included.
    pub fn list_calls(&self) -> usize {
        self.inner.faults.list_calls.get()
    }

    /// `watch` calls made through the [`Registry`] trait, failed ones included.
    pub fn watch_calls(&self) -> usize {
        self.inner.faults.watch_calls.get()
    }

    /// `register` calls made through the [`Registry`] trait, failed ones
    /// included.
    pub fn register_calls(&self) -> usize {
        self.inner.faults.register_calls.get()
    }

    /// `unregister` calls made through the [`Registry`] trait, failed ones
    /// included.
    pub fn unregister_calls(&self) -> usize {
        self.inner.faults.unregister_calls.get()
    }

    // ----- trait bodies (synchronous) --------------------------------------

    fn list_now(&self, app: &str) -> Result<Vec<ServiceInstance>, RegistryError> {
        self.inner.faults.list_calls.bump();
        if self.inner.faults.lists.take() {
            return Err(RegistryError::Injected(format!("list of {app}")));
        }
        Ok(self.instances(app))
    }

    fn watch_now(&self, app: &str) -> Result<SnapshotStream, RegistryError> {
        self.inner.faults.watch_calls.bump();
        if self.inner.faults.watches.take() {
            return Err(RegistryError::Injected(format!("watch of {app}")));
        }
        let (tx, rx) = mpsc::unbounded();
        let poison = Arc::new(AtomicBool::new(false));
        // Snapshot and subscription happen under one lock: no change can
        // slip between the first item and the first push.
        self.with_app(app, |st| {
            st.watchers.retain(|w| !w.is_closed());
            // Cannot fail: the receiver is alive right here.
            let _ = tx.unbounded_send(Ok(st.snapshot()));
            st.watchers.push(Watcher {
                tx,
                poison: poison.clone(),
            });
        });
        let name = app.to_string();
        Ok(rx
            .map(move |item| {
                if poison.swap(false, Ordering::SeqCst) {
                    panic!("injected panic in the watch stream of {name}");
                }
                item
            })
            .boxed())
    }

    fn register_now(&self, instance: ServiceInstance) -> Result<(), RegistryError> {
        self.inner.faults.register_calls.bump();
        if self.inner.faults.registers.take() {
            return Err(RegistryError::Injected(format!(
                "register of {}/{}",
                instance.app, instance.id
            )));
        }
        self.put(instance);
        Ok(())
    }

    fn unregister_now(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        self.inner.faults.unregister_calls.bump();
        if self.inner.faults.registers.take() {
            return Err(RegistryError::Injected(format!(
                "unregister of {}/{}",
                instance.app, instance.id
            )));
        }
        self.remove(&instance.app, &instance.id);
        Ok(())
    }
}

impl Registry for MemoryRegistry {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Vec<ServiceInstance>, RegistryError>> {
        if self.inner.faults.list_panics.take() {
            self.inner.faults.list_calls.bump();
            let app = app.to_string();
            return async move { panic!("injected panic in list of {app}") }.boxed();
        }
        future::ready(self.list_now(app)).boxed()
    }

    fn watch(&self, app: &str) -> BoxFuture<'static, Result<SnapshotStream, RegistryError>> {
        if self.inner.faults.watch_panics.take() {
            self.inner.faults.watch_calls.bump();
            let app = app.to_string();
            return async move { panic!("injected panic in watch of {app}") }.boxed();
        }
        future::ready(self.watch_now(app)).boxed()
    }

    fn register(&self, instance: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        future::ready(self.register_now(instance)).boxed()
    }

    /// Removes the instance by app + id; removing an absent instance succeeds
    /// without a push.
    fn unregister(
        &self,
        instance: ServiceInstance,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        future::ready(self.unregister_now(&instance)).boxed()
    }
}
