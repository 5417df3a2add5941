//! The test [`Harness`], which plays the resolver's actor shell: it performs
//! the returned actions on a model of armed timers and in-flight fetches and
//! asserts the machine's invariants after every step; plus fixtures and
//! action matchers.

use crate::change::Version;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::BackoffPolicy;
use crate::error::FetchError;
use crate::model::{MetadataInfo, ServiceInfo, ServiceInstance};
use crate::resolver::{ResolverAction, ResolverMachine, Token};
use crate::update::{DirectoryUpdate, Unresolved, UpdateState};

pub(super) const APP: &str = "provider";
pub(super) const KEY: &str = "Greeter:tri";

pub(super) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Metadata exporting `Greeter` over `tri` on `port`; the port makes the revision.
pub(super) fn meta(port: u16) -> Arc<MetadataInfo> {
    let svc = ServiceInfo {
        name: "Greeter".into(),
        group: None,
        version: None,
        protocol: "tri".into(),
        port,
        path: "Greeter".into(),
        params: BTreeMap::new(),
    };
    Arc::new(MetadataInfo::new(APP, [svc]))
}

/// An instance on `host` advertising `rev`.
pub(super) fn inst(host: &str, rev: &str) -> ServiceInstance {
    let mut i = ServiceInstance::new(APP, host, 8080);
    i.set_revision(rev);
    i
}

pub(super) fn fail() -> Result<Arc<MetadataInfo>, FetchError> {
    Err(FetchError::Timeout)
}

/// `host:port` of every URL of the update.
pub(super) fn addrs(u: &DirectoryUpdate) -> BTreeSet<String> {
    super::views::urls(u).iter().map(|u| u.address()).collect()
}

pub(super) fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The token of the single fetch of `rev` among `actions`.
pub(super) fn fetched(actions: &[ResolverAction], rev: &str) -> Token {
    let t: Vec<Token> = actions
        .iter()
        .filter_map(|a| match a {
            ResolverAction::Fetch {
                revision, token, ..
            } if revision == rev => Some(*token),
            _ => None,
        })
        .collect();
    assert_eq!(t.len(), 1, "expected one fetch of {rev} in {actions:?}");
    t[0]
}

/// Token and delay of the single timer armed for `rev` among `actions`.
pub(super) fn armed(actions: &[ResolverAction], rev: &str) -> (Token, Duration) {
    let t: Vec<(Token, Duration)> = actions
        .iter()
        .filter_map(|a| match a {
            ResolverAction::ArmTimer {
                revision,
                token,
                delay,
            } if revision == rev => Some((*token, *delay)),
            _ => None,
        })
        .collect();
    assert_eq!(t.len(), 1, "expected one timer for {rev} in {actions:?}");
    t[0]
}

/// Asserts `d` lies in `[min(2^n, 30) s, 1.25 x that]`.
pub(super) fn assert_band(d: Duration, n: u32) {
    let lo = secs(2u64.pow(n).min(30));
    assert!(d >= lo && d <= lo.mul_f64(1.25), "attempt {n}: delay {d:?}");
}

pub(super) fn unresolved(state: &UpdateState) -> &Unresolved {
    match state {
        UpdateState::Degraded(u) | UpdateState::Unresolved(u) => u,
        other => panic!("expected an unresolved state, got {other:?}"),
    }
}

/// Drives a [`ResolverMachine`] the way its actor does.
pub(super) struct Harness {
    pub(super) m: ResolverMachine,
    pub(super) now: Instant,
    /// Armed timers: token -> (revision, due).
    pub(super) timers: BTreeMap<Token, (String, Instant)>,
    /// In-flight fetches: token -> revision.
    pub(super) fetches: BTreeMap<Token, String>,

    /// Revisions of the latest snapshot.
    pub(super) revisions: BTreeSet<String>,
    /// Per revision, when its last armed timer was due: the machine must not
    /// fetch it earlier, even after it left the snapshot and came back
    /// within the memory window, or after its subscribers left and came back.
    due: BTreeMap<String, Instant>,
    /// When each revision left the snapshot (cleared when it comes back).
    left: BTreeMap<String, Instant>,
    /// What the updates built so far, per key.
    pub(super) views: super::views::Views,
    /// The machine's seed (a re-created machine gets the same inputs).
    seed: u64,
    /// Subscribers per key, as the directories attached them.
    subs: BTreeMap<String, usize>,
    /// The registry's latest state: generation and instances.
    last: Option<(u64, Vec<ServiceInstance>)>,
    /// What the metadata cache holds: every revision fetched so far.
    pub(super) cached: BTreeMap<String, Arc<MetadataInfo>>,
}

/// How long the machine remembers the schedule of a revision that left:
/// twice the default backoff cap.
pub(super) const MEMORY: Duration = Duration::from_secs(60);

impl Harness {
    pub(super) fn new(t0: Instant, seed: u64) -> Self {
        Self {
            m: ResolverMachine::new(APP, BackoffPolicy::default(), seed),
            now: t0,
            timers: BTreeMap::new(),
            fetches: BTreeMap::new(),
            revisions: BTreeSet::new(),
            due: BTreeMap::new(),
            left: BTreeMap::new(),
            views: Default::default(),
            seed,
            subs: BTreeMap::new(),
            last: None,
            cached: BTreeMap::new(),
        }
    }

    /// A harness with one subscriber for [`KEY`].
    pub(super) fn active(t0: Instant) -> Self {
        let mut h = Self::new(t0, 7);
        assert!(h.subscribe(KEY).is_empty());
        h
    }

    /// Performs `actions`, checking each against the harness state.
    fn apply(&mut self, actions: Vec<ResolverAction>) -> Vec<ResolverAction> {
        for a in &actions {
            match a {
                ResolverAction::Fetch {
                    revision,
                    candidates,
                    token,
                    deadline,
                } => {
                    assert!(!deadline.is_zero(), "every fetch has a deadline");
                    assert!(
                        !candidates.is_empty(),
                        "fetch of {revision} without candidates"
                    );
                    assert!(candidates.iter().all(|c| c.revision() == Some(revision)));
                    if let Some(due) = self.due.get(revision) {
                        assert!(
                            self.now >= *due,
                            "{revision} fetched at {:?} before its due time {:?}",
                            self.now,
                            due
                        );
                    }
                    self.claim(revision, *token);
                    self.fetches.insert(*token, revision.clone());
                }
                ResolverAction::AbandonFetch { revision, token } => {
                    let r = self.fetches.remove(token);
                    assert_eq!(
                        r.as_ref(),
                        Some(revision),
                        "abandoned {token}: not in flight"
                    );
                }
                ResolverAction::ArmTimer {
                    revision,
                    token,
                    delay,
                } => {
                    self.claim(revision, *token);
                    let due = self.now + *delay;
                    self.timers.insert(*token, (revision.clone(), due));
                    self.due.insert(revision.clone(), due);
                }
                ResolverAction::CancelTimer { token } => {
                    assert!(
                        self.timers.remove(token).is_some(),
                        "cancelled {token}: not armed"
                    );
                }
                ResolverAction::RequestReset => panic!("the harness delivers in order"),
            }
        }
        self.check();
        actions
    }

    fn claim(&self, rev: &str, token: Token) {
        assert!(
            !self.fetches.contains_key(&token) && !self.timers.contains_key(&token),
            "token {token} reused"
        );
        assert!(
            !self.busy().contains(rev),
            "{rev} got a second fetch or timer"
        );
    }

    /// Revisions with a fetch in flight or a timer armed.
    pub(super) fn busy(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        let all = self
            .fetches
            .values()
            .chain(self.timers.values().map(|(r, _)| r));
        for r in all {
            assert!(
                out.insert(r.as_str()),
                "{r} has both a fetch and a timer, or two"
            );
        }
        out
    }

    /// The machine's invariants, seen from the shell.
    pub(super) fn check(&self) {
        let busy = self.busy();
        assert_eq!(self.m.pending_fetches(), self.fetches.len());
        assert_eq!(self.m.pending_timers(), self.timers.len());
        for r in &busy {
            assert!(
                self.revisions.contains(*r),
                "{r} is busy but not in the snapshot"
            );
        }
        if !self.m.is_active() {
            assert!(busy.is_empty(), "work while inactive: {busy:?}");
        } else {
            // Liveness: every unresolved revision is being fetched or waited for.
            let u = self.m.unresolved().map(|u| u.revisions).unwrap_or_default();
            let u: BTreeSet<&str> = u.iter().map(String::as_str).collect();
            assert_eq!(u, busy, "unresolved revisions vs fetches and timers");
        }
    }

    pub(super) fn snapshot(
        &mut self,
        generation: u64,
        instances: Vec<ServiceInstance>,
        now: Instant,
    ) -> Vec<ResolverAction> {
        self.now = now;
        let next: BTreeSet<String> = instances
            .iter()
            .filter_map(|i| i.revision().map(str::to_string))
            .collect();
        for gone in self.revisions.difference(&next) {
            self.left.insert(gone.clone(), now);
        }
        for back in &next {
            if let Some(at) = self.left.remove(back) {
                if now.saturating_duration_since(at) > MEMORY {
                    // Forgotten: it may start afresh.
                    self.due.remove(back);
                }
            }
        }
        self.revisions = next;
        self.last = Some((generation, instances.clone()));
        let a = self
            .m
            .on_snapshot(Version::at(generation), Arc::new(instances), now);
        self.apply(a)
    }

    /// Completes the in-flight fetch `token`.
    pub(super) fn complete(
        &mut self,
        token: Token,
        result: Result<Arc<MetadataInfo>, FetchError>,
        now: Instant,
    ) -> Vec<ResolverAction> {
        self.now = now;
        let rev = self.fetches.remove(&token).expect("fetch not in flight");
        if let Ok(info) = &result {
            self.due.remove(&rev);
            self.cached.insert(rev.clone(), info.clone());
        }
        let a = self.m.on_fetch_result(&rev, token, result, now);
        self.apply(a)
    }

    /// Fires the armed timer `token` at its due time.
    pub(super) fn fire(&mut self, token: Token) -> Vec<ResolverAction> {
        let (rev, due) = self.timers.remove(&token).expect("timer not armed");
        self.now = self.now.max(due);
        let a = self.m.on_retry_due(&rev, token);
        self.apply(a)
    }

    /// Callers wait at `now`: the machine may fetch waiting revisions
    /// before their due time (that is the point), never a second time.
    pub(super) fn retry_now(&mut self, now: Instant) -> Vec<ResolverAction> {
        self.now = now;
        let a = self.m.retry_now(now);
        for action in &a {
            if let ResolverAction::Fetch { revision, .. } = action {
                self.due.remove(revision);
            }
        }
        // Each revision's timer is cancelled before its fetch starts.
        self.apply(a)
    }

    pub(super) fn subscribe(&mut self, key: &str) -> Vec<ResolverAction> {
        if !self.m.is_closed() {
            *self.subs.entry(key.to_string()).or_default() += 1;
        }
        let a = self.m.subscribe_at(key, self.now);
        self.apply(a)
    }

    pub(super) fn unsubscribe(&mut self, key: &str) -> Vec<ResolverAction> {
        if let Some(n) = self.subs.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.subs.remove(key);
            }
        }
        let a = self.m.unsubscribe(key);
        self.apply(a)
    }

    pub(super) fn close(&mut self) -> Vec<ResolverAction> {
        self.subs.clear();
        let a = self.m.close();
        self.apply(a)
    }

    /// The actor panicked and was re-created from its inputs: a fresh
    /// machine resuming after the old one ([`ResolverMachine::resuming`]),
    /// its directories attached again, the metadata cache recalled, the
    /// registry's state delivered again (the registry actor answers a new
    /// subscription with it). The old
    /// machine's timers died with its context; its fetches may still answer,
    /// with tokens the new machine never issued. The new schedule starts
    /// clean, so earlier due times no longer bind it.
    pub(super) fn restart(&mut self, now: Instant) -> Vec<ResolverAction> {
        self.now = now;
        if self.m.is_closed() {
            return Vec::new();
        }
        let fresh = ResolverMachine::new(APP, BackoffPolicy::default(), self.seed);
        let at = self.m.resume_point();
        self.m = fresh.resuming(at);
        self.timers.clear();
        self.fetches.clear();
        self.due.clear();
        self.left.clear();
        let mut a = Vec::new();
        for (key, n) in self.subs.clone() {
            for _ in 0..n {
                a.extend(self.m.subscribe_at(&key, now));
            }
        }
        let mut a = self.apply(a);
        self.m.on_recalled(self.cached.clone());
        if let Some((generation, instances)) = self.last.clone() {
            a.extend(self.snapshot(generation, instances, now));
        }
        a
    }

    /// The single update taken for [`KEY`].
    pub(super) fn update(&mut self) -> DirectoryUpdate {
        let mut u = self.m.take_updates();
        assert_eq!(u.len(), 1, "expected one update, got {u:?}");
        let u = u.pop().unwrap();
        self.views.absorb(u)
    }
}
