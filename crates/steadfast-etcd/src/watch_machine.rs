//! [`WatchMachine`]: the sans-IO state of one app's watch.
//!
//! It holds the app's instances by key, the last revision applied, the
//! identity (cluster id, raft term) of the store they came from, and (in
//! `watch_timing`) when to probe, report and retry. Gateway answers, probe
//! outcomes and timer firings go in with the time they happened; a [`Step`]
//! comes out: what to do next ([`Next`]), the snapshot to yield, the error
//! to report, a probe to start.
//!
//! Data rules:
//! * every record is decoded once, into an [`Instance`] shared by `Arc`
//!   (revisions interned per app), held by instance id;
//! * range result: replace all state, yield a [`RegistryEvent::Reset`],
//!   watch from `revision + 1`. A range that is not the first one (a
//!   re-read after an outage, a resync) is diffed against the state held:
//!   every instance added, removed or changed counts as a missed
//!   notification; an instance that did not change keeps its `Arc`;
//! * watch created: if the cluster id changed, the store revision is behind
//!   the last one seen, or the raft term went backwards (a wiped data dir
//!   restarts all three), demand a full resync; otherwise keep reading;
//! * events: apply PUT/DELETE in order (events at or below the last revision
//!   are duplicates and skipped), advance to the last event's
//!   `mod_revision`, yield one [`RegistryEvent::Delta`] per message with
//!   what changed (upserts decoded once, removals by id), on top of the
//!   revision of the previous change (a range or an event that changed the
//!   state; progress notifications do not), never a copy of the whole set;
//! * versions: `(epoch, revision)`; the epoch is the client's
//!   ([`Epochs`]), bumped when a range proves the history restarted (a
//!   revision below one seen before it was sent, another cluster id), and
//!   adopted by every Reset, so a consumer never ignores a wiped store's
//!   state as older;
//! * progress notification: advance the last revision to its header
//!   revision (etcd only notifies watchers that are in sync), yield nothing;
//! * cancel (compaction or otherwise): full resync;
//! * every resync (a cancel, a changed store seen on creation or by a
//!   probe) is a failure on the watch's retry schedule: it waits the
//!   backoff, which only resets once the watch proved healthy (see
//!   `watch_timing`), so a watch that is cancelled right after each
//!   creation is retried ever more slowly, never in a tight loop;
//! * a revision etcd cannot produce (below 1, `i64::MAX`, an event past its
//!   header) makes the message malformed: the stream is dropped and the app
//!   re-read; a range answering such a revision is a failed range. No
//!   arithmetic on etcd numbers can overflow.
//!
//! Liveness rules (see `watch_timing`): the client's shared prober watches
//! the endpoint of the open stream and says when it is dead (the stream is
//! dropped) or when etcd answers again (a down watch attempts at once);
//! every resume after an outage is a full re-read, the source is reported
//! unhealthy once per outage, and resumes are driven by
//! [`steadfast_core::Recover`].
//!
//! A probe's header is checked against the state held only for what is
//! race-free: a probe answered by another cluster, or with a raft term
//! below the one seen, means the store changed; a probe revision below
//! the one held counts only against a revision held *before* that probe
//! was sent (the probe answers asynchronously, events may overtake it).
//!
//! Invalid records are skipped with a warning and counted; an instance whose
//! record turns invalid is removed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use steadfast_core::{ErrorClass, Instance, RegistryError, RegistryEvent, RevisionInterner};

use crate::epoch::{Epochs, Ticket};
use crate::error::GatewayError;
use crate::gateway::WatchError;
use crate::records::KeyLayout;
use crate::stats::EtcdStats;
pub use crate::watch_step::{Interruption, Next, ProbeNeed, Resume, Step};
use crate::watch_timing::{Failure, Liveness};
pub use crate::watch_timing::{Phase, WatchTiming};
use crate::wire::{EventType, RangeResponse, ResponseHeader, WatchResponse};

/// The sans-IO watch state of one app.
#[derive(Debug)]
pub struct WatchMachine {
    layout: KeyLayout,
    app: String,
    /// The app's instances by id, each decoded once.
    instances: BTreeMap<Arc<str>, Arc<Instance>>,
    revisions: RevisionInterner,
    /// Interned revisions at the last trim.
    trimmed_at: usize,
    epochs: Epochs,
    /// The epoch of the state held.
    epoch: u64,
    /// What was known when the range in flight was asked for.
    ticket: Option<Ticket>,
    last_revision: i64,
    /// Revision of the latest change of the state held (a range, or an
    /// event that changed it): the base of the next delta (progress
    /// notifications advance `last_revision` without changing the state).
    changed_at: i64,
    cluster_id: Option<u64>,
    raft_term: u64,
    resume: Resume,
    resync_pending: bool,
    last_error: String,
    live: Liveness,
    /// A revision held at a known time, for checking probe headers.
    probe_floor: Option<(Instant, i64)>,
    stats: Arc<EtcdStats>,
}

/// Whether etcd can produce `rev` as a store revision (and its successor).
fn plausible(rev: i64) -> bool {
    (1..i64::MAX).contains(&rev)
}

impl WatchMachine {
    /// A machine for `app` under `layout` with `timing`; `rng` drives the
    /// jitter. Its first action is a range ([`WatchMachine::start`]).
    pub fn new(
        layout: KeyLayout,
        app: &str,
        timing: WatchTiming,
        stats: Arc<EtcdStats>,
        rng: StdRng,
    ) -> Self {
        Self {
            layout,
            app: app.to_string(),
            instances: BTreeMap::new(),
            revisions: RevisionInterner::default(),
            trimmed_at: 0,
            epochs: Epochs::default(),
            epoch: 0,
            ticket: None,
            last_revision: 0,
            changed_at: 0,
            cluster_id: None,
            raft_term: 0,
            resume: Resume::Range,
            resync_pending: false,
            last_error: String::new(),
            live: Liveness::new(timing, rng),
            probe_floor: None,
            stats,
        }
    }

    /// This machine with the client's shared epochs (a machine alone has
    /// its own).
    pub fn with_epochs(mut self, epochs: Epochs) -> Self {
        self.epoch = epochs.current();
        self.epochs = epochs;
        self
    }

    /// The first action: range the app prefix.
    pub fn start(&mut self) -> Step {
        self.ranging()
    }

    /// A range is asked for: note what is known before it is sent.
    fn ranging(&mut self) -> Step {
        self.ticket = Some(self.epochs.ticket());
        self.live.attempting(Phase::Ranging);
        Step::next(Next::Range)
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

    /// Consecutive failures since the last success.
    pub fn failures(&self) -> u32 {
        self.live.failures()
    }

    /// Where the watch is.
    pub fn phase(&self) -> Phase {
        self.live.phase()
    }

    /// Whether unhealthiness was reported for the current outage.
    pub fn reported(&self) -> bool {
        self.live.reported()
    }

    /// What the watch needs from the client's shared prober now.
    pub fn probe_need(&self) -> ProbeNeed {
        self.live.probe_need()
    }

    /// When the driver must call [`WatchMachine::on_timer`] next, at the
    /// latest (`None`: only IO can move the machine).
    pub fn next_wake(&self) -> Option<Instant> {
        self.live.next_wake()
    }

    /// A range of the app prefix answered.
    pub fn on_range(&mut self, r: &RangeResponse, now: Instant) -> Step {
        let rev = r.header.revision;
        if !plausible(rev) {
            let e = GatewayError::Decode(format!("range answered impossible revision {rev}"));
            return self.on_range_failed(&e, now);
        }
        let fresh = self.decode_all(r);
        // The epoch: restarted if this range proves it against what was
        // known before it was sent, or against this watch's own history.
        let ticket = self.ticket.take().unwrap_or_else(|| self.epochs.ticket());
        let (mut epoch, _) = self.epochs.answered(ticket, &r.header);
        let own_restart = self.cluster_id.is_some_and(|c| c != r.header.cluster_id)
            || (self.cluster_id.is_some() && rev < self.last_revision);
        if own_restart && epoch <= self.epoch {
            epoch = self.epochs.restarted(self.epoch, &r.header);
        }
        self.epoch = self.epoch.max(epoch);
        if self.cluster_id.is_some() {
            self.count_reread(&r.header, &fresh);
        }
        self.instances = fresh;
        self.trim_revisions(true);
        self.last_revision = rev;
        self.changed_at = rev;
        self.epochs.observe(self.epoch, rev);
        self.cluster_id = Some(r.header.cluster_id);
        self.raft_term = r.header.raft_term;
        self.resync_pending = false;
        self.probe_floor = Some((now, rev));
        self.live.range_ok();
        self.live.attempting(Phase::Opening);
        // `plausible` leaves room for the successor.
        let from = rev.saturating_add(1);
        self.resume = Resume::Watch { from };
        Step {
            event: self.reset(),
            ..Step::next(Next::Watch { from })
        }
    }

    /// The range failed.
    pub fn on_range_failed(&mut self, e: &GatewayError, now: Instant) -> Step {
        tracing::warn!(app = %self.app, error = %e, "etcd range failed");
        self.last_error = e.to_string();
        self.resume = Resume::Range;
        self.fail(
            Failure {
                class: e.class(),
                lost: false,
                beyond_clean: true,
                unreachable: true,
            },
            now,
        )
    }

    /// The watch open answered (its first message is next on the stream).
    pub fn on_opened(&mut self, now: Instant) -> Step {
        self.live.live(now);
        Step::next(Next::Continue)
    }

    /// One message of the open watch stream.
    pub fn on_message(&mut self, m: &WatchResponse, now: Instant) -> Step {
        self.live.activity(now);
        if m.canceled {
            tracing::warn!(app = %self.app, compact_revision = m.compact_revision,
                reason = %m.cancel_reason, last = self.last_revision,
                "etcd cancelled the watch; resyncing");
            let why = format!("etcd cancelled the watch: {}", m.cancel_reason);
            return self.resync(why, now);
        }
        if let Some(why) = self.implausible(m) {
            let e = WatchError::Malformed(why);
            return self.on_interrupted(&Interruption::Stream(e), now);
        }
        if m.created {
            if let Some(why) = self.store_changed(&m.header) {
                tracing::warn!(app = %self.app, why, "etcd store changed under the watch; resyncing");
                return self.resync(format!("etcd store changed: {why}"), now);
            }
            if self.live.needs_reread() {
                // Reported unhealthy while the open was pending: re-read.
                return self.ranging();
            }
            self.live.created_ok(now);
            self.raft_term = self.raft_term.max(m.header.raft_term);
            self.probe_floor = Some((now, self.last_revision));
        } else {
            // An event or a progress notification after the creation.
            self.live.proved_healthy();
        }
        if m.is_progress() {
            self.last_revision = self.last_revision.max(m.header.revision);
            return Step::next(Next::Continue);
        }
        let mut upserts: Vec<Arc<Instance>> = Vec::new();
        let mut removals: Vec<Arc<str>> = Vec::new();
        // Several events can share one revision (a prefix delete, a txn, a
        // lease expiring with several keys): compare with the revision seen
        // before this message, not with the one the loop advances.
        let seen = self.last_revision;
        for ev in &m.events {
            if ev.kv.mod_revision <= seen {
                continue;
            }
            let put = match ev.kind {
                EventType::Put => self.decode(&ev.kv),
                EventType::Delete => None,
            };
            match put {
                Some(inst) => {
                    removals.retain(|id| **id != *inst.id());
                    upserts.retain(|u| u.id() != inst.id());
                    self.instances.insert(inst.id_arc().clone(), inst.clone());
                    upserts.push(inst);
                }
                // A delete, or a record turned invalid: the instance goes.
                None => {
                    let id = self.layout.instance_id(&self.app, &ev.kv.key).ok();
                    if let Some((id, _)) = id.and_then(|id| self.instances.remove_entry(id)) {
                        upserts.retain(|u| u.id() != &*id);
                        removals.push(id);
                    }
                }
            }
            self.last_revision = self.last_revision.max(ev.kv.mod_revision);
        }
        if let Some(from) = self.last_revision.checked_add(1) {
            self.resume = Resume::Watch { from };
        }
        if self.last_revision == seen || (upserts.is_empty() && removals.is_empty()) {
            return Step::next(Next::Continue);
        }
        self.epochs.observe(self.epoch, self.last_revision);
        self.trim_revisions(false);
        let before = std::mem::replace(&mut self.changed_at, self.last_revision);
        let base = self.version_at(before);
        Step {
            event: Some(RegistryEvent::Delta {
                base,
                version: self.version_at(self.last_revision),
                upserts,
                removals,
            }),
            ..Step::next(Next::Continue)
        }
    }

    /// The stream stopped being usable, or opening it failed.
    pub fn on_interrupted(&mut self, why: &Interruption, now: Instant) -> Step {
        tracing::info!(app = %self.app, ?why, last = self.last_revision, "etcd watch interrupted");
        EtcdStats::bump(&self.stats.resumes);
        let failure = |class, lost, beyond_clean, unreachable| Failure {
            class,
            lost,
            beyond_clean,
            unreachable,
        };
        // A broken stream (an error object such as etcd's "transport is
        // closing" on shutdown, a cut connection, a killed server) owes a
        // full re-read (`beyond_clean`): a watch resumed from its last
        // revision cannot tell a store that was wiped and written past that
        // revision meanwhile (same cluster id, same raft term after a
        // restart with the same flags). Only a plain end of stream, etcd
        // closing a healthy watch, resumes from the last revision.
        let (reason, f) = match why {
            // etcd closed the stream: it answered, the backoff alone paces
            // the reconnect.
            Interruption::Ended => (
                "watch stream ended".into(),
                failure(ErrorClass::Transient, false, false, false),
            ),
            Interruption::Stream(e @ WatchError::Malformed(_)) => (
                e.to_string(),
                failure(ErrorClass::Persistent, false, true, true),
            ),
            Interruption::Stream(e) => (
                e.to_string(),
                failure(ErrorClass::Transient, false, true, true),
            ),
            Interruption::Open(e) => (e.to_string(), failure(e.class(), false, true, true)),
            Interruption::Idle => (
                "watch idle timeout".into(),
                failure(ErrorClass::Transient, true, true, true),
            ),
        };
        self.last_error = reason;
        if self.cluster_id.is_none() {
            self.resume = Resume::Range;
        }
        self.fail(f, now)
    }

    /// The shared prober declared the endpoint of the open stream dead
    /// (the driver calls this only for the watch's own endpoint), on probes
    /// failing since `evidence_since`: a liveness loss, reported at once;
    /// the stream is dropped. A stream that became live after the failing
    /// probes were sent (a reconnect that beat the verdict) is not condemned
    /// by them: its opening proved the endpoint answering.
    pub fn on_endpoint_dead(&mut self, evidence_since: Option<Instant>, now: Instant) -> Step {
        if self.phase() != Phase::Live {
            return Step::next(Next::Continue);
        }
        let reopened_since = matches!(
            (evidence_since, self.live.live_since()),
            (Some(evidence), Some(live)) if live > evidence
        );
        if reopened_since {
            return Step::next(Next::Continue);
        }
        tracing::warn!(app = %self.app, "etcd watch endpoint not answering probes; dropping it");
        EtcdStats::bump(&self.stats.liveness_failures);
        EtcdStats::bump(&self.stats.resumes);
        self.last_error = "etcd endpoint not answering probes".to_string();
        self.fail(
            Failure {
                class: ErrorClass::Transient,
                lost: true,
                beyond_clean: true,
                unreachable: true,
            },
            now,
        )
    }

    /// The shared prober found etcd answering again: a watch down after a
    /// possible unreachability attempts at once, whatever its backoff.
    pub fn on_answered(&mut self, now: Instant) -> Step {
        if self.live.answered(now) {
            self.attempt()
        } else {
            Step::next(Next::Continue)
        }
    }

    /// A successful probe of the open stream's endpoint, sent at `sent`,
    /// answered `h`: a store found changed resyncs.
    pub fn on_probe_header(&mut self, h: &ResponseHeader, sent: Instant, now: Instant) -> Step {
        if self.phase() != Phase::Live {
            return Step::next(Next::Continue);
        }
        let why = self.probe_says_changed(h, sent);
        self.probe_floor = Some((now, self.last_revision));
        match why {
            Some(why) => {
                tracing::warn!(app = %self.app, why, "etcd store changed (probe); resyncing");
                self.resync(format!("etcd store changed: {why}"), now)
            }
            None => Step::next(Next::Continue),
        }
    }

    /// The timer fired (at or after [`WatchMachine::next_wake`]).
    pub fn on_timer(&mut self, now: Instant) -> Step {
        let due = self.live.timer(now);
        let mut step = if due.idle {
            self.on_interrupted(&Interruption::Idle, now)
        } else if due.attempt {
            self.attempt()
        } else {
            Step::next(Next::Continue)
        };
        if due.report && step.report.is_none() {
            step.report = Some(self.unhealthy());
        }
        step
    }

    /// Starts the next attempt: a re-read when one is owed, else `resume`.
    fn attempt(&mut self) -> Step {
        let resume = if self.live.needs_reread() {
            Resume::Range
        } else {
            self.resume
        };
        match resume {
            Resume::Range => self.ranging(),
            Resume::Watch { .. } => {
                self.live.attempting(Phase::Opening);
                Step::next(resume.into())
            }
        }
    }

    fn fail(&mut self, f: Failure, now: Instant) -> Step {
        let report = self.live.fail(f, now);
        Step {
            report: report.then(|| self.unhealthy()),
            ..Step::next(Next::Wait)
        }
    }

    fn unhealthy(&self) -> RegistryError {
        RegistryError::Unavailable(format!(
            "etcd watch of {} down after {} failed attempt(s): {}",
            self.app,
            self.live.failures(),
            self.last_error
        ))
    }

    /// A full re-read is owed: drop the stream and range again once the
    /// retry schedule says so (a resync is a failure like any other).
    fn resync(&mut self, why: String, now: Instant) -> Step {
        EtcdStats::bump(&self.stats.resyncs);
        self.resync_pending = true;
        self.last_error = why;
        self.resume = Resume::Range;
        self.fail(
            Failure {
                class: ErrorClass::Transient,
                lost: false,
                beyond_clean: true,
                unreachable: false,
            },
            now,
        )
    }
}

mod checks;

mod state;

#[cfg(test)]
mod tests;
