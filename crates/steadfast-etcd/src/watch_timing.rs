//! The sans-IO timing half of a watch: when to probe, when a probe failure
//! counts as an interruption, when to report the source unhealthy, and when
//! to try again. [`crate::WatchMachine`] owns one `Liveness` and turns its
//! verdicts into steps; time (`now`) and randomness (a seeded `StdRng`) are
//! inputs, so every schedule replays in a unit test.
//!
//! Rules:
//! * while the stream is open, probe the watch's endpoint every
//!   `probe_interval` (+ jitter); a failed probe is retried after a quarter
//!   of that, and `probe_failures` failures in a row declare the endpoint
//!   dead: a *liveness loss*, reported at once;
//! * any other interruption (stream end, broken stream, failed attempt)
//!   goes through [`Recover`]: the backoff says when to try again, and its
//!   probe cadence lets a cheap probe run meanwhile; a probe that succeeds
//!   makes the next attempt run at once, however long the backoff grew;
//! * the source is reported unhealthy (once per outage) on a liveness loss,
//!   or when it has been down `stale_after` without resuming;
//! * a resume is a clean reconnect (watch from the last revision + 1) only
//!   right after a stream ended while live; once an attempt failed, a
//!   liveness loss happened or unhealthiness was reported, the resume is a
//!   full re-read.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use steadfast_core::{ErrorClass, RecoverPolicy};
use steadfast_core::{Recover, Retry};

use crate::config::EtcdConfig;

/// The timing policy of one watch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WatchTiming {
    /// Backoff between attempts, with the probe cadence while down.
    pub recover: RecoverPolicy,
    /// Probe cadence while the stream is open (`None`: no probe).
    pub probe_interval: Option<Duration>,
    /// Failed probes in a row that declare the endpoint dead (>= 1).
    pub probe_failures: u32,
    /// How long a broken watch may take to resume before it is reported.
    pub stale_after: Duration,
    /// With progress notifications: silence this long is a liveness loss.
    pub idle_timeout: Option<Duration>,
}

impl WatchTiming {
    /// The timing `config` asks for.
    pub fn from_config(config: &EtcdConfig) -> Self {
        Self {
            recover: RecoverPolicy::new(config.backoff).with_probe(config.recover_probe_interval),
            probe_interval: config.liveness_probe_interval,
            probe_failures: config.probe_failures.max(1),
            stale_after: config.stale_after,
            idle_timeout: config.watch_idle_timeout.filter(|_| config.progress_notify),
        }
    }
}

/// Where a watch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A range of the app prefix is in flight.
    Ranging,
    /// A watch open is in flight.
    Opening,
    /// The stream is open.
    Live,
    /// Nothing in flight: waiting for the next attempt (probing meanwhile).
    Down,
}

/// What a probe's outcome means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProbeVerdict {
    /// Not the probe in flight (an older one, or a phase change since).
    Stale,
    /// All well; the next probe is scheduled.
    Fine,
    /// Failed; retried soon.
    Failed,
    /// The live endpoint is dead: drop the stream.
    Dead,
    /// While down, etcd answered: attempt now.
    Answered,
}

/// What the timer found due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Due {
    /// Report unhealthy now.
    pub report: bool,
    /// Start probe number `seq` now.
    pub probe: Option<u64>,
    /// Attempt to resume now.
    pub attempt: bool,
    /// The live stream was silent past the idle timeout.
    pub idle: bool,
}

/// The timing state of one watch.
#[derive(Debug)]
pub(crate) struct Liveness {
    timing: WatchTiming,
    rng: StdRng,
    phase: Phase,
    recover: Recover,
    reported: bool,
    reread: bool,
    probe_due: Option<Instant>,
    probe_in_flight: Option<u64>,
    probe_seq: u64,
    probe_failures: u32,
    idle_due: Option<Instant>,
    /// When the watch last went down (the attempt time when the backoff
    /// says "now").
    down_at: Option<Instant>,
}

fn after(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d)
}

impl Liveness {
    pub(crate) fn new(timing: WatchTiming, rng: StdRng) -> Self {
        Self {
            timing,
            rng,
            phase: Phase::Ranging,
            recover: Recover::new(),
            reported: false,
            reread: false,
            probe_due: None,
            probe_in_flight: None,
            probe_seq: 0,
            probe_failures: 0,
            idle_due: None,
            down_at: None,
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    pub(crate) fn failures(&self) -> u32 {
        self.recover.failures()
    }

    pub(crate) fn reported(&self) -> bool {
        self.reported
    }

    /// Whether the next resume must be a full re-read.
    pub(crate) fn needs_reread(&self) -> bool {
        self.reread
    }

    fn jittered(&mut self, d: Duration) -> Duration {
        let j = self.timing.recover.backoff.jitter;
        if !(j.is_finite() && j > 0.0) {
            return d;
        }
        let f = 1.0 + self.rng.gen_range(0.0..=j.min(1.0));
        Duration::try_from_secs_f64(d.as_secs_f64() * f).unwrap_or(d)
    }

    fn clear_probe(&mut self) {
        self.probe_due = None;
        self.probe_in_flight = None;
        self.probe_failures = 0;
    }

    /// An attempt starts: a range or a watch open.
    pub(crate) fn attempting(&mut self, phase: Phase) {
        self.phase = phase;
        self.clear_probe();
        self.idle_due = None;
    }

    /// A range answered: the state is fresh, every debt is paid.
    pub(crate) fn range_ok(&mut self) {
        self.recover.on_success();
        self.reported = false;
        self.reread = false;
    }

    /// A watch was created on a store that checks out.
    pub(crate) fn created_ok(&mut self) {
        self.recover.on_success();
        self.reported = false;
    }

    /// The stream is open: start probing and the idle clock.
    pub(crate) fn live(&mut self, now: Instant) {
        self.phase = Phase::Live;
        self.clear_probe();
        self.probe_due = match self.timing.probe_interval {
            Some(p) => {
                let d = self.jittered(p);
                after(now, d)
            }
            None => None,
        };
        self.activity(now);
    }

    /// Something arrived on the stream.
    pub(crate) fn activity(&mut self, now: Instant) {
        self.idle_due = self.timing.idle_timeout.and_then(|t| after(now, t));
    }

    /// An interruption or a failed attempt at `now`. `lost` marks a
    /// liveness loss; `beyond_clean` says the outage is already more than a
    /// clean reconnect. Returns whether to report unhealthy now.
    pub(crate) fn fail(
        &mut self,
        class: ErrorClass,
        now: Instant,
        lost: bool,
        beyond_clean: bool,
    ) -> bool {
        // A watch never gives up: a final error waits at the cap instead.
        let class = match class {
            ErrorClass::Final => ErrorClass::Persistent,
            c => c,
        };
        if let Retry::GiveUp =
            self.recover
                .on_failure(&self.timing.recover, class, now, &mut self.rng)
        {
            self.recover.on_probe_ok();
        }
        if lost || beyond_clean {
            self.reread = true;
        }
        self.phase = Phase::Down;
        self.down_at = Some(now);
        self.clear_probe();
        self.idle_due = None;
        self.schedule_down_probe(now);
        lost && self.report_once()
    }

    fn report_once(&mut self) -> bool {
        if self.reported {
            return false;
        }
        self.reported = true;
        self.reread = true;
        true
    }

    fn schedule_down_probe(&mut self, now: Instant) {
        let delay = self
            .recover
            .probe_delay(&self.timing.recover, now, &mut self.rng);
        self.probe_due = delay.and_then(|d| after(now, d));
    }

    /// The outcome of probe `seq` at `now`.
    pub(crate) fn probe_result(&mut self, seq: u64, ok: bool, now: Instant) -> ProbeVerdict {
        if self.probe_in_flight != Some(seq) {
            return ProbeVerdict::Stale;
        }
        self.probe_in_flight = None;
        match (self.phase, ok) {
            (Phase::Live, true) => {
                self.probe_failures = 0;
                self.probe_due = match self.timing.probe_interval {
                    Some(p) => {
                        let d = self.jittered(p);
                        after(now, d)
                    }
                    None => None,
                };
                ProbeVerdict::Fine
            }
            (Phase::Live, false) => {
                self.probe_failures = self.probe_failures.saturating_add(1);
                if self.probe_failures >= self.timing.probe_failures {
                    return ProbeVerdict::Dead;
                }
                let retry = self.timing.probe_interval.unwrap_or_default() / 4;
                self.probe_due = after(now, retry);
                ProbeVerdict::Failed
            }
            (Phase::Down, true) => {
                self.recover.on_probe_ok();
                self.down_at = Some(now);
                ProbeVerdict::Answered
            }
            (Phase::Down, false) => {
                // The outage outlasted a clean reconnect.
                self.reread = true;
                self.schedule_down_probe(now);
                ProbeVerdict::Failed
            }
            _ => ProbeVerdict::Stale,
        }
    }

    /// When the stale report falls due, if the watch is down and has not
    /// reported yet.
    fn stale_at(&self) -> Option<Instant> {
        if self.reported || self.phase == Phase::Live {
            return None;
        }
        self.recover
            .down_since()
            .and_then(|since| after(since, self.timing.stale_after))
    }

    /// The earliest instant something falls due (`None`: nothing timed).
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let probe = self.probe_due.filter(|_| self.probe_in_flight.is_none());
        let attempt = match self.phase {
            // `due() == None` while down means "at once".
            Phase::Down => self.recover.due().or(self.down_at),
            _ => None,
        };
        [probe, attempt, self.idle_due, self.stale_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Everything due at `now`.
    pub(crate) fn timer(&mut self, now: Instant) -> Due {
        let mut due = Due::default();
        if self.stale_at().is_some_and(|t| t <= now) {
            due.report = self.report_once();
        }
        match self.phase {
            Phase::Live if self.idle_due.is_some_and(|t| t <= now) => {
                due.idle = true;
                return due;
            }
            Phase::Down if self.recover.wait(now).is_zero() => {
                due.attempt = true;
                return due;
            }
            _ => {}
        }
        let probing = matches!(self.phase, Phase::Live | Phase::Down);
        if probing && self.probe_in_flight.is_none() && self.probe_due.is_some_and(|t| t <= now) {
            self.probe_seq = self.probe_seq.wrapping_add(1);
            self.probe_in_flight = Some(self.probe_seq);
            self.probe_due = None;
            due.probe = Some(self.probe_seq);
        }
        due
    }
}
