//! Sans-IO metadata resolver of one provider app. It keeps the latest
//! registry snapshot and one resolution state per revision, and returns
//! [`ResolverAction`]s (start or abandon a fetch, arm or cancel a retry
//! timer) for its actor shell to perform. Time and randomness are inputs.
//!
//! Each unresolved revision keeps its retry schedule in a [`Recover`] (the
//! engine's one retry primitive, see `schedule.rs`). A revision that leaves
//! the snapshot parks its schedule in a [`RecoverMemory`] for twice the
//! backoff cap: coming back within that window it resumes where it was (no
//! fetch before its due time), so a flapping instance does not reset its
//! backoff. A revision seen for the first time starts at the initial delay.
//!
//! Invariants, each checked by the unit tests:
//! - at most one fetch or one timer per revision, never both;
//! - no fetch of a revision before its schedule says it is due;
//! - nothing is fetched or armed while no subscriber is attached or after close;
//! - a result or timer whose token is not the revision's current one is dropped;
//! - a revision that left the snapshot has no fetch and no timer.

mod delivery;
mod last_good;
mod publish;
mod schedule;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use rustc_hash::FxHashMap;

use crate::backoff::BackoffPolicy;
use crate::error::FetchError;
use crate::model::{MetadataInfo, ServiceInstance};
use crate::recover::{Recover, RecoverMemory, RecoverPolicy};
use crate::update::{DirectoryUpdate, HeldInstances};
use schedule::Parked;

/// Marks an instance without a revision in the per-instance index.
const NO_REVISION: u32 = u32::MAX;

/// Identifies one fetch or one timer; results carrying an old token are dropped.
pub type Token = u64;

/// Something the actor shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum ResolverAction {
    /// Fetch `revision`, trying `candidates` in order; report with `token`.
    Fetch {
        /// Revision to fetch.
        revision: String,
        /// Instances advertising it, in the order to try.
        candidates: Vec<ServiceInstance>,
        /// Token to report the result with.
        token: Token,
    },
    /// The fetch with `token` is no longer wanted.
    AbandonFetch {
        /// Revision of the fetch.
        revision: String,
        /// Its token.
        token: Token,
    },
    /// Call [`ResolverMachine::on_retry_due`] with `token` after `delay`.
    ArmTimer {
        /// Revision to retry.
        revision: String,
        /// Timer token.
        token: Token,
        /// Delay from now.
        delay: Duration,
    },
    /// The timer with `token` must not fire.
    CancelTimer {
        /// Its token.
        token: Token,
    },
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Fetching(Token),
    /// A retry timer is armed; it is due when the schedule says
    /// ([`Recover::due`]).
    Waiting(Token),
    Idle,
    /// The configured attempt limit was reached; nothing more is tried
    /// until the revision leaves the snapshot and comes back.
    GaveUp,
}

#[derive(Clone, Debug)]
enum RevisionState {
    Resolved,
    Unresolved {
        since: Instant,
        /// Failed attempts: always `recover.failures()`, kept as a plain
        /// field for the update builder.
        attempts: u32,
        last_error: Option<FetchError>,
        phase: Phase,
        /// The revision's retry schedule.
        recover: Recover,
    },
}

/// Resolution state machine of one provider app.
pub struct ResolverMachine {
    app: String,
    policy: RecoverPolicy,
    /// Schedules of unresolved revisions that left the snapshot.
    memory: RecoverMemory<String>,
    /// What the status said about them, parked alongside.
    parked: FxHashMap<String, Parked>,
    rng: StdRng,
    generation: u64,
    instances: Option<Arc<Vec<ServiceInstance>>>,
    revisions: BTreeMap<String, RevisionState>,
    metadata: HashMap<String, Arc<MetadataInfo>>,
    /// Instances whose current revision is unresolved, mapped to the
    /// resolved revision they served before (kept while they stay).
    last_good: FxHashMap<String, String>,
    /// Per instance of the snapshot, the index of its revision in
    /// `rev_names` (or [`NO_REVISION`]).
    rev_index: Vec<u32>,
    /// The distinct revisions of the snapshot.
    rev_names: Vec<String>,
    subscribers: BTreeMap<String, usize>,
    next_token: Token,
    closed: bool,
    dirty: bool,
    stale_since: Option<Instant>,
    /// The time of the latest input that carried one.
    clock: Option<Instant>,
    held: Option<HeldInstances>,
}

impl ResolverMachine {
    /// A resolver for `app` using `backoff`, with its RNG seeded by `seed`.
    pub fn new(app: impl Into<String>, backoff: BackoffPolicy, seed: u64) -> Self {
        let policy = RecoverPolicy::new(backoff);
        Self {
            app: app.into(),
            memory: RecoverMemory::new(policy.memory_window()),
            parked: FxHashMap::default(),
            policy,
            rng: StdRng::seed_from_u64(seed),
            generation: 0,
            instances: None,
            revisions: BTreeMap::new(),
            metadata: HashMap::new(),
            last_good: FxHashMap::default(),
            rev_index: Vec::new(),
            rev_names: Vec::new(),
            subscribers: BTreeMap::new(),
            next_token: 1,
            closed: false,
            dirty: false,
            stale_since: None,
            clock: None,
            held: None,
        }
    }

    /// Limits the fetch attempts per revision (default: unlimited, the
    /// self-healing choice). A revision that used them all stays unresolved,
    /// and says so, until it leaves the snapshot.
    pub fn with_max_attempts(mut self, max_attempts: Option<u32>) -> Self {
        self.policy = self.policy.with_max_attempts(max_attempts);
        self
    }

    /// The provider app.
    pub fn app(&self) -> &str {
        &self.app
    }

    /// Whether fetches and timers may run: open and at least one subscriber.
    pub fn is_active(&self) -> bool {
        !self.closed && !self.subscribers.is_empty()
    }

    /// Whether the machine was closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Subscribe keys with at least one subscriber.
    pub fn subscriber_keys(&self) -> impl Iterator<Item = &str> {
        self.subscribers.keys().map(String::as_str)
    }

    /// Generation of the latest snapshot.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of revisions waiting for a retry timer.
    pub fn pending_timers(&self) -> usize {
        self.count_phase(|p| matches!(p, Phase::Waiting { .. }))
    }

    /// Number of revisions with a fetch under way.
    pub fn pending_fetches(&self) -> usize {
        self.count_phase(|p| matches!(p, Phase::Fetching(_)))
    }

    fn count_phase(&self, f: impl Fn(&Phase) -> bool) -> usize {
        self.revisions
            .values()
            .filter(|s| matches!(s, RevisionState::Unresolved { phase, .. } if f(phase)))
            .count()
    }

    fn token(&mut self) -> Token {
        let t = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        t
    }

    /// Applies a full registry snapshot. Revisions that left it lose their
    /// fetch and timer; new ones start resolving when active. A snapshot equal
    /// to the current one changes nothing. Staleness and hold are left as
    /// they are (see [`ResolverMachine::on_delivery`]).
    pub fn on_snapshot(
        &mut self,
        generation: u64,
        instances: Arc<Vec<ServiceInstance>>,
        now: Instant,
    ) -> Vec<ResolverAction> {
        self.tick(now);
        if self.closed || (self.instances.is_some() && generation < self.generation) {
            // Closed, or an older snapshot overtaken by a newer one.
            return Vec::new();
        }
        let mut actions = Vec::new();
        // One pass over the instances: each one's revision as an index into
        // a small table, reused when publishing.
        let mut table: FxHashMap<&str, u32> = FxHashMap::default();
        let mut rev_index = Vec::with_capacity(instances.len());
        for i in instances.iter() {
            rev_index.push(match i.revision() {
                Some(r) => {
                    let next = table.len() as u32;
                    *table.entry(r).or_insert(next)
                }
                None => NO_REVISION,
            });
        }
        let mut rev_names = vec![String::new(); table.len()];
        for (r, k) in &table {
            rev_names[*k as usize] = r.to_string();
        }
        let gone: Vec<String> = self
            .revisions
            .keys()
            .filter(|r| !table.contains_key(r.as_str()))
            .cloned()
            .collect();
        for rev in gone {
            if let Some(state) = self.revisions.remove(&rev) {
                Self::stop_phase(&rev, &state, &mut actions);
                self.park(rev, state, now);
            }
        }
        let mut new: Vec<&String> = rev_names
            .iter()
            .filter(|r| !self.revisions.contains_key(r.as_str()))
            .collect();
        new.sort_unstable();
        for rev in new {
            let state = if self.metadata.contains_key(rev.as_str()) {
                RevisionState::Resolved
            } else {
                self.entering(rev, now)
            };
            self.revisions.insert(rev.clone(), state);
        }
        self.last_good = self.carry_last_good(&instances);
        self.generation = generation;
        self.rev_index = rev_index;
        self.rev_names = rev_names;
        self.instances = Some(instances);
        self.forget_unused_metadata();
        let unresolved: Vec<String> = self.revisions.keys().cloned().collect();
        for rev in unresolved {
            self.start_if_idle(&rev, now, &mut actions);
        }
        self.dirty = true;
        actions
    }

    /// Applies the result of the fetch with `token`. Results for revisions
    /// that left the snapshot, or with an old token, are dropped.
    pub fn on_fetch_result(
        &mut self,
        revision: &str,
        token: Token,
        result: Result<Arc<MetadataInfo>, FetchError>,
        now: Instant,
    ) -> Vec<ResolverAction> {
        self.tick(now);
        match self.revisions.get(revision) {
            Some(RevisionState::Unresolved { phase, .. }) if *phase == Phase::Fetching(token) => {}
            _ => return Vec::new(),
        }
        self.dirty = true;
        match result {
            Ok(info) => {
                self.metadata.insert(revision.to_string(), info);
                self.revisions
                    .insert(revision.to_string(), RevisionState::Resolved);
                Vec::new()
            }
            Err(err) => self.on_failure(revision, err, now).into_iter().collect(),
        }
    }

    /// The retry timer with `token` fired: fetch again if it is still
    /// current (the timer was armed for the schedule's due time).
    pub fn on_retry_due(&mut self, revision: &str, token: Token) -> Vec<ResolverAction> {
        match self.revisions.get_mut(revision) {
            Some(RevisionState::Unresolved { phase, .. }) if *phase == Phase::Waiting(token) => {
                *phase = Phase::Idle;
            }
            _ => return Vec::new(),
        }
        let mut actions = Vec::new();
        self.fetch(revision, &mut actions);
        actions
    }

    /// A subscriber for `key` attached at `now`. The first one resumes
    /// resolution: revisions that are due are fetched, the others wait for
    /// the rest of their delay.
    pub fn subscribe_at(&mut self, key: &str, now: Instant) -> Vec<ResolverAction> {
        self.tick(now);
        self.attach(key, Some(now))
    }

    /// Like [`ResolverMachine::subscribe_at`] at the time of the machine's
    /// latest input (no revision is fetched before it is due; one that is
    /// due by now may wait until then). Shells should prefer `subscribe_at`.
    pub fn subscribe(&mut self, key: &str) -> Vec<ResolverAction> {
        self.attach(key, self.clock)
    }

    fn attach(&mut self, key: &str, now: Option<Instant>) -> Vec<ResolverAction> {
        if self.closed {
            return Vec::new();
        }
        *self.subscribers.entry(key.to_string()).or_default() += 1;
        self.dirty = true;
        let mut actions = Vec::new();
        // Without any input yet there is no revision to start.
        let Some(now) = now else {
            return actions;
        };
        let revs: Vec<String> = self.revisions.keys().cloned().collect();
        for rev in revs {
            self.start_if_idle(&rev, now, &mut actions);
        }
        actions
    }

    /// Records the time of an input (time only moves forward).
    fn tick(&mut self, now: Instant) {
        self.clock = Some(self.clock.map_or(now, |c| c.max(now)));
    }

    /// A subscriber for `key` detached. When the last one leaves, every fetch
    /// and timer stops; the revisions stay unresolved until one attaches.
    pub fn unsubscribe(&mut self, key: &str) -> Vec<ResolverAction> {
        if let Some(n) = self.subscribers.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.subscribers.remove(key);
            }
        }
        if self.is_active() {
            return Vec::new();
        }
        self.pause_all()
    }

    /// Closes the resolver: every fetch and timer stops, for good.
    pub fn close(&mut self) -> Vec<ResolverAction> {
        self.closed = true;
        self.subscribers.clear();
        self.pause_all()
    }

    /// The actor restarted: its old fetches and timers are gone without a
    /// trace. Re-issue them: timers for their remaining delay, fetches now.
    pub fn on_restart(&mut self, now: Instant) -> Vec<ResolverAction> {
        self.tick(now);
        let mut actions = Vec::new();
        let revs: Vec<String> = self.revisions.keys().cloned().collect();
        for rev in revs {
            let active = self.is_active();
            let token = self.token();
            let mut superseded = None;
            if let Some(RevisionState::Unresolved { phase, recover, .. }) =
                self.revisions.get_mut(&rev)
            {
                match phase.clone() {
                    Phase::Waiting(_) if active => {
                        *phase = Phase::Waiting(token);
                        actions.push(ResolverAction::ArmTimer {
                            revision: rev.clone(),
                            token,
                            delay: recover.wait(now),
                        });
                    }
                    Phase::Fetching(old) => {
                        superseded = Some(old);
                        *phase = Phase::Idle;
                    }
                    Phase::GaveUp => {}
                    _ => *phase = Phase::Idle,
                }
            }
            self.start_if_idle(&rev, now, &mut actions);
            if let Some(old) = superseded {
                // The fetch may still run elsewhere (the cache): join it with
                // the new token first, then let go of the old one, so it is
                // neither cancelled now nor kept alive by a dead waiter.
                actions.push(ResolverAction::AbandonFetch {
                    revision: rev.clone(),
                    token: old,
                });
            }
        }
        self.dirty = true;
        actions
    }

    fn pause_all(&mut self) -> Vec<ResolverAction> {
        let mut actions = Vec::new();
        for (rev, state) in self.revisions.iter_mut() {
            if let RevisionState::Unresolved { phase, .. } = state {
                if *phase == Phase::GaveUp {
                    continue;
                }
                let old = std::mem::replace(phase, Phase::Idle);
                Self::stop(rev, old, &mut actions);
            }
        }
        actions
    }

    fn stop_phase(rev: &str, state: &RevisionState, actions: &mut Vec<ResolverAction>) {
        if let RevisionState::Unresolved { phase, .. } = state {
            Self::stop(rev, phase.clone(), actions);
        }
    }

    fn stop(rev: &str, phase: Phase, actions: &mut Vec<ResolverAction>) {
        match phase {
            Phase::Fetching(token) => actions.push(ResolverAction::AbandonFetch {
                revision: rev.to_string(),
                token,
            }),
            Phase::Waiting(token) => actions.push(ResolverAction::CancelTimer { token }),
            Phase::Idle | Phase::GaveUp => {}
        }
    }

    /// The updates for every subscribed key, when something changed since the
    /// last call. The actor calls this once per burst of inputs.
    pub fn take_updates(&mut self) -> Vec<DirectoryUpdate> {
        if !self.dirty || !self.is_active() {
            return Vec::new();
        }
        self.dirty = false;
        self.subscribers
            .keys()
            .map(|k| self.build_update(k))
            .collect()
    }

    /// The update for one subscribe key, built now.
    pub fn update_for(&self, key: &str) -> DirectoryUpdate {
        self.build_update(key)
    }
}
