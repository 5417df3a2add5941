//! The fetch budget: a sans-IO candidate policy for one metadata fetch of a
//! revision (a *flight*). The machine takes time as an input and returns
//! [`FetchAction`]s (start candidate `i`, wake me at `t`, the fetch is over
//! with this result); the cache actor's flight only performs them.
//!
//! The policy, with the defaults of [`FetchPolicy::default`]:
//! - **one deadline** bounds the whole fetch (5 s), however many candidates
//!   it tries; a candidate still pending then has failed with
//!   [`FetchError::Timeout`];
//! - **hedging**: the first candidate starts at once; a fast failure moves
//!   on to the next one at once; when nothing answered after the hedge delay
//!   (250 ms) the remaining candidates of the budget start in parallel;
//! - **a budget per flight**: the first flight of a revision (fresh) may try
//!   up to `fanout` candidates (16), so 9 hung instances out of 10 cost one
//!   hedge delay, not nine timeouts; a retry (the revision's previous flight
//!   failed within `revision_memory`) tries at most `retry_calls` (2), so a
//!   failing revision costs its providers at most 2 calls per retry, however
//!   many instances advertise it;
//! - **order**: [`FetchMemory`] puts instances that failed or hung within
//!   `instance_memory` (60 s) last, the least recently failed first, so
//!   consecutive retries rotate through the instances and a healthy one is
//!   tried before a broken one.
//!
//! [`fetch_contained`] runs a user-supplied fetcher with its panics turned
//! into [`FetchError::Panicked`].

mod memory;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::backend::MetadataFetcher;
use crate::error::{ErrorClass, FetchError};
use crate::model::{MetadataInfo, ServiceInstance};

pub use memory::FetchMemory;

/// Longest whole-fetch deadline the policy uses (longer ones are cut to it).
pub const MAX_FETCH_DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// The candidate policy of metadata fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchPolicy {
    /// Deadline of one whole fetch of a revision, from its start to its
    /// result, hedged calls included (default 5 s; clamped to 1 ms..1 day).
    pub deadline: Duration,
    /// Time without an answer after which the remaining candidates of the
    /// budget start in parallel (default 250 ms).
    pub hedge_delay: Duration,
    /// Candidates the first flight of a revision may try (default 16; at
    /// least 1).
    pub fanout: usize,
    /// Candidates a retry flight may try (default 2; at least 1).
    pub retry_calls: usize,
    /// How long an instance that failed or hung is tried after the others
    /// (default 60 s).
    pub instance_memory: Duration,
    /// How long a failed flight makes the next flight of the same revision a
    /// retry (default 5 min; the engine raises it to twice the backoff cap
    /// when that is longer).
    pub revision_memory: Duration,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(5),
            hedge_delay: Duration::from_millis(250),
            fanout: 16,
            retry_calls: 2,
            instance_memory: Duration::from_secs(60),
            revision_memory: Duration::from_secs(300),
        }
    }
}

impl FetchPolicy {
    /// Candidates a flight may try: `fanout` when fresh, `retry_calls` for a
    /// retry; never 0.
    pub fn budget(&self, retry: bool) -> usize {
        if retry {
            self.retry_calls.max(1)
        } else {
            self.fanout.max(1)
        }
    }

    /// The whole-fetch deadline, clamped to 1 ms..[`MAX_FETCH_DEADLINE`].
    pub fn deadline(&self) -> Duration {
        self.deadline
            .clamp(Duration::from_millis(1), MAX_FETCH_DEADLINE)
    }
}

/// Something the flight must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchAction {
    /// Call the fetcher for candidate `candidate` (an index into the
    /// candidates the plan was made for).
    Start {
        /// Index of the candidate.
        candidate: usize,
        /// Whether the hedge started it (nothing had answered in time).
        hedged: bool,
    },
    /// Call [`FetchPlan::on_wake`] at this time (replaces any earlier wake).
    WakeAt(Instant),
    /// Candidate `i` did not answer by the deadline: it failed with
    /// [`FetchError::Timeout`]; drop its call.
    TimedOut(usize),
    /// The fetch is over and candidate `candidate` is still pending: drop
    /// its call. `slow` when it had been pending for at least the hedge
    /// delay (another candidate overtook it).
    Abandoned {
        /// Index of the candidate.
        candidate: usize,
        /// Pending for at least the hedge delay.
        slow: bool,
    },
    /// The fetch is over: candidate `i` answered.
    Resolved(usize),
    /// The fetch is over: no candidate answered; report this error.
    Failed(FetchError),
}

/// The candidate policy of one flight.
#[derive(Clone, Debug)]
pub struct FetchPlan {
    /// Candidates in the order to try them, cut to the budget.
    order: Vec<usize>,
    /// Position in `order` of the next candidate to start.
    next: usize,
    /// Started candidates without an answer, with their start times.
    pending: Vec<(usize, Instant)>,
    /// How many may be pending at once: 1 until the hedge, then the budget.
    parallel: usize,
    hedge_delay: Duration,
    hedge_at: Option<Instant>,
    deadline: Instant,
    /// The error to report if nothing answers: the latest transient one, or
    /// the latest one when none was transient.
    error: Option<FetchError>,
    done: bool,
}

impl FetchPlan {
    /// Plans a flight at `now` over candidates tried in `order` (indices,
    /// duplicates ignored), as a retry or a fresh fetch, and returns the
    /// first actions.
    pub fn start(
        policy: &FetchPolicy,
        order: Vec<usize>,
        retry: bool,
        now: Instant,
    ) -> (Self, Vec<FetchAction>) {
        let mut seen = std::collections::HashSet::new();
        let mut order: Vec<usize> = order.into_iter().filter(|i| seen.insert(*i)).collect();
        order.truncate(policy.budget(retry));
        // A deadline past the clock's range is cut to the longest one that fits.
        let deadline = now
            .checked_add(policy.deadline())
            .or_else(|| now.checked_add(Duration::from_secs(1)))
            .unwrap_or(now);
        let mut plan = Self {
            order,
            next: 0,
            pending: Vec::new(),
            parallel: 1,
            hedge_delay: policy.hedge_delay,
            hedge_at: now
                .checked_add(policy.hedge_delay)
                .filter(|h| *h < deadline),
            deadline,
            error: None,
            done: false,
        };
        let mut actions = Vec::new();
        if plan.order.is_empty() {
            plan.done = true;
            actions.push(FetchAction::Failed(FetchError::NoCandidates));
            return (plan, actions);
        }
        plan.fill(false, now, &mut actions);
        actions.push(FetchAction::WakeAt(plan.wake()));
        (plan, actions)
    }

    /// Candidate `candidate` answered with the right metadata at `now`.
    pub fn on_success(&mut self, candidate: usize, now: Instant) -> Vec<FetchAction> {
        if self.done || !self.take_pending(candidate) {
            return Vec::new();
        }
        self.done = true;
        let mut actions = self.abandon_pending(now);
        actions.push(FetchAction::Resolved(candidate));
        actions
    }

    /// Candidate `candidate` failed with `err` at `now`: the next one starts
    /// at once, or the fetch is over when none is left.
    pub fn on_failure(
        &mut self,
        candidate: usize,
        err: FetchError,
        now: Instant,
    ) -> Vec<FetchAction> {
        if self.done || !self.take_pending(candidate) {
            return Vec::new();
        }
        self.note(err);
        if now >= self.deadline {
            return self.expire();
        }
        let mut actions = Vec::new();
        self.fill(false, now, &mut actions);
        if self.pending.is_empty() {
            self.done = true;
            actions.push(FetchAction::Failed(self.error()));
        }
        actions
    }

    /// The wake asked for fired at `now`: hedge, or end at the deadline.
    pub fn on_wake(&mut self, now: Instant) -> Vec<FetchAction> {
        if self.done {
            return Vec::new();
        }
        if now >= self.deadline {
            return self.expire();
        }
        let mut actions = Vec::new();
        if self.hedge_at.is_some_and(|h| now >= h) {
            self.hedge_at = None;
            self.parallel = self.order.len();
            self.fill(true, now, &mut actions);
        }
        actions.push(FetchAction::WakeAt(self.wake()));
        actions
    }

    /// Whether the fetch is over.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Candidates started and not answered.
    pub fn pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.pending.iter().map(|(i, _)| *i)
    }

    /// When the whole fetch ends at the latest.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How many candidates the plan may try at most.
    pub fn budget(&self) -> usize {
        self.order.len()
    }

    fn wake(&self) -> Instant {
        match self.hedge_at {
            Some(h) if self.next < self.order.len() => h,
            _ => self.deadline,
        }
    }

    fn fill(&mut self, hedged: bool, now: Instant, actions: &mut Vec<FetchAction>) {
        while self.pending.len() < self.parallel.max(1) {
            let Some(&candidate) = self.order.get(self.next) else {
                break;
            };
            self.next += 1;
            self.pending.push((candidate, now));
            actions.push(FetchAction::Start { candidate, hedged });
        }
    }

    fn take_pending(&mut self, candidate: usize) -> bool {
        let before = self.pending.len();
        self.pending.retain(|(i, _)| *i != candidate);
        self.pending.len() != before
    }

    fn abandon_pending(&mut self, now: Instant) -> Vec<FetchAction> {
        let hedge = self.hedge_delay;
        self.pending
            .drain(..)
            .map(|(candidate, at)| FetchAction::Abandoned {
                candidate,
                slow: now.saturating_duration_since(at) >= hedge,
            })
            .collect()
    }

    fn expire(&mut self) -> Vec<FetchAction> {
        self.done = true;
        let mut actions: Vec<FetchAction> = self
            .pending
            .drain(..)
            .map(|(i, _)| FetchAction::TimedOut(i))
            .collect();
        if !actions.is_empty() {
            self.note(FetchError::Timeout);
        }
        actions.push(FetchAction::Failed(self.error()));
        actions
    }

    fn note(&mut self, err: FetchError) {
        let keep_old = err.class() != ErrorClass::Transient
            && self
                .error
                .as_ref()
                .is_some_and(|e| e.class() == ErrorClass::Transient);
        if !keep_old {
            self.error = Some(err);
        }
    }

    fn error(&self) -> FetchError {
        self.error.clone().unwrap_or(FetchError::Timeout)
    }
}

/// Calls `fetcher` for `revision` on `instance` with every panic contained:
/// a panic while making the future or while polling it becomes
/// [`FetchError::Panicked`] with the panic's message.
pub fn fetch_contained(
    fetcher: &dyn MetadataFetcher,
    instance: &ServiceInstance,
    revision: &str,
) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
    crate::contain::contain_call(|| fetcher.fetch(instance, revision), FetchError::Panicked)
}
