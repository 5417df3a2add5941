//! What the resolver can tell an operator about its app: every instance
//! with its revision, and every revision with its resolution state
//! (attempts, last error, when the next retry is due). Read-only; one pass
//! over the app's instances.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{Phase, ResolverMachine, RevisionState};

/// One instance of the app, as the resolver holds it (also the instance
/// rows of the engine's inspection report, as they are).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstanceInspection {
    /// Instance id.
    pub id: String,
    /// Host from the registry record.
    pub host: String,
    /// Port from the registry record.
    pub port: u16,
    /// The metadata revision it advertises.
    pub revision: Option<String>,
    /// Whether it may take traffic (healthy, not closing, weight above 0).
    pub serving: bool,
    /// Whether it announced closing.
    pub closing: bool,
}

/// Where the resolution of one revision stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RevisionPhase {
    /// Its metadata is known.
    Resolved,
    /// A fetch is under way.
    Fetching,
    /// A retry is due later.
    Waiting,
    /// Unresolved, nothing scheduled (no subscriber attached, or closed).
    Idle,
    /// The configured attempt limit was reached.
    GaveUp,
}

impl RevisionPhase {
    /// A short lower-case label (`resolved`, `fetching`, `waiting`, `idle`,
    /// `gave_up`).
    pub fn label(self) -> &'static str {
        match self {
            RevisionPhase::Resolved => "resolved",
            RevisionPhase::Fetching => "fetching",
            RevisionPhase::Waiting => "waiting",
            RevisionPhase::Idle => "idle",
            RevisionPhase::GaveUp => "gave_up",
        }
    }
}

/// One revision of the app and its resolution state.
#[derive(Clone, Debug, PartialEq)]
pub struct RevisionInspection {
    /// The revision.
    pub revision: String,
    /// Where its resolution stands.
    pub phase: RevisionPhase,
    /// Failed fetch attempts since it became unresolved.
    pub attempts: u32,
    /// The latest fetch error, rendered.
    pub last_error: Option<String>,
    /// How long until the next retry is due (while waiting).
    pub next_retry_in: Option<Duration>,
    /// How long it has been unresolved.
    pub unresolved_for: Option<Duration>,
    /// Instances advertising it.
    pub instances: usize,
}

/// The resolver's view of its app.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppInspection {
    /// Provider app.
    pub app: String,
    /// Its instances, by id.
    pub instances: Vec<InstanceInspection>,
    /// Its revisions, in order.
    pub revisions: Vec<RevisionInspection>,
    /// Version of the latest registry delivery applied.
    pub version: crate::change::Version,
    /// Resets asked of the registry side after deliveries that did not
    /// follow, so far.
    pub resets_asked: u64,
    /// Since when a delivery that did not follow waits for its Reset.
    pub gap_since: Option<Instant>,
}

impl ResolverMachine {
    /// The app's instances and revisions as of `now`.
    pub fn inspect(&self, now: Instant) -> AppInspection {
        let mut per_rev: BTreeMap<&str, usize> = BTreeMap::new();
        let mut instances: Vec<InstanceInspection> = self
            .table
            .instances()
            .map(|(_, i)| {
                if let Some(r) = i.revision() {
                    let n = per_rev.entry(r).or_default();
                    *n = n.saturating_add(1);
                }
                InstanceInspection {
                    id: i.id().to_string(),
                    host: i.host().to_string(),
                    port: i.port(),
                    revision: i.revision().map(str::to_string),
                    serving: i.is_serving(),
                    closing: i.is_closing(),
                }
            })
            .collect();
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        let revisions = self
            .revisions
            .iter()
            .map(|(rev, state)| {
                let count = per_rev.get(rev.as_str()).copied().unwrap_or(0);
                match state {
                    RevisionState::Resolved => RevisionInspection {
                        revision: rev.clone(),
                        phase: RevisionPhase::Resolved,
                        attempts: 0,
                        last_error: None,
                        next_retry_in: None,
                        unresolved_for: None,
                        instances: count,
                    },
                    RevisionState::Unresolved {
                        since,
                        attempts,
                        last_error,
                        phase,
                        recover,
                    } => {
                        let (phase, next) = match phase {
                            Phase::Fetching(_) => (RevisionPhase::Fetching, None),
                            Phase::Waiting(_) => (RevisionPhase::Waiting, Some(recover.wait(now))),
                            Phase::Idle => (RevisionPhase::Idle, None),
                            Phase::GaveUp => (RevisionPhase::GaveUp, None),
                        };
                        RevisionInspection {
                            revision: rev.clone(),
                            phase,
                            attempts: *attempts,
                            last_error: last_error.as_ref().map(|e| e.to_string()),
                            next_retry_in: next,
                            unresolved_for: Some(now.saturating_duration_since(*since)),
                            instances: count,
                        }
                    }
                }
            })
            .collect();
        AppInspection {
            app: self.app.clone(),
            instances,
            revisions,
            version: self.version,
            resets_asked: self.ask.asks(),
            gap_since: self.ask.pending_since(),
        }
    }
}
