//! Thread-safe counters behind the registry's scriptable faults: failure
//! budgets ("fail the next n calls") and plain call counters.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A number of upcoming calls that must fail.
#[derive(Debug, Default)]
pub(crate) struct Budget(AtomicUsize);

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
    pub(crate) watch_panics: Budget,
    /// Upcoming `list` calls whose future panics.
    pub(crate) list_panics: Budget,
    /// `list` calls so far.
    pub(crate) list_calls: Counter,
    /// `watch` calls so far.
    pub(crate) watch_calls: Counter,
    /// `register` calls so far.
    pub(crate) register_calls: Counter,
    /// `unregister` calls so far.
    pub(crate) unregister_calls: Counter,
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
