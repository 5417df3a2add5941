//! [`MappingMachine`]: the sans-IO follower of one interface's
//! interface -> app mapping (Dubbo's service-name mapping), for references
//! that name no provider app.
//!
//! It decides when to open the mapping watch, what to do with each stream
//! item, and when to re-open after a failure or the stream's end, all on the
//! one retry primitive ([`Recover`] with the registry [`RecoverPolicy`]);
//! and it turns each whole app set into add / remove actions (a diff against
//! the set held). Time (`now`) and randomness (a seeded generator) are
//! inputs; the actor shell performs the actions.
//!
//! Rules:
//! - a failed open is retried on the policy (a final error, e.g. a backend
//!   without mappings, gives up and says so); a success resets the schedule;
//! - an `Err` item marks the mapping unhealthy but the stream is kept (it
//!   may heal; its next `Ok` item clears the mark);
//! - the stream's end re-opens the watch after the policy's delay (counted
//!   as a failure, so a stream that keeps ending cannot loop hot);
//! - apps known stay known through every failure: only an `Ok` item that no
//!   longer lists an app removes it;
//! - while no app is known, [`MappingMachine::pending`] names the failing
//!   read with its last error ([`Pending::mapping`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::backend::MappingEvent;
use crate::error::RegistryError;
use crate::event::Version;
use crate::pending::{Pending, RegistryFailure};
use crate::recover::{Recover, RecoverPolicy, Retry};

/// Identifies one watch (its open and its items) or one timer; stale ones
/// are ignored.
pub type MappingToken = u64;

/// What the actor shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingAction {
    /// Open the mapping watch (under a deadline); report the outcome with
    /// `token`, then feed its items and its end with the same token.
    OpenWatch {
        /// Token of the watch.
        token: MappingToken,
    },
    /// Call [`MappingMachine::on_timer`] with `token` after `delay`.
    ArmTimer {
        /// Token of the timer.
        token: MappingToken,
        /// Delay from now.
        delay: Duration,
    },
    /// Drop the watch stream with `token` (a newer one replaces it, or the
    /// machine closed).
    DropWatch {
        /// Its token.
        token: MappingToken,
    },
    /// An app now serves the interface: attach to it.
    AddApp(String),
    /// An app no longer serves the interface: detach from it.
    RemoveApp(String),
    /// What the directory must say about the mapping changed (see
    /// [`MappingMachine::pending`]).
    StatusChanged,
}

/// Where the watch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not started, or closed.
    Idle,
    /// An open is on the wire.
    Opening(MappingToken),
    /// A stream is attached.
    Watching(MappingToken),
    /// Waiting for the retry timer.
    Waiting(MappingToken),
    /// A final error: nothing more is tried.
    GaveUp,
}

/// The follower of one interface's mapping.
#[derive(Debug)]
pub struct MappingMachine {
    policy: RecoverPolicy,
    recover: Recover,
    rng: StdRng,
    phase: Phase,
    next_token: MappingToken,
    /// Apps mapped to the interface, as last read.
    apps: BTreeSet<String>,
    /// Whether an `Ok` item was ever read (an empty set is then the truth).
    answered: bool,
    /// Version of the last item of the current stream.
    version: Option<Version>,
    /// The current run of failures (open failures, ends, `Err` items).
    failure: Option<RegistryFailure>,
    closed: bool,
}

impl MappingMachine {
    /// A follower retrying on `policy`, its jitter seeded by `seed`.
    pub fn new(policy: RecoverPolicy, seed: u64) -> Self {
        Self {
            policy,
            recover: Recover::new(),
            rng: StdRng::seed_from_u64(seed),
            phase: Phase::Idle,
            next_token: 1,
            apps: BTreeSet::new(),
            answered: false,
            version: None,
            failure: None,
            closed: false,
        }
    }

    fn token(&mut self) -> MappingToken {
        let t = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        t
    }

    fn open(&mut self) -> Vec<MappingAction> {
        let token = self.token();
        self.phase = Phase::Opening(token);
        self.version = None;
        vec![MappingAction::OpenWatch { token }]
    }

    /// This (new) machine replaces one whose actor panicked (restart
    /// clean): it starts from its inputs and knows only what the old one
    /// had told the engine, the `apps` it reported and whether the mapping
    /// had `answered`, so its first read reports exactly the difference.
    pub fn resuming(mut self, apps: impl IntoIterator<Item = String>, answered: bool) -> Self {
        self.apps = apps.into_iter().collect();
        self.answered = answered;
        self
    }

    /// The actor started: opens the watch.
    pub fn start(&mut self) -> Vec<MappingAction> {
        if self.closed || self.phase == Phase::GaveUp {
            return Vec::new();
        }
        self.open()
    }

    fn current(&self, token: MappingToken) -> bool {
        matches!(self.phase, Phase::Opening(t) | Phase::Watching(t) if t == token)
    }

    /// Records a failure of the mapping read and schedules the next open.
    fn fail(&mut self, error: RegistryError, now: Instant, reopen: bool) -> Vec<MappingAction> {
        let attempts = self.failure.as_ref().map_or(0, |f| f.attempts);
        self.failure = Some(RegistryFailure {
            since: self.failure.as_ref().map_or(now, |f| f.since),
            attempts: attempts.saturating_add(1),
            last_error: error.clone(),
        });
        let mut actions = vec![MappingAction::StatusChanged];
        if !reopen {
            return actions;
        }
        match self
            .recover
            .on_failure(&self.policy, error.class(), now, &mut self.rng)
        {
            Retry::After(delay) => {
                let token = self.token();
                self.phase = Phase::Waiting(token);
                actions.push(MappingAction::ArmTimer { token, delay });
            }
            Retry::GiveUp => self.phase = Phase::GaveUp,
        }
        actions
    }

    /// The open with `token` succeeded: the stream is attached.
    pub fn on_opened(&mut self, token: MappingToken) -> Vec<MappingAction> {
        if self.closed || self.phase != Phase::Opening(token) {
            return vec![MappingAction::DropWatch { token }];
        }
        self.phase = Phase::Watching(token);
        Vec::new()
    }

    /// The open with `token` failed with `error` at `now`.
    pub fn on_open_failed(
        &mut self,
        token: MappingToken,
        error: RegistryError,
        now: Instant,
    ) -> Vec<MappingAction> {
        if self.closed || self.phase != Phase::Opening(token) {
            return Vec::new();
        }
        self.fail(error, now, true)
    }

    /// The stream with `token` yielded `item` at `now`.
    pub fn on_item(
        &mut self,
        token: MappingToken,
        item: Result<MappingEvent, RegistryError>,
        now: Instant,
    ) -> Vec<MappingAction> {
        if self.closed || self.phase != Phase::Watching(token) {
            return Vec::new();
        }
        let event = match item {
            Ok(event) => event,
            // Unhealthy for now; the stream is kept.
            Err(e) => return self.fail(e, now, false),
        };
        if self.version.is_some_and(|v| event.version < v) {
            return Vec::new();
        }
        self.version = Some(event.version);
        self.recover.on_success();
        let mut actions = Vec::new();
        let was_failing = self.failure.take().is_some();
        let first = !std::mem::replace(&mut self.answered, true);
        let next: BTreeSet<String> = event.apps.into_iter().collect();
        for gone in self.apps.difference(&next) {
            actions.push(MappingAction::RemoveApp(gone.clone()));
        }
        for new in next.difference(&self.apps) {
            actions.push(MappingAction::AddApp(new.clone()));
        }
        self.apps = next;
        if was_failing || first {
            actions.push(MappingAction::StatusChanged);
        }
        actions
    }

    /// The stream with `token` ended at `now`: re-open after the policy's
    /// delay.
    pub fn on_end(&mut self, token: MappingToken, now: Instant) -> Vec<MappingAction> {
        if self.closed || self.phase != Phase::Watching(token) {
            return Vec::new();
        }
        self.fail(
            RegistryError::WatchEnded("interface mapping watch ended".into()),
            now,
            true,
        )
    }

    /// The retry timer with `token` fired.
    pub fn on_timer(&mut self, token: MappingToken) -> Vec<MappingAction> {
        if self.closed || self.phase != Phase::Waiting(token) {
            return Vec::new();
        }
        self.open()
    }

    /// Stops for good: the current stream must be dropped, every app
    /// detached.
    pub fn close(&mut self) -> Vec<MappingAction> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        let mut actions = Vec::new();
        if let Phase::Opening(token) | Phase::Watching(token) = self.phase {
            actions.push(MappingAction::DropWatch { token });
        }
        self.phase = Phase::Idle;
        actions.extend(
            std::mem::take(&mut self.apps)
                .into_iter()
                .map(MappingAction::RemoveApp),
        );
        actions
    }

    /// The apps mapped now, sorted.
    pub fn apps(&self) -> impl Iterator<Item = &str> {
        self.apps.iter().map(String::as_str)
    }

    /// Whether an app set was ever read.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// The current run of failures of the mapping read, if any.
    pub fn failure(&self) -> Option<&RegistryFailure> {
        self.failure.as_ref()
    }

    /// Whether a final error stopped the retries.
    pub fn gave_up(&self) -> bool {
        self.phase == Phase::GaveUp
    }

    /// When the current watch is still `token`'s (items of older streams
    /// are dropped by the machine anyway).
    pub fn is_current(&self, token: MappingToken) -> bool {
        self.current(token)
    }

    /// What the directory must say while no app is known: `Some` until the
    /// mapping has been read, and while its read fails (naming the failing
    /// read with its last error, also while apps are known: the directory
    /// keeps serving them and says the mapping is failing); `None` when the
    /// mapping is healthy (apps known, or a truthful "no app").
    pub fn pending(&self) -> Option<Pending> {
        let healthy = self.failure.is_none() && (self.answered || !self.apps.is_empty());
        if healthy {
            return None;
        }
        Some(Pending {
            subscribe: None,
            mapping: self.failure.clone(),
        })
    }
}

#[cfg(test)]
mod tests;
