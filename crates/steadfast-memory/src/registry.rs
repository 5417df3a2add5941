//! The [`MemoryRegistry`] itself: shared state behind an `Arc<Mutex<..>>`,
//! the [`Registry`] implementation, the event watch and listing
//! ([`MemoryRegistry::watch_events`], [`MemoryRegistry::list_events`]) and
//! the synchronous test helpers. The call counters and the fault knobs are
//! in `faults.rs`; the knobs exist only with the `faults` feature.
//!
//! Every operation takes effect when it is called; the futures returned are
//! already complete. No lock is ever held across an `await` (there is none
//! inside).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::{self, BoxFuture, FutureExt};
use steadfast_core::{
    EventStream, Listing, MappingStream, Registry, RegistryError, RegistryEvent, ServiceInstance,
    Version,
};

use crate::events::{EventWatcher, DEFAULT_EVENT_QUEUE_LIMIT};
use crate::faults::Faults;
use crate::state::{Change, State};

/// State shared by every clone of one registry.
pub(crate) struct Inner {
    /// Every app's state and the version counter.
    state: Mutex<State>,
    /// Fault budgets and call counters.
    pub(crate) faults: Faults,
    /// Items an event watcher may fall behind by before it is coalesced.
    event_queue_limit: usize,
    /// Interface -> app mappings and their watches (`mapping.rs`).
    pub(crate) mappings: crate::mapping::Mappings,
    /// What a session loss drops, and the session streams.
    pub(crate) sessions: crate::session::Sessions,
}

impl Inner {
    /// Locks the state; a poisoned lock is recovered (the state stays
    /// consistent because no operation panics half-way through an update).
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An in-process [`Registry`], with scriptable faults under the `faults`
/// feature (tests and drills; the default build carries none).
///
/// Cheap to clone: all clones share the same state. Each app's instances
/// are decoded once, at put, into shared [`steadfast_core::Instance`]s kept
/// by id; the registry has one version counter that every change bumps.
/// Watches ([`Registry::watch`], the same as
/// [`MemoryRegistry::watch_events`]) get a Reset and then one Delta per put
/// or remove, a Reset after `set_instances`.
#[derive(Clone)]
pub struct MemoryRegistry {
    pub(crate) inner: Arc<Inner>,
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        Self::with_event_queue_limit(DEFAULT_EVENT_QUEUE_LIMIT)
    }
}

impl std::fmt::Debug for MemoryRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        let mut names: Vec<&String> = state.apps.keys().collect();
        names.sort();
        f.debug_struct("MemoryRegistry")
            .field("apps", &names)
            .field("version", &state.version)
            .finish_non_exhaustive()
    }
}

impl MemoryRegistry {
    /// Creates an empty registry (event queues bounded by
    /// [`DEFAULT_EVENT_QUEUE_LIMIT`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates an empty registry whose event watchers may fall `limit`
    /// items behind (at least 1) before their queue is replaced by one
    /// Reset of the current state.
    pub fn with_event_queue_limit(limit: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                faults: Faults::default(),
                event_queue_limit: limit.max(1),
                mappings: Default::default(),
                sessions: Default::default(),
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state()
    }

    // ----- synchronous helpers -------------------------------------------

    /// Inserts or replaces (by id) `instance` under `instance.app` and
    /// notifies the app's watchers: a Delta with only this instance. Always
    /// notifies (with a new version), even when the instance is unchanged.
    pub fn put(&self, instance: ServiceInstance) {
        let mut state = self.state();
        let stored = state.app(&instance.app).upsert(&instance);
        let (base, version) = state.change(&instance.app);
        let delta = RegistryEvent::Delta {
            base,
            version,
            upserts: vec![stored],
            removals: Vec::new(),
        };
        state.notify(&instance.app, Change::Delta(delta));
    }

    /// Removes instance `id` of `app`. Notifies (a Delta with only the
    /// removal) and returns `true` when it was present; does nothing and
    /// returns `false` otherwise.
    pub fn remove(&self, app: &str, id: &str) -> bool {
        let mut state = self.state();
        let Some(id) = state.apps.get_mut(app).and_then(|st| st.delete(id)) else {
            return false;
        };
        let (base, version) = state.change(app);
        let delta = RegistryEvent::Delta {
            base,
            version,
            upserts: Vec::new(),
            removals: vec![id],
        };
        state.notify(app, Change::Delta(delta));
        true
    }

    /// Replaces every instance of `app` with `instances` and notifies once
    /// (event watches get a Reset). Instances are stored under `app` (their
    /// `app` field is ignored); a later instance with the same id replaces
    /// an earlier one, in its position.
    pub fn set_instances(&self, app: &str, instances: Vec<ServiceInstance>) {
        let mut state = self.state();
        state.app(app).replace_all(&instances);
        state.change(app);
        state.notify(app, Change::Reset);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Replaces every instance of `app` like [`MemoryRegistry::set_instances`]
    /// but notifies no watcher: a lost notification. The state and the
    /// version change (so `list`, `list_events` and any new watch see it);
    /// live watches never see it: a later Delta carries only its own change,
    /// on top of this (unseen) version, so a watcher learns of the gap with
    /// the next Delta and re-reads; a resync (a listing applied as a Reset)
    /// or a later Reset (`set_instances`, a coalesced queue) brings it too.
    pub fn set_instances_silently(&self, app: &str, instances: Vec<ServiceInstance>) {
        let mut state = self.state();
        state.app(app).replace_all(&instances);
        state.change(app);
    }

    /// The current instances of `app`, in registration order (no fault, no
    /// counter).
    pub fn instances(&self, app: &str) -> Vec<ServiceInstance> {
        self.state()
            .apps
            .get(app)
            .map(|st| st.records(app))
            .unwrap_or_default()
    }

    /// The registry's current version (every change of any app bumps it,
    /// notified or not; epoch 0).
    pub fn version(&self) -> Version {
        self.state().version()
    }

    /// The number of live watch streams of `app` (closed ones are pruned).
    pub fn watcher_count(&self, app: &str) -> usize {
        self.state().apps.get_mut(app).map_or(0, |st| {
            st.prune();
            st.event_watchers.len()
        })
    }

    /// The longest event queue among the live event watches of `app`: items
    /// sent and not read yet, a pending Reset counting as one. Never above
    /// the queue limit plus one.
    pub fn queued_events(&self, app: &str) -> usize {
        self.state().apps.get(app).map_or(0, |st| {
            st.event_watchers
                .iter()
                .map(EventWatcher::queued)
                .max()
                .unwrap_or(0)
        })
    }

    // ----- event watch and listing -----------------------------------------

    /// Opens an event watch of `app`: first a Reset of the current state
    /// (read when first polled), then one Delta per put or remove, a Reset
    /// after `set_instances`, in version order. A watcher that falls the
    /// queue limit behind gets one Reset instead of its queued items.
    /// Subject to the watch faults and counted as a watch call.
    pub fn watch_events(
        &self,
        app: &str,
    ) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        #[cfg(any(test, feature = "faults"))]
        if self.inner.faults.watch_panics.take() {
            self.inner.faults.watch_calls.bump();
            let app = app.to_string();
            return async move { panic!("injected panic in watch of {app}") }.boxed();
        }
        let (this, app) = (self.clone(), app.to_string());
        self.answer(move || this.watch_events_now(&app))
    }

    /// Answers with `call()` after the injected delay, if any (at once
    /// otherwise, so tests without delays see no extra poll).
    fn answer<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> Result<T, RegistryError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, RegistryError>> {
        let delay = self.inner.faults.delay();
        if delay.is_zero() {
            return future::ready(call()).boxed();
        }
        async move {
            tokio::time::sleep(delay).await;
            call()
        }
        .boxed()
    }

    /// Every instance of `app` with the current version. Subject to the list
    /// faults and counted as a list call.
    pub fn list_events(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        #[cfg(any(test, feature = "faults"))]
        if self.inner.faults.list_panics.take() {
            self.inner.faults.list_calls.bump();
            let app = app.to_string();
            return async move { panic!("injected panic in list of {app}") }.boxed();
        }
        let (this, app) = (self.clone(), app.to_string());
        self.answer(move || this.list_events_now(&app))
    }

    fn watch_events_now(&self, app: &str) -> Result<EventStream, RegistryError> {
        self.inner.faults.watch_calls.bump();
        if let Some(e) = self.inner.faults.outage(&format!("watch of {app}")) {
            return Err(e);
        }
        if self.inner.faults.watches.take() {
            return Err(RegistryError::Injected(format!("watch of {app}")));
        }
        let (watcher, stream) = EventWatcher::subscribe(
            self.inner.event_queue_limit,
            Arc::downgrade(&self.inner),
            app,
        );
        let mut state = self.state();
        let st = state.app(app);
        st.prune();
        st.event_watchers.push(watcher);
        Ok(stream)
    }

    fn list_events_now(&self, app: &str) -> Result<Listing, RegistryError> {
        self.inner.faults.list_calls.bump();
        if let Some(e) = self.inner.faults.outage(&format!("list of {app}")) {
            return Err(e);
        }
        if self.inner.faults.lists.take() {
            return Err(RegistryError::Injected(format!("list of {app}")));
        }
        Ok(self.state().listing(app))
    }

    // ----- trait bodies (synchronous) --------------------------------------

    fn register_now(&self, instance: ServiceInstance) -> Result<(), RegistryError> {
        self.inner.faults.register_calls.bump();
        if let Some(e) = self.inner.faults.outage("register") {
            return Err(e);
        }
        if self.inner.faults.registers.take() {
            return Err(RegistryError::Injected(format!(
                "register of {}/{}",
                instance.app, instance.id
            )));
        }
        self.inner.sessions.registered(&instance.app, &instance.id);
        self.put(instance);
        Ok(())
    }

    fn unregister_now(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        self.inner.faults.unregister_calls.bump();
        if let Some(e) = self.inner.faults.outage("unregister") {
            return Err(e);
        }
        if self.inner.faults.registers.take() {
            return Err(RegistryError::Injected(format!(
                "unregister of {}/{}",
                instance.app, instance.id
            )));
        }
        self.inner
            .sessions
            .unregistered(&instance.app, &instance.id);
        self.remove(&instance.app, &instance.id);
        Ok(())
    }
}

impl Registry for MemoryRegistry {
    /// The embedded, in-process registry: kind `memory`, no endpoints.
    fn describe(&self) -> steadfast_core::RegistryInfo {
        steadfast_core::RegistryInfo::new("memory", Vec::new())
    }

    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        self.list_events(app)
    }

    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.watch_events(app)
    }

    fn register(&self, instance: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        let this = self.clone();
        self.answer(move || this.register_now(instance))
    }

    /// Removes the instance by app + id; removing an absent instance succeeds
    /// without a push.
    fn unregister(
        &self,
        instance: ServiceInstance,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let this = self.clone();
        self.answer(move || this.unregister_now(&instance))
    }

    fn register_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let (this, interface, app) = (self.clone(), interface.to_string(), app.to_string());
        self.answer(move || this.change_mapping_now(&interface, &app, true))
    }

    fn unregister_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let (this, interface, app) = (self.clone(), interface.to_string(), app.to_string());
        self.answer(move || this.change_mapping_now(&interface, &app, false))
    }

    fn watch_mapping(
        &self,
        interface: &str,
    ) -> BoxFuture<'static, Result<MappingStream, RegistryError>> {
        let (this, interface) = (self.clone(), interface.to_string());
        #[cfg(any(test, feature = "faults"))]
        if self.mapping_watch_panics() {
            return async move { panic!("injected panic in mapping watch of {interface}") }.boxed();
        }
        self.answer(move || this.watch_mapping_now(&interface))
    }

    /// Session losses scripted with [`MemoryRegistry::lose_session`].
    fn sessions(&self) -> Option<steadfast_core::SessionStream> {
        Some(self.inner.sessions.stream())
    }
}
