//! Sans-IO metadata resolver of one provider app. It keeps the latest
//! registry snapshot and one resolution state per revision, and returns
//! [`ResolverAction`]s (start or abandon a fetch, arm or cancel a retry
//! timer) for its actor shell to perform. Time and randomness are inputs.
//!
//! Invariants, each checked by the unit tests:
//! - at most one fetch or one timer per revision, never both;
//! - nothing is fetched or armed while no subscriber is attached or after close;
//! - a result or timer whose token is not the revision's current one is dropped;
//! - a revision that left the snapshot has no fetch and no timer.

mod last_good;
mod publish;
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
use crate::update::{DirectoryUpdate, HeldInstances};

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
    Waiting {
        token: Token,
        due: Instant,
    },
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
        attempts: u32,
        last_error: Option<FetchError>,
        phase: Phase,
    },
}

/// Resolution state machine of one provider app.
pub struct ResolverMachine {
    app: String,
    backoff: BackoffPolicy,
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
    held: Option<HeldInstances>,
    max_attempts: Option<u32>,
}

impl ResolverMachine {
    /// A resolver for `app` using `backoff`, with its RNG seeded by `seed`.
    pub fn new(app: impl Into<String>, backoff: BackoffPolicy, seed: u64) -> Self {
        Self {
            app: app.into(),
            backoff,
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
            held: None,
            max_attempts: None,
        }
    }

    /// Limits the fetch attempts per revision (default: unlimited, the
    /// self-healing choice). A revision that used them all stays unresolved,
    /// and says so, until it leaves the snapshot.
    pub fn with_max_attempts(mut self, max_attempts: Option<u32>) -> Self {
        self.max_attempts = max_attempts.filter(|m| *m > 0);
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
        self.next_token += 1;
        t
    }

    /// Applies a full registry snapshot. Revisions that left it lose their
    /// fetch and timer; new ones start resolving when active. A snapshot equal
    /// to the current one changes nothing.
    pub fn on_snapshot(
        &mut self,
        generation: u64,
        instances: Arc<Vec<ServiceInstance>>,
        now: Instant,
    ) -> Vec<ResolverAction> {
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
                Self::stop_phase(&rev, state, &mut actions);
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
                RevisionState::Unresolved {
                    since: now,
                    attempts: 0,
                    last_error: None,
                    phase: Phase::Idle,
                }
            };
            self.revisions.insert(rev.clone(), state);
        }
        self.last_good = self.carry_last_good(&instances);
        self.generation = generation;
        self.stale_since = None;
        self.rev_index = rev_index;
        self.rev_names = rev_names;
        self.instances = Some(instances);
        self.forget_unused_metadata();
        let unresolved: Vec<String> = self.revisions.keys().cloned().collect();
        for rev in unresolved {
            self.start_if_idle(&rev, &mut actions);
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
        let Some(RevisionState::Unresolved {
            attempts,
            last_error,
            phase,
            ..
        }) = self.revisions.get_mut(revision)
        else {
            return Vec::new();
        };
        if *phase != Phase::Fetching(token) {
            return Vec::new();
        }
        self.dirty = true;
        match result {
            Ok(info) => {
                self.metadata.insert(revision.to_string(), info);
                self.revisions
                    .insert(revision.to_string(), RevisionState::Resolved);
                Vec::new()
            }
            Err(err) => {
                let n = *attempts;
                *attempts += 1;
                *last_error = Some(err.clone());
                if self.max_attempts.is_some_and(|max| *attempts >= max) {
                    *phase = Phase::GaveUp;
                    return Vec::new();
                }
                let delay = self.backoff.delay(n, err.class(), &mut self.rng);
                let token = self.next_token;
                self.next_token += 1;
                let RevisionState::Unresolved { phase, .. } =
                    self.revisions.get_mut(revision).expect("present above")
                else {
                    unreachable!("state checked above")
                };
                *phase = Phase::Waiting {
                    token,
                    due: now + delay,
                };
                vec![ResolverAction::ArmTimer {
                    revision: revision.to_string(),
                    token,
                    delay,
                }]
            }
        }
    }

    /// The retry timer with `token` fired: fetch again if it is still current.
    pub fn on_retry_due(&mut self, revision: &str, token: Token) -> Vec<ResolverAction> {
        match self.revisions.get_mut(revision) {
            Some(RevisionState::Unresolved { phase, .. }) if matches!(&*phase, Phase::Waiting { token: t, .. } if *t == token) =>
            {
                *phase = Phase::Idle;
            }
            _ => return Vec::new(),
        }
        let mut actions = Vec::new();
        self.start_if_idle(revision, &mut actions);
        actions
    }

    /// The registry watch went down (`Some(since)`) or came back (`None`).
    /// While down, updates say since when their URLs may be stale.
    pub fn set_registry_stale(&mut self, since: Option<Instant>) {
        if self.stale_since != since && !self.closed {
            self.stale_since = since;
            self.dirty = true;
        }
    }

    /// Instances held after a registry-caused mass expiry (`Some`) or none
    /// (`None`); the updates say so. The registry side decides and sends it
    /// with every snapshot.
    pub fn set_held(&mut self, held: Option<HeldInstances>) {
        if self.held != held && !self.closed {
            self.held = held;
            self.dirty = true;
        }
    }

    /// A subscriber for `key` attached. The first one resumes resolution.
    pub fn subscribe(&mut self, key: &str) -> Vec<ResolverAction> {
        if self.closed {
            return Vec::new();
        }
        *self.subscribers.entry(key.to_string()).or_default() += 1;
        self.dirty = true;
        let mut actions = Vec::new();
        let revs: Vec<String> = self.revisions.keys().cloned().collect();
        for rev in revs {
            self.start_if_idle(&rev, &mut actions);
        }
        actions
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
        let mut actions = Vec::new();
        let revs: Vec<String> = self.revisions.keys().cloned().collect();
        for rev in revs {
            let token = self.token();
            let active = self.is_active();
            let mut superseded = None;
            if let Some(RevisionState::Unresolved { phase, .. }) = self.revisions.get_mut(&rev) {
                match phase.clone() {
                    Phase::Waiting { due, .. } if active => {
                        *phase = Phase::Waiting { token, due };
                        actions.push(ResolverAction::ArmTimer {
                            revision: rev.clone(),
                            token,
                            delay: due.saturating_duration_since(now),
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
            self.start_if_idle(&rev, &mut actions);
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

    fn stop_phase(rev: &str, state: RevisionState, actions: &mut Vec<ResolverAction>) {
        if let RevisionState::Unresolved { phase, .. } = state {
            Self::stop(rev, phase, actions);
        }
    }

    fn stop(rev: &str, phase: Phase, actions: &mut Vec<ResolverAction>) {
        match phase {
            Phase::Fetching(token) => actions.push(ResolverAction::AbandonFetch {
                revision: rev.to_string(),
                token,
            }),
            Phase::Waiting { token, .. } => actions.push(ResolverAction::CancelTimer { token }),
            Phase::Idle | Phase::GaveUp => {}
        }
    }

    fn start_if_idle(&mut self, rev: &str, actions: &mut Vec<ResolverAction>) {
        if !self.is_active() {
            return;
        }
        let attempts = match self.revisions.get(rev) {
            Some(RevisionState::Unresolved {
                phase: Phase::Idle,
                attempts,
                ..
            }) => *attempts,
            _ => return,
        };
        let token = self.token();
        let candidates = self.candidates(rev, attempts as usize);
        if let Some(RevisionState::Unresolved { phase, .. }) = self.revisions.get_mut(rev) {
            *phase = Phase::Fetching(token);
        }
        actions.push(ResolverAction::Fetch {
            revision: rev.to_string(),
            candidates,
            token,
        });
    }

    /// Instances advertising `rev`: serving ones first, rotated by the
    /// attempt number so consecutive attempts start at different instances,
    /// then the non-serving ones as a last resort.
    fn candidates(&self, rev: &str, attempt: usize) -> Vec<ServiceInstance> {
        let Some(instances) = &self.instances else {
            return Vec::new();
        };
        let (mut serving, resting): (Vec<ServiceInstance>, Vec<ServiceInstance>) = instances
            .iter()
            .filter(|i| i.revision() == Some(rev))
            .cloned()
            .partition(ServiceInstance::is_serving);
        if !serving.is_empty() {
            let k = attempt % serving.len();
            serving.rotate_left(k);
        }
        serving.extend(resting);
        serving
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
