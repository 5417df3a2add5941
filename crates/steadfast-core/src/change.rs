//! The one change protocol of the data path. Every hop (registry backend ->
//! subscription -> resolver -> directory) carries a [`Change`]: the whole
//! state ([`Change::Reset`]) or what changed ([`Change::Delta`]), both at a
//! [`Version`] of the registry's history. Each stage holds the version of
//! the state it last applied and takes a change through one rule,
//! [`Change::fit`]:
//!
//! - a Reset applies unless it is older than what is held;
//! - a Delta applies on any state held at a version in `[base, version)`
//!   (the state did not change in between), is older when the state held is
//!   at `version` or later, and is a *gap* otherwise (something between the
//!   state held and `base` was never seen);
//! - a gap is answered by one Reset asked of the stage's source
//!   ([`ResetAsk`]: one ask per gap, at most one per [`RESET_ASK_INTERVAL`],
//!   counted).
//!
//! Versions come from the registry (etcd: the store revision; the embedded
//! registry: its change counter) and travel downstream unchanged; a change a
//! stage makes on its own at the same registry version (a held instance
//! expiring, a revision resolving) takes the next [`Version::step`], so every
//! stage's output grows strictly.
//!
//! Between stages changes wait in a bounded [`ChangeQueue`]: its consumer
//! is woken once when it stops being empty and takes everything queued in
//! one go; a producer whose consumer falls behind by more than the state's
//! size replaces the queue by one Reset.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Position of a state in its source's history.
///
/// Ordered by epoch, then revision, then step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Bumped when the source's history restarted (a wiped store).
    pub epoch: u64,
    /// Monotonic within an epoch (etcd: the store revision).
    pub revision: u64,
    /// Changes the engine made on its own at this registry version (a held
    /// instance released, a revision resolved): 0 for every registry event.
    pub step: u32,
}

impl Version {
    /// Version `revision` of epoch 0.
    pub const fn at(revision: u64) -> Self {
        Self {
            epoch: 0,
            revision,
            step: 0,
        }
    }

    /// Version `revision` of `epoch`.
    pub const fn of(epoch: u64, revision: u64) -> Self {
        Self {
            epoch,
            revision,
            step: 0,
        }
    }

    /// The version of a change a stage makes on its own right after this
    /// one, at the same registry version.
    pub fn next_step(self) -> Self {
        Self {
            step: self.step.saturating_add(1),
            ..self
        }
    }

    /// The version of a stage's next output: `input` when that is newer than
    /// `last` (the stage's previous output), else the step after `last`.
    pub fn after(last: Option<Self>, input: Self) -> Self {
        match last {
            Some(last) if input <= last => last.next_step(),
            _ => input,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.epoch != 0 {
            write!(f, "{}:", self.epoch)?;
        }
        write!(f, "{}", self.revision)?;
        if self.step != 0 {
            write!(f, ".{}", self.step)?;
        }
        Ok(())
    }
}

/// One change of a versioned collection of `T` (registry instances, the
/// URLs of one subscribe key), keyed by instance id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change<T> {
    /// The whole state at `version`, in the source's order: replaces what
    /// the receiver holds.
    Reset {
        /// Version of the state.
        version: Version,
        /// Everything, in order (a repeated key: the later one wins).
        items: Vec<T>,
    },
    /// What changed: applies on a state held at any version in
    /// `[base, version)`.
    Delta {
        /// The version of the state the change applies on (the state did
        /// not change since).
        base: Version,
        /// The version after the change.
        version: Version,
        /// Added or replaced items (by key; a later one wins).
        upserts: Vec<T>,
        /// Ids of the items removed (before the upserts are applied).
        removals: Vec<Arc<str>>,
    },
}

/// How a change fits the state a receiver holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Apply it.
    Apply,
    /// It is not newer than the state held: ignore it (a replay).
    Older,
    /// It applies on a state the receiver never saw: ask for a Reset.
    Gap,
}

impl<T> Change<T> {
    /// The version after the change.
    pub fn version(&self) -> Version {
        match self {
            Change::Reset { version, .. } | Change::Delta { version, .. } => *version,
        }
    }

    /// Whether this is a Reset.
    pub fn is_reset(&self) -> bool {
        matches!(self, Change::Reset { .. })
    }

    /// How the change fits a receiver holding the state at `held` (`None`:
    /// nothing yet). See the module docs.
    pub fn fit(&self, held: Option<Version>) -> Fit {
        match (self, held) {
            (Change::Reset { version, .. }, Some(h)) if *version < h => Fit::Older,
            (Change::Reset { .. }, _) => Fit::Apply,
            (Change::Delta { .. }, None) => Fit::Gap,
            (Change::Delta { base, version, .. }, Some(h)) => {
                if h >= *version {
                    Fit::Older
                } else if h >= *base {
                    Fit::Apply
                } else {
                    Fit::Gap
                }
            }
        }
    }

    /// Number of items the change carries (all of them, or upserts plus
    /// removals).
    pub fn len(&self) -> usize {
        match self {
            Change::Reset { items, .. } => items.len(),
            Change::Delta {
                upserts, removals, ..
            } => upserts.len().saturating_add(removals.len()),
        }
    }

    /// Whether the change carries no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The most items a change of a state of `size` items carries as a Delta:
/// a change touching more (a quarter of the state, at least 16) is carried
/// as a Reset, which every stage applies in one pass (a rebuild costs about
/// as much as patching a quarter of a large state chunk by chunk; see
/// `examples/bench_pipeline`, which measures both).
pub fn delta_budget(size: usize) -> usize {
    (size / 4).max(16)
}

/// Shortest time between two Reset asks of one receiver.
pub const RESET_ASK_INTERVAL: Duration = Duration::from_secs(1);

/// The gap rule's other half: when a receiver asks its source for a Reset.
/// The first gap asks at once; further gaps ask nothing until a Reset
/// arrived or [`RESET_ASK_INTERVAL`] passed since the last ask (the Reset
/// may have been lost), so one gap is one ask and a source that keeps
/// sending changes that do not follow gets at most one ask per interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResetAsk {
    /// Since when the receiver waits for a Reset.
    pending_since: Option<Instant>,
    last_ask: Option<Instant>,
    gaps: u64,
    asks: u64,
}

impl ResetAsk {
    /// A change did not follow the state held (a [`Fit::Gap`]) at `now`:
    /// whether to ask for a Reset now.
    pub fn on_gap(&mut self, now: Instant) -> bool {
        self.gaps = self.gaps.saturating_add(1);
        self.pending_since.get_or_insert(now);
        let due = self
            .last_ask
            .is_none_or(|at| now.saturating_duration_since(at) >= RESET_ASK_INTERVAL);
        if due {
            self.last_ask = Some(now);
            self.asks = self.asks.saturating_add(1);
        }
        due
    }

    /// A Reset was applied: the gap, if any, is closed.
    pub fn on_reset(&mut self) {
        self.pending_since = None;
    }

    /// Since when a Reset is awaited, if one is.
    pub fn pending_since(&self) -> Option<Instant> {
        self.pending_since
    }

    /// Changes that did not follow, so far.
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// Resets asked for, so far.
    pub fn asks(&self) -> u64 {
        self.asks
    }
}

/// What [`ChangeQueue::push`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Queued behind others: the consumer is woken already.
    Queued,
    /// Queued in an empty queue: wake the consumer.
    Wake,
    /// Not queued: the consumer is too far behind. Replace the queue by a
    /// Reset ([`ChangeQueue::replace`]).
    Full,
}

/// A bounded queue of changes between two stages (see the module docs).
/// Each entry counts for the items it carries; pushing more than the bound
/// given is refused ([`Pushed::Full`]) unless the queue is empty.
#[derive(Debug)]
pub struct ChangeQueue<T> {
    entries: VecDeque<T>,
    /// Items carried by the entries queued.
    items: usize,
    /// Times the queue was replaced by a Reset.
    collapses: u64,
}

impl<T> Default for ChangeQueue<T> {
    fn default() -> Self {
        Self {
            entries: VecDeque::new(),
            items: 0,
            collapses: 0,
        }
    }
}

/// Items a queue holds at least before it may refuse a change, whatever the
/// size of the state.
pub const QUEUE_MIN_ITEMS: usize = 4096;

impl<T> ChangeQueue<T> {
    /// Queues `entry`, which carries `items` items, unless the queue is not
    /// empty and would then carry more than `bound` items.
    pub fn push(&mut self, entry: T, items: usize, bound: usize) -> Pushed {
        let was_empty = self.entries.is_empty();
        if !was_empty && self.items.saturating_add(items) > bound.max(QUEUE_MIN_ITEMS) {
            return Pushed::Full;
        }
        self.entries.push_back(entry);
        self.items = self.items.saturating_add(items);
        if was_empty {
            Pushed::Wake
        } else {
            Pushed::Queued
        }
    }

    /// Replaces everything queued by `reset` (carrying `items` items);
    /// whether the consumer must be woken (the queue was empty).
    pub fn replace(&mut self, reset: T, items: usize) -> bool {
        let was_empty = self.entries.is_empty();
        if !was_empty {
            self.collapses = self.collapses.saturating_add(1);
        }
        self.entries.clear();
        self.entries.push_back(reset);
        self.items = items;
        was_empty
    }

    /// Takes everything queued, oldest first.
    pub fn drain(&mut self) -> Vec<T> {
        self.items = 0;
        self.entries.drain(..).collect()
    }

    /// Entries queued.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Items carried by the entries queued.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Times the queue was replaced by a Reset while not empty.
    pub fn collapses(&self) -> u64 {
        self.collapses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(base: u64, version: u64) -> Change<u32> {
        Change::Delta {
            base: Version::at(base),
            version: Version::at(version),
            upserts: vec![1],
            removals: Vec::new(),
        }
    }

    fn reset(version: u64) -> Change<u32> {
        Change::Reset {
            version: Version::at(version),
            items: Vec::new(),
        }
    }

    #[test]
    fn one_rule_for_resets_and_deltas() {
        let at = |r| Some(Version::at(r));
        assert_eq!(reset(5).fit(None), Fit::Apply);
        assert_eq!(
            reset(5).fit(at(5)),
            Fit::Apply,
            "the same version: the truth"
        );
        assert_eq!(reset(4).fit(at(5)), Fit::Older);
        assert_eq!(delta(3, 6).fit(None), Fit::Gap, "nothing to apply on");
        assert_eq!(delta(3, 6).fit(at(3)), Fit::Apply);
        assert_eq!(delta(3, 6).fit(at(5)), Fit::Apply, "unchanged since 3");
        assert_eq!(delta(3, 6).fit(at(6)), Fit::Older);
        assert_eq!(delta(3, 6).fit(at(9)), Fit::Older);
        assert_eq!(delta(3, 6).fit(at(2)), Fit::Gap);
        let later_epoch = Version::of(1, 1);
        assert!(later_epoch > Version::at(u64::MAX));
        let d: Change<u32> = Change::Delta {
            base: Version::at(7),
            version: Version::at(7).next_step(),
            upserts: Vec::new(),
            removals: vec![Arc::from("1")],
        };
        assert_eq!(d.fit(at(7)), Fit::Apply, "a step at the same revision");
        assert_eq!(d.fit(Some(Version::at(7).next_step())), Fit::Older);
    }

    #[test]
    fn a_stage_output_grows_strictly() {
        let v = Version::at(10);
        assert_eq!(Version::after(None, v), v);
        assert_eq!(Version::after(Some(Version::at(9)), v), v);
        assert_eq!(Version::after(Some(v), v), v.next_step());
        let s = v.next_step().next_step();
        assert_eq!(Version::after(Some(s), v.next_step()), s.next_step());
        assert_eq!(Version::after(Some(s), Version::at(11)), Version::at(11));
        assert_eq!(v.to_string(), "10");
        assert_eq!(s.to_string(), "10.2");
        assert_eq!(Version::of(3, 4).to_string(), "3:4");
    }

    #[test]
    fn one_ask_per_gap_and_at_most_one_per_interval() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = ResetAsk::default();
        assert!(a.on_gap(t0), "the first gap asks at once");
        assert!(!a.on_gap(t0 + ms(10)), "the same gap: no second ask");
        assert_eq!(a.pending_since(), Some(t0));
        assert!(a.on_gap(t0 + ms(1000)), "the Reset never came: asked again");
        a.on_reset();
        assert_eq!(a.pending_since(), None);
        assert!(
            !a.on_gap(t0 + ms(1100)),
            "a new gap within the interval waits"
        );
        assert!(a.on_gap(t0 + ms(2000)), "then asks");
        assert_eq!((a.gaps(), a.asks()), (5, 3));
    }

    #[test]
    fn a_queue_wakes_once_and_collapses_past_its_bound() {
        let mut q: ChangeQueue<u32> = ChangeQueue::default();
        assert_eq!(q.push(1, 10, 0), Pushed::Wake);
        assert_eq!(q.push(2, 10, 0), Pushed::Queued);
        assert_eq!(q.drain(), vec![1, 2]);
        assert!(q.is_empty());
        assert_eq!(
            q.push(3, 1_000_000, 0),
            Pushed::Wake,
            "an empty queue takes anything"
        );
        assert_eq!(q.push(4, 1, 10), Pushed::Full);
        assert!(!q.replace(5, 7), "not empty: already woken");
        assert_eq!((q.len(), q.items(), q.collapses()), (1, 7, 1));
        for k in 0..QUEUE_MIN_ITEMS as u32 - 7 {
            assert_eq!(q.push(k, 1, 0), Pushed::Queued);
        }
        assert_eq!(q.push(9, 1, 0), Pushed::Full, "bounded");
        assert_eq!(
            q.push(9, 1, QUEUE_MIN_ITEMS + 1),
            Pushed::Queued,
            "by the state's size"
        );
        q.drain();
        assert!(q.replace(6, 1), "empty: wake");
    }
}
