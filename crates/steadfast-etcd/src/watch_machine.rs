//! [`WatchMachine`]: the sans-IO state of one app's watch.
//!
//! It holds the app's instances by key, the last revision applied, and the
//! identity (cluster id, raft term) of the store they came from. Gateway
//! answers go in; a [`Step`] comes out: what to do next ([`Next`]) and, when
//! the instance set was (re)computed, the full snapshot to yield.
//!
//! Rules:
//! * range result: replace all state, yield a snapshot, watch from
//!   `revision + 1`;
//! * watch created: if the cluster id changed, the store revision is behind
//!   the last one seen, or the raft term went backwards (a wiped data dir
//!   restarts all three), demand a full resync; otherwise keep reading;
//! * events: apply PUT/DELETE in order (events at or below the last revision
//!   are duplicates and skipped), advance to the last event's
//!   `mod_revision`, yield a snapshot;
//! * progress notification: advance the last revision to its header revision
//!   (etcd only notifies watchers that are in sync), yield nothing;
//! * cancel (compaction or otherwise): full resync;
//! * end of stream, error object, broken transport, malformed line, failed
//!   open, idle timeout: back off, then resume from `last revision + 1`.
//!
//! Invalid records are skipped with a warning and counted; an instance whose
//! record turns invalid is removed. After `unavailable_after` consecutive
//! failures the step carries an error for the engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use steadfast_core::{RegistryError, ServiceInstance};

use crate::error::GatewayError;
use crate::gateway::WatchError;
use crate::records::KeyLayout;
use crate::stats::EtcdStats;
use crate::wire::{EventType, KeyValue, RangeResponse, ResponseHeader, WatchResponse};

/// What to do after a backoff delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// A full range of the app prefix.
    Range,
    /// Open a watch from this revision.
    Watch {
        /// First revision wanted.
        from: i64,
    },
}

/// The next action for the IO driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Keep reading the open watch stream.
    Continue,
    /// Drop any open stream and range the app prefix now.
    Range,
    /// Drop any open stream and open a watch from `from` now.
    Watch {
        /// First revision wanted.
        from: i64,
    },
    /// Drop any open stream, wait the backoff delay of retry `attempt`
    /// (0-based), then do `then`.
    Backoff {
        /// Retry number for the backoff policy.
        attempt: u32,
        /// What to do after the delay.
        then: Resume,
    },
}

impl From<Resume> for Next {
    fn from(r: Resume) -> Self {
        match r {
            Resume::Range => Next::Range,
            Resume::Watch { from } => Next::Watch { from },
        }
    }
}

/// Why a watch stream stopped being usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// The stream ended cleanly (EOF).
    Ended,
    /// The stream failed (error object, broken transport, malformed line).
    Stream(WatchError),
    /// Opening the watch failed (no endpoint reachable, timeout, refusal).
    Open(GatewayError),
    /// Nothing arrived within the idle timeout.
    Idle,
}

/// The outcome of one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// What the driver does next.
    pub next: Next,
    /// The full instance set, when it was (re)computed.
    pub snapshot: Option<Vec<ServiceInstance>>,
    /// Set when failures reached the threshold: the error to report.
    pub give_up: Option<RegistryError>,
}

impl Step {
    fn next(next: Next) -> Self {
        Self {
            next,
            snapshot: None,
            give_up: None,
        }
    }
}

/// The sans-IO watch state of one app.
#[derive(Debug)]
pub struct WatchMachine {
    layout: KeyLayout,
    app: String,
    instances: BTreeMap<Vec<u8>, ServiceInstance>,
    last_revision: i64,
    cluster_id: Option<u64>,
    raft_term: u64,
    failures: u32,
    unavailable_after: u32,
    stats: Arc<EtcdStats>,
}

impl WatchMachine {
    /// A machine for `app` under `layout`, reporting after
    /// `unavailable_after` consecutive failures (at least 1).
    pub fn new(
        layout: KeyLayout,
        app: &str,
        unavailable_after: u32,
        stats: Arc<EtcdStats>,
    ) -> Self {
        Self {
            layout,
            app: app.to_string(),
            instances: BTreeMap::new(),
            last_revision: 0,
            cluster_id: None,
            raft_term: 0,
            failures: 0,
            unavailable_after: unavailable_after.max(1),
            stats,
        }
    }

    /// The watched app.
    pub fn app(&self) -> &str {
        &self.app
    }

    /// The key prefix to range and watch.
    pub fn key_prefix(&self) -> String {
        self.layout.app_prefix(&self.app)
    }

    /// The last revision applied (0 before the first range).
    pub fn last_revision(&self) -> i64 {
        self.last_revision
    }

    /// The current instance set, ordered by key.
    pub fn snapshot(&self) -> Vec<ServiceInstance> {
        self.instances.values().cloned().collect()
    }

    /// Consecutive failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A range of the app prefix answered: replace everything.
    pub fn on_range(&mut self, r: &RangeResponse) -> Step {
        self.instances.clear();
        for kv in &r.kvs {
            self.apply_put(kv);
        }
        self.last_revision = r.header.revision;
        self.cluster_id = Some(r.header.cluster_id);
        self.raft_term = r.header.raft_term;
        self.failures = 0;
        Step {
            next: Next::Watch {
                from: self.last_revision + 1,
            },
            snapshot: Some(self.snapshot()),
            give_up: None,
        }
    }

    /// The range failed.
    pub fn on_range_failed(&mut self, e: &GatewayError) -> Step {
        tracing::warn!(app = %self.app, error = %e, "etcd range failed");
        self.fail(Resume::Range, e.to_string())
    }

    /// One message of the open watch stream.
    pub fn on_message(&mut self, m: &WatchResponse) -> Step {
        if m.canceled {
            tracing::warn!(app = %self.app, compact_revision = m.compact_revision,
                reason = %m.cancel_reason, last = self.last_revision,
                "etcd cancelled the watch; resyncing");
            return self.resync();
        }
        if m.created {
            if let Some(why) = self.store_changed(&m.header) {
                tracing::warn!(app = %self.app, why, "etcd store changed under the watch; resyncing");
                return self.resync();
            }
            self.failures = 0;
            self.raft_term = self.raft_term.max(m.header.raft_term);
        }
        if m.is_progress() {
            self.last_revision = self.last_revision.max(m.header.revision);
            return Step::next(Next::Continue);
        }
        let mut applied = false;
        // Several events can share one revision (a prefix delete, a txn, a
        // lease expiring with several keys): compare with the revision seen
        // before this message, not with the one the loop advances.
        let seen = self.last_revision;
        for ev in &m.events {
            if ev.kv.mod_revision <= seen {
                continue;
            }
            match ev.kind {
                EventType::Put => self.apply_put(&ev.kv),
                EventType::Delete => {
                    self.instances.remove(&ev.kv.key);
                }
            }
            self.last_revision = self.last_revision.max(ev.kv.mod_revision);
            applied = true;
        }
        Step {
            next: Next::Continue,
            snapshot: applied.then(|| self.snapshot()),
            give_up: None,
        }
    }

    /// The stream stopped being usable: resume from the last revision.
    pub fn on_interrupted(&mut self, why: &Interruption) -> Step {
        tracing::info!(app = %self.app, ?why, last = self.last_revision, "etcd watch interrupted; resuming");
        EtcdStats::bump(&self.stats.resumes);
        let reason = match why {
            Interruption::Ended => "watch stream ended".to_string(),
            Interruption::Stream(e) => e.to_string(),
            Interruption::Open(e) => e.to_string(),
            Interruption::Idle => "watch idle timeout".to_string(),
        };
        let resume = if self.cluster_id.is_some() {
            Resume::Watch {
                from: self.last_revision + 1,
            }
        } else {
            Resume::Range
        };
        self.fail(resume, reason)
    }

    fn fail(&mut self, then: Resume, reason: String) -> Step {
        self.failures = self.failures.saturating_add(1);
        let give_up = (self.failures >= self.unavailable_after).then(|| {
            RegistryError::Unavailable(format!(
                "etcd unusable for {} consecutive attempts: {reason}",
                self.failures
            ))
        });
        Step {
            next: Next::Backoff {
                attempt: self.failures - 1,
                then,
            },
            snapshot: None,
            give_up,
        }
    }

    fn resync(&mut self) -> Step {
        EtcdStats::bump(&self.stats.resyncs);
        Step::next(Next::Range)
    }

    /// Why the store answering a new watch is not the one the state came
    /// from, if it is not.
    fn store_changed(&self, h: &ResponseHeader) -> Option<&'static str> {
        if self.cluster_id.is_some_and(|c| c != h.cluster_id) {
            Some("cluster id changed")
        } else if h.revision < self.last_revision {
            Some("store revision went backwards")
        } else if h.raft_term != 0 && h.raft_term < self.raft_term {
            Some("raft term went backwards")
        } else {
            None
        }
    }

    fn apply_put(&mut self, kv: &KeyValue) {
        match self.layout.decode_instance(&self.app, &kv.key, &kv.value) {
            Ok(inst) => {
                self.instances.insert(kv.key.clone(), inst);
            }
            Err(e) => {
                EtcdStats::bump(&self.stats.invalid_records);
                tracing::warn!(app = %self.app, error = %e, "skipping invalid etcd record");
                self.instances.remove(&kv.key);
            }
        }
    }
}

#[cfg(test)]
#[path = "watch_machine_tests.rs"]
mod tests;
