//! Sans-IO metadata resolver of one provider app. It keeps the app's
//! instances (applied incrementally from the registry's deliveries, see
//! `table.rs`) and one resolution state per revision, and returns
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
//! Incremental: a delta of k instances costs O(k) here and O(k) in the
//! updates it produces (a [`UrlChange`](crate::update::UrlChange) Delta); a Reset, a revision that
//! resolves, a change of more than [`delta_budget`](crate::change::delta_budget) of a key's URLs, or a
//! subscriber that needs everything costs one pass over the app (a
//! [`UrlChange`](crate::update::UrlChange) Reset, in the order of the app's instances).
//!
//! Versions (the data path's one protocol, `crate::change`): the machine
//! holds the version of the last delivery it applied and takes each one
//! through [`Change::fit`](crate::change::Change::fit); a delivery that does
//! not follow asks the registry side for the whole state
//! ([`ResolverAction::RequestReset`], one per gap, at most one per second).
//! Each update carries the version of the delivery it was built from, or the
//! next step of the machine's previous update (a fetch result, a status
//! change), and applies on the key's previous update.
//!
//! Invariants, each checked by the unit tests:
//! - at most one fetch or one timer per revision, never both;
//! - no fetch of a revision before its schedule says it is due;
//! - nothing is fetched or armed while no subscriber is attached or after close;
//! - a result or timer whose token is not the revision's current one is dropped;
//! - a revision that left the snapshot has no fetch and no timer.

mod delivery;
mod feed;
mod inspect;
mod publish;
mod resume;
mod schedule;
mod seed;
mod table;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use rustc_hash::FxHashMap;

use crate::backoff::BackoffPolicy;
use crate::change::{Change, ResetAsk, Version};
use crate::error::FetchError;
use crate::instance::RevisionInterner;
use crate::model::{MetadataInfo, ServiceInstance};
use crate::recover::{Recover, RecoverMemory, RecoverPolicy};
use crate::update::{DirectoryUpdate, HeldInstances};
use publish::KeyState;
pub use resume::{AttachUpdates, ResumePoint};
use schedule::Parked;
use table::Table;

pub use inspect::{AppInspection, InstanceInspection, RevisionInspection, RevisionPhase};

/// Identifies one fetch or one timer; results carrying an old token are dropped.
pub type Token = u64;

/// Something the actor shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum ResolverAction {
    /// Fetch `revision`, trying `candidates` in order; report with `token`.
    /// With no result after `deadline` (the request or its answer was lost),
    /// call [`ResolverMachine::on_fetch_deadline`] with `token`; the wait
    /// ends with the fetch's result or its [`ResolverAction::AbandonFetch`].
    Fetch {
        /// Revision to fetch.
        revision: String,
        /// Instances advertising it, in the order to try.
        candidates: Vec<ServiceInstance>,
        /// Token to report the result with.
        token: Token,
        /// Longest wait for its result.
        deadline: Duration,
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
    /// A delivery arrived on top of a state the machine does not hold (a
    /// delivery was lost): ask the registry side for the whole state (asked
    /// once per gap, at most once per [`crate::change::RESET_ASK_INTERVAL`]).
    RequestReset,
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
    /// Version of the latest delivery applied.
    version: Version,
    /// Version of the latest update handed out (every key's next update
    /// comes after it).
    out: Option<Version>,
    /// Whether a first delivery arrived.
    has_state: bool,
    /// The app's instances.
    table: Table,
    revisions: BTreeMap<String, RevisionState>,
    metadata: HashMap<String, Arc<MetadataInfo>>,
    subscribers: BTreeMap<String, usize>,
    /// What each subscribed key was last sent.
    keys: BTreeMap<String, KeyState>,
    /// Interns revisions of owned snapshots given to
    /// [`ResolverMachine::on_snapshot`].
    interner: RevisionInterner,
    next_token: Token,
    closed: bool,
    dirty: bool,
    stale_since: Option<Instant>,
    /// The time of the latest input that carried one.
    clock: Option<Instant>,
    held: Option<HeldInstances>,
    /// Resets asked of the registry side after deliveries that did not
    /// follow (one per gap).
    ask: ResetAsk,
    /// Set while the state is a disk snapshot's (see `seed.rs`).
    seeded: Option<seed::Seeded>,
    /// While the registry subscription keeps failing (reported as
    /// `Pending { subscribe }` until the first state arrives).
    subscribe_failure: Option<crate::pending::RegistryFailure>,
    /// Longest wait for a fetch's result before it counts as a timeout.
    fetch_deadline: Duration,
    /// Set while a replacement machine resyncs (`resume.rs`).
    resyncing: bool,
}

/// Default of [`ResolverMachine::with_fetch_deadline`]: above the default
/// 5 s whole-fetch deadline of the metadata cache.
pub const DEFAULT_FETCH_DEADLINE: Duration = Duration::from_secs(15);

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
            version: Version::default(),
            out: None,
            has_state: false,
            table: Table::default(),
            revisions: BTreeMap::new(),
            metadata: HashMap::new(),
            subscribers: BTreeMap::new(),
            keys: BTreeMap::new(),
            interner: RevisionInterner::default(),
            next_token: 1,
            closed: false,
            dirty: false,
            stale_since: None,
            clock: None,
            held: None,
            ask: ResetAsk::default(),
            seeded: None,
            subscribe_failure: None,
            fetch_deadline: DEFAULT_FETCH_DEADLINE,
            resyncing: false,
        }
    }

    /// Counts a fetch as timed out when no result came within `deadline`.
    /// The cache answers every fetch within its own deadline; this bounds
    /// the wait when the request or its answer was lost (a cache that
    /// stopped, a panic contained before the request was recorded). Set it
    /// above the cache's whole-fetch deadline.
    pub fn with_fetch_deadline(mut self, deadline: Duration) -> Self {
        self.fetch_deadline = deadline;
        self
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

    /// Number of instances held (the size of a key's Reset, at most).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no instance is held.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Whether fetches and timers may run: open and at least one subscriber.
    pub fn is_active(&self) -> bool {
        !self.closed && !self.subscribers.is_empty()
    }

    /// Whether the machine was closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Version of the latest delivery applied.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The Reset asks after deliveries that did not follow.
    pub fn reset_ask(&self) -> &ResetAsk {
        &self.ask
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

    /// Applies a full registry snapshot of owned records (decoded here):
    /// a Reset at `version`. Revisions that left it lose their fetch and
    /// timer; new ones start resolving when active. Staleness and hold are
    /// left as they are (see [`ResolverMachine::on_delivery`]).
    pub fn on_snapshot(
        &mut self,
        version: Version,
        instances: Arc<Vec<ServiceInstance>>,
        now: Instant,
    ) -> Vec<ResolverAction> {
        let items = instances
            .iter()
            .map(|i| Arc::new(crate::instance::Instance::decode(i, &mut self.interner)))
            .collect();
        self.interner.trim();
        self.on_feed(Change::Reset { version, items }, now)
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
                self.on_resolved();
                Vec::new()
            }
            Err(err) => self.on_failure(revision, err, now).into_iter().collect(),
        }
    }

    /// The deadline of the fetch with `token` passed with no result: the
    /// fetch counts as a timeout (nothing when it answered or was replaced).
    pub fn on_fetch_deadline(
        &mut self,
        revision: &str,
        token: Token,
        now: Instant,
    ) -> Vec<ResolverAction> {
        self.on_fetch_result(revision, token, Err(FetchError::Timeout), now)
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
        self.keys.entry(key.to_string()).or_default();
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
                self.keys.remove(key);
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
        self.keys.clear();
        self.pause_all()
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
    /// last call: only what changed (a [`UrlChange`](crate::update::UrlChange) Delta on the key's
    /// previous update) unless a key needs everything. The actor calls this
    /// once per burst of inputs.
    pub fn take_updates(&mut self) -> Vec<DirectoryUpdate> {
        if !self.dirty || !self.is_active() || self.still_resyncing() {
            return Vec::new();
        }
        self.dirty = false;
        let version = Version::after(self.out, self.version);
        self.out = Some(version);
        let mut keys = std::mem::take(&mut self.keys);
        let updates = keys
            .iter_mut()
            .map(|(key, state)| self.key_update(key, state, version))
            .collect();
        self.keys = keys;
        updates
    }

    /// The whole state for one subscribe key (for a directory that attaches,
    /// lost track, or fell too far behind), at the version the key was last
    /// sent: the key's next update applies on top of it, since updates carry
    /// whole URLs.
    pub fn update_for(&self, key: &str) -> DirectoryUpdate {
        let version = self
            .keys
            .get(key)
            .and_then(|k| k.sent)
            .or(self.out)
            .unwrap_or_default();
        let (items, closing) = self.full_list(key, &mut Default::default());
        let empty = items.is_empty();
        self.wrap(key, Change::Reset { version, items }, closing, empty)
    }
}
