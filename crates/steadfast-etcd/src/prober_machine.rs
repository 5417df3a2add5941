//! [`ProberMachine`]: the sans-IO decisions of the one liveness prober an
//! [`crate::EtcdClient`] shares between all its watches and keepers. Each
//! of them says what it needs ([`Want`]); the machine decides which probe
//! runs when and publishes [`Verdicts`] that all of them follow:
//!
//! * an endpoint that at least one live watch is on is probed every
//!   `live_interval` (+ jitter), however many watches are on it. A failed
//!   probe is retried on a [`Recover`] schedule (a quarter of the interval,
//!   doubling up to the interval); `failures` failures in a row declare the
//!   endpoint dead: its `dead` count goes up, so every watch on it drops
//!   its stream, and the endpoint is demoted;
//! * while anyone waits for etcd to answer again ([`Want::Answer`]), the
//!   endpoint the client tries first is probed at the shortest cadence
//!   asked for (a constant, jittered [`Recover`] schedule). A failure
//!   demotes that endpoint; a success bumps `answered`, which satisfies
//!   every wait registered before it;
//! * nobody wanting anything: no probe, no timer ([`ProberMachine::idle`]).
//!
//! Load: at most one probe in flight per endpoint for the live watches,
//! plus one for the waiters, whatever the number of watches and keepers.
//! Every cadence is clamped to [`MIN_CADENCE`]..=[`MAX_BACKOFF`], so no
//! configuration makes the prober spin or overflow an `Instant`. Time and
//! randomness are inputs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use steadfast_core::{BackoffPolicy, ErrorClass, Recover, RecoverPolicy, Retry, MAX_BACKOFF};

use crate::config::EtcdConfig;
use crate::wire::ResponseHeader;

/// Shortest cadence or retry delay the prober ever schedules.
pub const MIN_CADENCE: Duration = Duration::from_millis(10);

fn clamp(d: Duration) -> Duration {
    d.clamp(MIN_CADENCE, MAX_BACKOFF)
}

fn after(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d.min(MAX_BACKOFF.saturating_mul(2)))
}

/// How the shared prober probes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProberPolicy {
    /// Cadence of the probes of an endpoint live watches are on (`None`:
    /// never probe live endpoints).
    pub live_interval: Option<Duration>,
    /// Consecutive failed probes that declare an endpoint dead (0 acts
    /// as 1).
    pub failures: u32,
    /// Largest extra fraction added at random to every cadence.
    pub jitter: f64,
}

impl ProberPolicy {
    /// The policy `config` asks for.
    pub fn from_config(config: &EtcdConfig) -> Self {
        Self {
            live_interval: config.liveness_probe_interval,
            failures: config.probe_failures,
            jitter: config.backoff.jitter,
        }
    }

    fn jitter(&self) -> f64 {
        if self.jitter.is_finite() && self.jitter > 0.0 {
            self.jitter.min(1.0)
        } else {
            0.0
        }
    }

    fn live(&self) -> Option<Duration> {
        self.live_interval.map(clamp)
    }

    /// Retries of a failed live probe: a quarter of the interval, doubling
    /// up to the interval.
    fn live_retry(&self, interval: Duration) -> RecoverPolicy {
        RecoverPolicy::new(BackoffPolicy {
            initial: clamp(interval / 4),
            max: interval,
            multiplier: 2.0,
            jitter: self.jitter(),
        })
    }

    /// Retries of a failed "answered yet?" probe: the cadence, constant.
    fn answer_retry(&self, cadence: Duration) -> RecoverPolicy {
        RecoverPolicy::new(BackoffPolicy {
            initial: cadence,
            max: cadence,
            multiplier: 1.0,
            jitter: self.jitter(),
        })
    }
}

/// What one subscriber (a watch, the keepers of a registry) needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Nothing now.
    Nothing,
    /// A live watch is on this endpoint: probe it, say if it dies.
    Live(usize),
    /// Say when etcd answers again, probing at least this often.
    Answer(Duration),
}

/// A subscriber of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubId(u64);

/// Which endpoint a probe goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeTarget {
    /// This endpoint (a live watch is on it).
    Endpoint(usize),
    /// The endpoint the client tries first now.
    Current,
}

/// A probe to start now; its outcome goes to [`ProberMachine::on_result`]
/// with the same `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeOrder {
    /// Sequence number.
    pub seq: u64,
    /// Where it goes.
    pub target: ProbeTarget,
}

/// A successful probe of a live endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeOk {
    /// Its sequence number.
    pub seq: u64,
    /// What etcd answered.
    pub header: ResponseHeader,
    /// When it was sent.
    pub sent: Instant,
}

/// What every subscriber follows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdicts {
    /// Per endpoint: how many times it was declared dead.
    pub dead: Vec<u64>,
    /// How many times a probe found etcd answering for the waiters.
    pub answered: u64,
    /// Per endpoint: the latest successful live probe.
    pub last_ok: Vec<Option<ProbeOk>>,
    /// Per endpoint: when the first failing probe behind its latest death
    /// was sent (a watch opened after that is not condemned by it).
    pub dead_since: Vec<Option<Instant>>,
}

impl Verdicts {
    /// How many times endpoint `e` was declared dead.
    pub fn dead_count(&self, e: usize) -> u64 {
        self.dead.get(e).copied().unwrap_or(0)
    }

    /// When the first failing probe behind endpoint `e`'s latest death was
    /// sent.
    pub fn dead_since(&self, e: usize) -> Option<Instant> {
        self.dead_since.get(e).copied().flatten()
    }

    /// The latest successful live probe of endpoint `e`.
    pub fn last_ok(&self, e: usize) -> Option<&ProbeOk> {
        self.last_ok.get(e).and_then(Option::as_ref)
    }
}

/// What the IO shell does after a probe result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Demote this endpoint (the client tries the next one first).
    pub demote: Option<usize>,
    /// A probe for the waiters failed (counted).
    pub answer_failed: bool,
    /// A live endpoint was just declared dead.
    pub declared_dead: bool,
}

#[derive(Debug, Default)]
struct Schedule {
    recover: Recover,
    due: Option<Instant>,
    flight: Option<u64>,
    /// When the first probe of the current run of failures was sent.
    failing_since: Option<Instant>,
}

/// The shared prober's state.
#[derive(Debug)]
pub struct ProberMachine {
    policy: ProberPolicy,
    rng: StdRng,
    subs: BTreeMap<SubId, (Want, u64)>,
    next_sub: u64,
    seq: u64,
    /// Per endpoint: whether a live watch is on it, and its schedule.
    live: Vec<(bool, Schedule)>,
    /// The waiters' cadence while anyone waits, and its schedule.
    answer: (Option<Duration>, Schedule),
    verdicts: Verdicts,
}

impl ProberMachine {
    /// A machine for a client of `endpoints` endpoints.
    pub fn new(endpoints: usize, policy: ProberPolicy, rng: StdRng) -> Self {
        Self {
            policy,
            rng,
            subs: BTreeMap::new(),
            next_sub: 0,
            seq: 0,
            live: (0..endpoints)
                .map(|_| (false, Schedule::default()))
                .collect(),
            answer: (None, Schedule::default()),
            verdicts: Verdicts {
                dead: vec![0; endpoints],
                answered: 0,
                last_ok: vec![None; endpoints],
                dead_since: vec![None; endpoints],
            },
        }
    }

    /// The verdicts so far.
    pub fn verdicts(&self) -> &Verdicts {
        &self.verdicts
    }

    /// A new subscriber, wanting nothing yet.
    pub fn subscribe(&mut self) -> SubId {
        self.next_sub = self.next_sub.wrapping_add(1);
        let id = SubId(self.next_sub);
        self.subs
            .insert(id, (Want::Nothing, self.verdicts.answered));
        id
    }

    /// `id` now wants `want` (an [`Want::Answer`] is satisfied by the next
    /// success from now on).
    pub fn set_want(&mut self, id: SubId, want: Want, now: Instant) {
        self.subs.insert(id, (want, self.verdicts.answered));
        self.refresh(now);
    }

    /// `id` is gone.
    pub fn unsubscribe(&mut self, id: SubId, now: Instant) {
        self.subs.remove(&id);
        self.refresh(now);
    }

    /// Whether nothing is wanted and nothing is in flight (the shell may
    /// stop until someone wants something).
    pub fn idle(&self) -> bool {
        let flying = self.live.iter().any(|(_, s)| s.flight.is_some());
        let wanted = self.live.iter().any(|(w, _)| *w);
        !flying && !wanted && self.answer.0.is_none() && self.answer.1.flight.is_none()
    }

    fn jittered(&mut self, d: Duration) -> Duration {
        let j = self.policy.jitter();
        let f = if j > 0.0 {
            1.0 + self.rng.gen_range(0.0..=j)
        } else {
            1.0
        };
        Duration::try_from_secs_f64(d.as_secs_f64() * f).unwrap_or(d)
    }

    /// Recomputes what is wanted and (un)schedules probes accordingly.
    fn refresh(&mut self, now: Instant) {
        let n = self.live.len();
        let live_on = self.policy.live().is_some();
        let mut wanted = vec![false; n];
        let mut cadence: Option<Duration> = None;
        for (want, epoch) in self.subs.values() {
            match *want {
                Want::Live(e) if live_on && e < n => wanted[e] = true,
                Want::Answer(c) if *epoch >= self.verdicts.answered => {
                    let c = clamp(c);
                    cadence = Some(cadence.map_or(c, |old| old.min(c)));
                }
                _ => {}
            }
        }
        for (e, want) in wanted.into_iter().enumerate() {
            let was = self.live[e].0;
            if want && !was {
                let first = self.policy.live().map(|i| self.jittered(i));
                let (w, s) = &mut self.live[e];
                *w = true;
                if s.flight.is_none() && s.due.is_none() {
                    s.due = first.and_then(|d| after(now, d));
                }
            } else if !want && was {
                self.live[e] = (false, Schedule::default());
            }
        }
        match (cadence, self.answer.0) {
            (None, _) => self.answer = (None, Schedule::default()),
            (Some(c), old) => {
                let first = self.jittered(c);
                let s = &mut self.answer.1;
                let sooner = old.is_none_or(|o| c < o);
                if s.flight.is_none() && (sooner || s.due.is_none()) {
                    let at = after(now, first);
                    s.due = s.due.into_iter().chain(at).min();
                }
                self.answer.0 = Some(c);
            }
        }
    }

    /// When [`ProberMachine::on_timer`] must be called next, at the latest.
    pub fn next_wake(&self) -> Option<Instant> {
        let live = self
            .live
            .iter()
            .filter(|(w, s)| *w && s.flight.is_none())
            .filter_map(|(_, s)| s.due);
        let answer = self
            .answer
            .0
            .and(self.answer.1.due)
            .filter(|_| self.answer.1.flight.is_none());
        live.chain(answer).min()
    }

    /// The probes due at `now`.
    pub fn on_timer(&mut self, now: Instant) -> Vec<ProbeOrder> {
        let mut orders = Vec::new();
        for e in 0..self.live.len() {
            let (w, s) = &self.live[e];
            if *w && s.flight.is_none() && s.due.is_some_and(|d| d <= now) {
                let seq = self.next_seq();
                let s = &mut self.live[e].1;
                s.flight = Some(seq);
                s.due = None;
                orders.push(ProbeOrder {
                    seq,
                    target: ProbeTarget::Endpoint(e),
                });
            }
        }
        let s = &self.answer.1;
        if self.answer.0.is_some() && s.flight.is_none() && s.due.is_some_and(|d| d <= now) {
            let seq = self.next_seq();
            let s = &mut self.answer.1;
            s.flight = Some(seq);
            s.due = None;
            orders.push(ProbeOrder {
                seq,
                target: ProbeTarget::Current,
            });
        }
        orders
    }

    fn next_seq(&mut self) -> u64 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Probe `seq`, sent to `endpoint` at `sent`, answered `ok` (`None`: it
    /// failed) at `now`.
    pub fn on_result(
        &mut self,
        seq: u64,
        endpoint: usize,
        ok: Option<&ResponseHeader>,
        sent: Instant,
        now: Instant,
    ) -> Outcome {
        if let Some(e) = self.live.iter().position(|(_, s)| s.flight == Some(seq)) {
            return self.live_result(e, seq, ok, sent, now);
        }
        if self.answer.1.flight != Some(seq) {
            return Outcome::default();
        }
        self.answer.1.flight = None;
        if ok.is_some() {
            self.verdicts.answered = self.verdicts.answered.wrapping_add(1);
            self.answer.1 = Schedule::default();
            self.refresh(now);
            return Outcome::default();
        }
        if let Some(c) = self.answer.0 {
            let policy = self.policy.answer_retry(c);
            let s = &mut self.answer.1;
            let delay =
                match s
                    .recover
                    .on_failure(&policy, ErrorClass::Transient, now, &mut self.rng)
                {
                    Retry::After(d) => d,
                    Retry::GiveUp => c,
                };
            s.due = after(now, delay.max(MIN_CADENCE));
        }
        Outcome {
            demote: Some(endpoint),
            answer_failed: true,
            declared_dead: false,
        }
    }

    fn live_result(
        &mut self,
        e: usize,
        seq: u64,
        ok: Option<&ResponseHeader>,
        sent: Instant,
        now: Instant,
    ) -> Outcome {
        self.live[e].1.flight = None;
        let Some(interval) = self.policy.live().filter(|_| self.live[e].0) else {
            return Outcome::default();
        };
        let next = self.jittered(interval);
        if let Some(h) = ok {
            let s = &mut self.live[e].1;
            s.recover.on_success();
            s.failing_since = None;
            s.due = after(now, next);
            self.verdicts.last_ok[e] = Some(ProbeOk {
                seq,
                header: h.clone(),
                sent,
            });
            return Outcome::default();
        }
        let policy = self.policy.live_retry(interval);
        let s = &mut self.live[e].1;
        let since = *s.failing_since.get_or_insert(sent);
        let retry = s
            .recover
            .on_failure(&policy, ErrorClass::Transient, now, &mut self.rng);
        if s.recover.failures() >= self.policy.failures.max(1) {
            *s = Schedule {
                due: after(now, next),
                ..Schedule::default()
            };
            self.verdicts.dead[e] = self.verdicts.dead[e].wrapping_add(1);
            self.verdicts.dead_since[e] = Some(since);
            return Outcome {
                demote: Some(e),
                answer_failed: false,
                declared_dead: true,
            };
        }
        let delay = match retry {
            Retry::After(d) => d,
            Retry::GiveUp => interval,
        };
        s.due = after(now, delay.max(MIN_CADENCE));
        Outcome::default()
    }
}

#[cfg(test)]
mod tests;
