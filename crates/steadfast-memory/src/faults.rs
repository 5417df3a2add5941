//! The registry's scriptable faults: thread-safe failure budgets ("fail
//! the next n calls") and call counters, and the [`MemoryRegistry`] knobs
//! that script them. Every fault shows on the event streams of
//! [`MemoryRegistry::watch_events`] (the [`steadfast_core::Registry::watch`]
//! streams); `list` / `list_events` answer under every watch fault.
//!
//! # Missed notifications and versions
//!
//! [`MemoryRegistry::drop_next_pushes`] and
//! [`MemoryRegistry::set_instances_silently`] change the state and bump the
//! registry's version without telling the live watches. Every Delta names
//! its base, the version of the app's previous change, notified or not:
//! after a missed change at `v1`, the next notified change at `v2` is a
//! Delta from `v1` to `v2`, which a watcher holding an older version
//! cannot apply ([`steadfast_core::Change::fit`] says `Gap`), so it learns
//! of the loss at that Delta and re-reads the app. Until a later change is
//! notified nothing shows the loss; only a resync (a listing at a newer
//! version) or a later Reset brings the missed change. The version is
//! registry-wide, so a listing can also be newer with no change of its app
//! at all. Without these two faults every change of an app is notified to
//! its watches in version order, and a watcher at `v` holds exactly the
//! app's state at `v`.

#[cfg(any(test, feature = "faults"))]
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use steadfast_core::RegistryError;

use crate::MemoryRegistry;

/// A number of upcoming calls that must fail.
#[cfg(any(test, feature = "faults"))]
#[derive(Debug, Default)]
pub(crate) struct Budget(AtomicUsize);

/// Without the `faults` feature no call is ever scripted to fail.
#[cfg(not(any(test, feature = "faults")))]
#[derive(Debug, Default)]
pub(crate) struct Budget;

#[cfg(not(any(test, feature = "faults")))]
impl Budget {
    /// Never: nothing can script a failure.
    pub(crate) fn take(&self) -> bool {
        false
    }
}

#[cfg(any(test, feature = "faults"))]
impl Budget {
    /// Replaces the remaining budget with `n`.
    pub(crate) fn set(&self, n: usize) {
        self.0.store(n, Ordering::SeqCst);
    }

    /// Consumes one unit of budget; `true` when the caller must fail.
    pub(crate) fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// A monotonically increasing call counter.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicUsize);

impl Counter {
    /// Counts one call.
    pub(crate) fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// Calls counted so far.
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Every fault budget and call counter of one registry.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Upcoming `list` calls that fail.
    pub(crate) lists: Budget,
    /// Upcoming `watch` calls that fail.
    pub(crate) watches: Budget,
    /// Upcoming `register` / `unregister` calls that fail.
    pub(crate) registers: Budget,
    /// Upcoming `watch` calls whose future panics.
    #[cfg(any(test, feature = "faults"))]
    pub(crate) watch_panics: Budget,
    /// Upcoming `list` calls whose future panics.
    #[cfg(any(test, feature = "faults"))]
    pub(crate) list_panics: Budget,
    /// `list` calls so far.
    pub(crate) list_calls: Counter,
    /// `watch` calls so far.
    pub(crate) watch_calls: Counter,
    /// `register` calls so far.
    pub(crate) register_calls: Counter,
    /// `unregister` calls so far.
    pub(crate) unregister_calls: Counter,
    /// Every call fails while set (the registry is down).
    #[cfg(any(test, feature = "faults"))]
    pub(crate) down: AtomicBool,
    /// Every call answers only after this many milliseconds (0: at once).
    #[cfg(any(test, feature = "faults"))]
    pub(crate) delay_ms: AtomicU64,
}

impl Faults {
    /// The injected outage error, when the registry is down.
    pub(crate) fn outage(&self, what: &str) -> Option<RegistryError> {
        #[cfg(any(test, feature = "faults"))]
        if self.down.load(Ordering::SeqCst) {
            return Some(RegistryError::Unavailable(format!(
                "registry down (injected): {what}"
            )));
        }
        let _ = what;
        None
    }

    /// The injected answer delay.
    pub(crate) fn delay(&self) -> Duration {
        #[cfg(any(test, feature = "faults"))]
        return Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
        #[cfg(not(any(test, feature = "faults")))]
        Duration::ZERO
    }
}

impl MemoryRegistry {
    #[cfg(any(test, feature = "faults"))]
    /// Makes the next `n` `list` / `list_events` calls (one shared budget)
    /// fail with [`RegistryError::Injected`] (replaces any remaining
    /// budget; 0 cancels it).
    pub fn fail_next_lists(&self, n: usize) {
        self.inner.faults.lists.set(n);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes the next `n` `watch` / `watch_events` calls (one shared budget)
    /// fail with [`RegistryError::Injected`] (replaces any remaining
    /// budget; 0 cancels it).
    pub fn fail_next_watches(&self, n: usize) {
        self.inner.faults.watches.set(n);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes the next `n` `register` / `unregister` calls (one shared budget)
    /// fail with [`RegistryError::Injected`] without changing state
    /// (replaces any remaining budget; 0 cancels it).
    pub fn fail_next_registers(&self, n: usize) {
        self.inner.faults.registers.set(n);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Swallows the next `n` notifications of `app`: state and version still
    /// change, but the watchers never see those changes. The next notified
    /// Delta names the last swallowed change as its base, so a watcher sees
    /// the gap there and re-reads: see the module docs ("Missed
    /// notifications and versions"). Replaces any remaining count.
    pub fn drop_next_pushes(&self, app: &str, n: usize) {
        self.state().app(app).drop_pushes = n;
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes the next `n` `watch` / `watch_events` calls return a future
    /// that panics when polled (replaces any remaining budget; 0 cancels it).
    pub fn panic_next_watches(&self, n: usize) {
        self.inner.faults.watch_panics.set(n);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes the next `n` `list` / `list_events` calls return a future that
    /// panics when polled (replaces any remaining budget; 0 cancels it).
    pub fn panic_next_lists(&self, n: usize) {
        self.inner.faults.list_panics.set(n);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes every live watch stream of `app` panic while it is
    /// polled for its next item (each panics once; new watches are not
    /// affected).
    pub fn panic_watch_streams(&self, app: &str) {
        self.state().poison(app);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Sends `Err(RegistryError::Unavailable(..))` to every live watch
    /// stream of `app` and keeps the streams open: the registry is unhealthy
    /// for now, and the next notification heals them (see the stream
    /// contract of [`steadfast_core::EventStream`]). A watch whose first
    /// Reset is still pending reads it now, before the error.
    pub fn report_watch_errors(&self, app: &str) {
        let mut state = self.state();
        if let Some((st, version)) = state.known(app) {
            let err = RegistryError::Unavailable(format!("injected unhealthy watch for {app}"));
            let reset = || st.reset_at(version);
            for w in &st.event_watchers {
                w.push_err(err.clone(), &reset);
            }
        }
    }

    #[cfg(any(test, feature = "faults"))]
    /// Ends every live watch stream of `app` cleanly: items already sent are
    /// still delivered, then each stream yields `None`.
    pub fn end_watches(&self, app: &str) {
        let mut state = self.state();
        if let Some((st, version)) = state.known(app) {
            let watchers = st.event_watchers.len();
            tracing::debug!(app, watchers, "ending watches");
            let events = std::mem::take(&mut st.event_watchers);
            let reset = || st.reset_at(version);
            for w in events {
                w.end(&reset);
            }
        }
    }

    #[cfg(any(test, feature = "faults"))]
    /// Sends `Err(RegistryError::WatchEnded(..))` to every live watch stream
    /// of `app`, then ends it.
    pub fn error_watches(&self, app: &str) {
        let mut state = self.state();
        if let Some((st, version)) = state.known(app) {
            let watchers = st.event_watchers.len();
            tracing::debug!(app, watchers, "erroring watches");
            let err = RegistryError::WatchEnded(format!("injected watch error for {app}"));
            let events = std::mem::take(&mut st.event_watchers);
            let reset = || st.reset_at(version);
            for w in events {
                w.push_err(err.clone(), &reset);
                w.end(&reset);
            }
        }
    }

    #[cfg(any(test, feature = "faults"))]
    /// Takes the registry down (`true`) or brings it back: while down every
    /// `list`, `watch`, `register` and `unregister` call fails with
    /// [`RegistryError::Unavailable`] and changes nothing (calls are still
    /// counted). Live watch streams are not touched; pair with
    /// [`MemoryRegistry::error_watches`] to break them too.
    pub fn set_down(&self, down: bool) {
        self.inner.faults.down.store(down, Ordering::SeqCst);
    }

    #[cfg(any(test, feature = "faults"))]
    /// Makes every `list`, `watch`, `register` and `unregister` call answer
    /// only after `delay` (tokio time, so virtual in paused tests; zero:
    /// at once). The call's outcome is decided when it answers.
    pub fn delay_calls(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.inner.faults.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// `list` / `list_events` calls so far, failed ones included.
    pub fn list_calls(&self) -> usize {
        self.inner.faults.list_calls.get()
    }

    /// `watch` / `watch_events` calls so far, failed ones included.
    pub fn watch_calls(&self) -> usize {
        self.inner.faults.watch_calls.get()
    }

    /// `register` calls made through the [`steadfast_core::Registry`]
    /// trait, failed ones included.
    pub fn register_calls(&self) -> usize {
        self.inner.faults.register_calls.get()
    }

    /// `unregister` calls made through the [`steadfast_core::Registry`]
    /// trait, failed ones included.
    pub fn unregister_calls(&self) -> usize {
        self.inner.faults.unregister_calls.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_counts_down_to_zero() {
        let b = Budget::default();
        assert!(!b.take());
        b.set(2);
        assert!(b.take());
        assert!(b.take());
        assert!(!b.take());
        b.set(1);
        b.set(0);
        assert!(!b.take());
    }

    #[test]
    fn counter_counts() {
        let c = Counter::default();
        c.bump();
        c.bump();
        assert_eq!(c.get(), 2);
    }
}
