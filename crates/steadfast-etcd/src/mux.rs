//! [`Mux`]: the sans-IO planner of the shared watch streams of one
//! registry, and [`RangeBatcher`], the planner of its batched ranges.
//!
//! etcd's JSON gateway answers a watch only once the request body is
//! complete, so a shared stream is one request carrying the create of every
//! app on it (each from its own resume revision, with its own watch id),
//! and adding an app means opening the stream again. Two streams keep that
//! cheap:
//!
//! * **main** carries most apps and is opened again only when it broke
//!   (or every app left it), so the watches of idle apps are not
//!   re-created from old revisions that a compaction may have removed;
//! * **side** carries the apps that asked for a watch since main was
//!   opened (new subscribers, apps back from a resync); it is opened again
//!   whenever that set grows. When main is opened next, side's apps move
//!   into it; if side would exceed [`MuxPolicy::side_limit`] apps, main is
//!   opened again with everyone (a rare event: that many new or resyncing
//!   apps since main was built).
//!
//! Requests for a watch are coalesced: the plan waits for
//! [`MuxPolicy::debounce`] without a new request (and while more are
//! coming, e.g. ranges still in flight), at most [`MuxPolicy::max_delay`]
//! after the first one. A stream being opened is never replaced: requests
//! made meanwhile wait for the next plan.
//!
//! Every watch gets a fresh id (unique for the life of the planner); a
//! message is routed to an app only while that id is the app's current
//! watch, so an app that left (to range, to wait out a backoff, or for
//! good) ignores whatever its old watch still sends until it is re-created.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A subscriber (one watched app of one `watch_events` call).
pub type SubKey = u64;

/// One of the two shared streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    /// The big, long-lived stream.
    Main,
    /// The small stream of apps that asked since main was opened.
    Side,
}

impl Slot {
    /// Both slots.
    pub const ALL: [Slot; 2] = [Slot::Main, Slot::Side];

    /// The slot's index (0 or 1).
    pub fn index(self) -> usize {
        match self {
            Slot::Main => 0,
            Slot::Side => 1,
        }
    }
}

/// The planner's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MuxPolicy {
    /// Quiet time after the last watch request before a stream is opened.
    pub debounce: Duration,
    /// Longest a watch request waits for its stream to be planned.
    pub max_delay: Duration,
    /// Most apps on the side stream before everything is moved to main.
    pub side_limit: usize,
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MuxAction {
    /// Drop the stream of this slot (nobody is left on it).
    Close(Slot),
    /// Drop any stream of `slot` and open one carrying these watches
    /// (subscriber, watch id); report [`Mux::opened`] or [`Mux::broken`].
    Open {
        /// The slot.
        slot: Slot,
        /// Every watch of the new stream.
        watches: Vec<(SubKey, i64)>,
    },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Idle,
    Opening,
    Open,
}

#[derive(Debug, Default)]
struct Stream {
    members: BTreeMap<SubKey, i64>,
    state: State,
}

/// The shared-stream planner.
#[derive(Debug)]
pub struct Mux {
    policy: MuxPolicy,
    streams: [Stream; 2],
    pending: BTreeSet<SubKey>,
    first_request: Option<Instant>,
    last_request: Option<Instant>,
    member_of: HashMap<SubKey, (Slot, i64)>,
    by_watch: HashMap<i64, SubKey>,
    next_id: i64,
    actions: Vec<MuxAction>,
}

impl Mux {
    /// An empty planner.
    pub fn new(policy: MuxPolicy) -> Self {
        Self {
            policy,
            streams: Default::default(),
            pending: BTreeSet::new(),
            first_request: None,
            last_request: None,
            member_of: HashMap::new(),
            by_watch: HashMap::new(),
            next_id: 1,
            actions: Vec::new(),
        }
    }

    /// `k` wants a watch (from its own resume revision, which the driver
    /// reads when the stream is opened).
    pub fn want(&mut self, k: SubKey, now: Instant) {
        self.detach(k);
        self.pending.insert(k);
        self.first_request.get_or_insert(now);
        self.last_request = Some(now);
    }

    /// `k` needs no watch now (it ranges, waits, or unsubscribed): its
    /// current watch is ignored from now on.
    pub fn leave(&mut self, k: SubKey) {
        self.detach(k);
        self.pending.remove(&k);
        if self.pending.is_empty() {
            self.first_request = None;
        }
    }

    fn detach(&mut self, k: SubKey) {
        if let Some((slot, id)) = self.member_of.remove(&k) {
            self.by_watch.remove(&id);
            let s = &mut self.streams[slot.index()];
            s.members.remove(&k);
            if s.members.is_empty() && s.state != State::Idle {
                s.state = State::Idle;
                self.actions.push(MuxAction::Close(slot));
            }
        }
    }

    /// The stream of `slot` answered (its messages follow).
    pub fn opened(&mut self, slot: Slot) {
        let s = &mut self.streams[slot.index()];
        if s.state == State::Opening {
            s.state = State::Open;
        }
    }

    /// The stream of `slot` failed to open, broke or ended: its members,
    /// which are on no stream any more.
    pub fn broken(&mut self, slot: Slot) -> Vec<SubKey> {
        let s = &mut self.streams[slot.index()];
        s.state = State::Idle;
        let members: Vec<SubKey> = std::mem::take(&mut s.members).into_keys().collect();
        for k in &members {
            if let Some((_, id)) = self.member_of.remove(k) {
                self.by_watch.remove(&id);
            }
        }
        members
    }

    /// The subscriber whose current watch is `watch_id` on `slot`.
    pub fn route(&self, slot: Slot, watch_id: i64) -> Option<SubKey> {
        let k = *self.by_watch.get(&watch_id)?;
        (self.member_of.get(&k) == Some(&(slot, watch_id))).then_some(k)
    }

    /// The stream `k` is on, if any.
    pub fn slot_of(&self, k: SubKey) -> Option<Slot> {
        self.member_of.get(&k).map(|(s, _)| *s)
    }

    /// The apps on `slot`'s stream.
    pub fn member_keys(&self, slot: Slot) -> Vec<SubKey> {
        self.streams[slot.index()].members.keys().copied().collect()
    }

    /// How many apps are on `slot`'s stream.
    #[cfg(test)]
    pub fn members(&self, slot: Slot) -> usize {
        self.streams[slot.index()].members.len()
    }

    /// When [`Mux::poll`] must run next, at the latest (`more_coming`:
    /// more watch requests are expected soon, e.g. ranges in flight).
    pub fn next_wake(&self, more_coming: bool) -> Option<Instant> {
        let first = self.first_request?;
        let cap = first.checked_add(self.policy.max_delay).unwrap_or(first);
        if more_coming {
            return Some(cap);
        }
        let quiet = self
            .last_request
            .and_then(|l| l.checked_add(self.policy.debounce))
            .unwrap_or(cap);
        Some(quiet.min(cap))
    }

    /// Plans at `now`; returns what to do (closes first).
    pub fn poll(&mut self, now: Instant, more_coming: bool) -> Vec<MuxAction> {
        if self.next_wake(more_coming).is_some_and(|w| w <= now) {
            self.plan();
        }
        std::mem::take(&mut self.actions)
    }

    fn plan(&mut self) {
        let main = self.streams[0].state;
        let side = self.streams[1].state;
        let side_total = self.streams[1].members.len() + self.pending.len();
        match (main, side) {
            // Main is opened again only when it is down: side moves in.
            (State::Idle, State::Opening) => {}
            (State::Idle, _) => self.open(Slot::Main, true),
            (_, State::Opening) => {}
            (State::Open, _) if side_total > self.policy.side_limit => self.open(Slot::Main, true),
            _ => self.open(Slot::Side, false),
        }
    }

    /// Opens `slot` with its members, the pending apps and (`absorb`) the
    /// side stream's members.
    fn open(&mut self, slot: Slot, absorb: bool) {
        let mut joining: Vec<SubKey> = std::mem::take(&mut self.pending).into_iter().collect();
        self.first_request = None;
        self.last_request = None;
        if absorb && slot == Slot::Main && self.streams[1].state != State::Idle {
            joining.extend(self.broken(Slot::Side));
            self.actions.push(MuxAction::Close(Slot::Side));
        }
        let s = &mut self.streams[slot.index()];
        s.state = State::Opening;
        let mut all: Vec<SubKey> = std::mem::take(&mut s.members).into_keys().collect();
        all.extend(joining);
        for k in &all {
            if let Some((_, id)) = self.member_of.remove(k) {
                self.by_watch.remove(&id);
            }
        }
        let mut watches = Vec::with_capacity(all.len());
        for k in all {
            let id = self.next_id;
            self.next_id = self.next_id.saturating_add(1);
            self.streams[slot.index()].members.insert(k, id);
            self.member_of.insert(k, (slot, id));
            self.by_watch.insert(id, k);
            watches.push((k, id));
        }
        self.actions.push(MuxAction::Open { slot, watches });
    }
}

/// The planner of batched ranges: subscribers queue for a range; a batch
/// is at most `max_ops` of them, at most `max_in_flight` batches at once.
#[derive(Debug)]
pub struct RangeBatcher {
    queue: VecDeque<SubKey>,
    queued: BTreeSet<SubKey>,
    in_flight: usize,
    max_ops: usize,
    max_in_flight: usize,
}

impl RangeBatcher {
    /// A batcher of `max_ops` ranges per batch, `max_in_flight` batches.
    pub fn new(max_ops: usize, max_in_flight: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            queued: BTreeSet::new(),
            in_flight: 0,
            max_ops: max_ops.max(1),
            max_in_flight: max_in_flight.max(1),
        }
    }

    /// `k` needs a range.
    pub fn push(&mut self, k: SubKey) {
        if self.queued.insert(k) {
            self.queue.push_back(k);
        }
    }

    /// `k` needs no range any more (it is skipped if still queued).
    pub fn remove(&mut self, k: SubKey) {
        self.queued.remove(&k);
    }

    /// The next batch to send, if one may go now.
    pub fn take(&mut self) -> Option<Vec<SubKey>> {
        if self.in_flight >= self.max_in_flight {
            return None;
        }
        let mut batch = Vec::new();
        while batch.len() < self.max_ops {
            let Some(k) = self.queue.pop_front() else {
                break;
            };
            if self.queued.remove(&k) {
                batch.push(k);
            }
        }
        if batch.is_empty() {
            return None;
        }
        self.in_flight += 1;
        Some(batch)
    }

    /// A batch answered (or failed).
    pub fn done(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Whether ranges are queued or in flight.
    pub fn busy(&self) -> bool {
        self.in_flight > 0 || !self.queued.is_empty()
    }
}

#[cfg(test)]
mod tests;
