//! The sans-IO timing half of a watch: when to try again, when to report
//! the source unhealthy, when the watch has proved healthy, and what it
//! needs from the client's shared prober. [`crate::WatchMachine`] owns one
//! `Liveness` and turns its verdicts into steps; time (`now`) and
//! randomness (a seeded `StdRng`) are inputs, so every schedule replays in
//! a unit test.
//!
//! Rules:
//! * every interruption, failed attempt and resync (a cancel, a store found
//!   changed) is a failure on one [`Recover`] schedule, whose backoff says
//!   when to try again;
//! * the schedule resets only once the watch has **proved healthy**: its
//!   first event or progress notification after its creation, or staying
//!   open and in sync for `healthy_after` (one backoff cap, 10 s by
//!   default). A range answering or a watch being created does not reset
//!   it, so a watch cancelled or ended right after its creation is paced by
//!   the growing backoff instead of looping at network speed;
//! * liveness is the business of the client's shared prober
//!   ([`crate::prober_machine`]): a live watch asks for its endpoint to be
//!   probed ([`ProbeNeed::Liveness`]) and drops its stream when the prober
//!   declares that endpoint dead (a *liveness loss*, reported at once);
//! * a watch that is down after a failure that may mean etcd is unreachable
//!   (anything but a clean end of stream or a resync) waits for the
//!   prober's "etcd answered" ([`ProbeNeed::Answer`]), which makes the next
//!   attempt run at once however long the backoff grew. A clean end and a
//!   resync do not: etcd did answer, and only the backoff paces them;
//! * the source is reported unhealthy (once per outage) on a liveness loss,
//!   or when it has been down `stale_after` without fresh data (a range
//!   answering, or a watch created in sync, ends the outage);
//! * a resume is a clean reconnect (watch from the last revision + 1) only
//!   right after a plain end of stream while live; a broken stream, a
//!   failed attempt, a liveness loss or a reported unhealthiness owes a full
//!   re-read (a wiped store written past the last revision is otherwise
//!   invisible).
//!
//! Any timing is accepted: delays are clamped to
//! [`MIN_DELAY`]..=[`steadfast_core::MAX_BACKOFF`], so no value makes the
//! machine spin or overflow an `Instant`.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use steadfast_core::{ErrorClass, Recover, RecoverPolicy, Retry, MAX_BACKOFF};

use crate::config::EtcdConfig;
use crate::watch_step::ProbeNeed;

/// Shortest delay the watch ever schedules, whatever its timing says.
pub const MIN_DELAY: Duration = Duration::from_millis(10);

/// The timing policy of one watch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WatchTiming {
    /// Backoff between attempts (its probe cadence, if any, is unused: the
    /// shared prober has its own).
    pub recover: RecoverPolicy,
    /// Whether the shared prober watches the endpoint of the open stream.
    pub liveness: bool,
    /// How long a broken watch may take to resume before it is reported.
    pub stale_after: Duration,
    /// With progress notifications: silence this long is a liveness loss.
    pub idle_timeout: Option<Duration>,
    /// A watch created in sync that stays open this long has proved
    /// healthy (without an event or progress notification before).
    pub healthy_after: Duration,
}

impl WatchTiming {
    /// The timing `config` asks for; `healthy_after` is the backoff cap.
    pub fn from_config(config: &EtcdConfig) -> Self {
        Self {
            recover: RecoverPolicy::new(config.backoff),
            liveness: config.liveness_probe_interval.is_some(),
            stale_after: config.stale_after,
            idle_timeout: config.watch_idle_timeout.filter(|_| config.progress_notify),
            healthy_after: config.backoff.cap(),
        }
    }

    /// This timing with every delay clamped to `MIN_DELAY..=MAX_BACKOFF`.
    fn sane(mut self) -> Self {
        let clamp = |d: Duration| d.clamp(MIN_DELAY, MAX_BACKOFF);
        let b = &mut self.recover.backoff;
        b.initial = clamp(b.initial);
        b.max = b.max.clamp(b.initial, MAX_BACKOFF);
        self.stale_after = self.stale_after.min(MAX_BACKOFF);
        self.idle_timeout = self.idle_timeout.map(clamp);
        self.healthy_after = clamp(self.healthy_after);
        self
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
    /// Nothing in flight: waiting for the next attempt.
    Down,
}

/// What the timer found due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Due {
    /// Report unhealthy now.
    pub report: bool,
    /// Attempt to resume now.
    pub attempt: bool,
    /// The live stream was silent past the idle timeout.
    pub idle: bool,
}

/// How a failure came about, for [`Liveness::fail`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// How the backoff treats it.
    pub class: ErrorClass,
    /// A liveness loss: report at once.
    pub lost: bool,
    /// More than a clean reconnect is owed: the resume re-reads.
    pub beyond_clean: bool,
    /// etcd may be unreachable: wait for the prober's answer too.
    pub unreachable: bool,
}

/// The timing state of one watch.
#[derive(Debug)]
pub(crate) struct Liveness {
    timing: WatchTiming,
    rng: StdRng,
    phase: Phase,
    /// When the stream last became live.
    live_since: Option<Instant>,
    recover: Recover,
    /// Since when the watch has been without fresh data (stale clock).
    outage_since: Option<Instant>,
    reported: bool,
    reread: bool,
    /// The last failure may mean etcd is unreachable.
    unreachable: bool,
    idle_due: Option<Instant>,
    /// Live, created in sync, not proved healthy yet: proved at this time.
    healthy_due: Option<Instant>,
    /// When the watch last went down (the attempt time when the backoff
    /// says "now").
    down_at: Option<Instant>,
}

fn after(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d.min(MAX_BACKOFF.saturating_mul(2)))
}

impl Liveness {
    pub(crate) fn new(timing: WatchTiming, rng: StdRng) -> Self {
        Self {
            timing: timing.sane(),
            rng,
            phase: Phase::Ranging,
            live_since: None,
            recover: Recover::new(),
            outage_since: None,
            reported: false,
            reread: false,
            unreachable: false,
            idle_due: None,
            healthy_due: None,
            down_at: None,
        }
    }

    /// When the stream last became live.
    pub(crate) fn live_since(&self) -> Option<Instant> {
        self.live_since
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

    /// What the watch needs from the shared prober now.
    pub(crate) fn probe_need(&self) -> ProbeNeed {
        match self.phase {
            Phase::Live if self.timing.liveness => ProbeNeed::Liveness,
            Phase::Down if self.unreachable => ProbeNeed::Answer,
            _ => ProbeNeed::Nothing,
        }
    }

    /// An attempt starts: a range or a watch open.
    pub(crate) fn attempting(&mut self, phase: Phase) {
        self.phase = phase;
        self.idle_due = None;
        self.healthy_due = None;
    }

    /// A range answered: the state is fresh, every debt is paid, the
    /// outage is over. The retry schedule stands until the watch proves
    /// healthy.
    pub(crate) fn range_ok(&mut self) {
        self.outage_since = None;
        self.reported = false;
        self.reread = false;
    }

    /// A watch was created on a store that checks out, in sync: the outage
    /// is over, and the watch proves healthy after `healthy_after` unless
    /// something arrives first.
    pub(crate) fn created_ok(&mut self, now: Instant) {
        self.outage_since = None;
        self.reported = false;
        self.healthy_due = if self.recover.failures() > 0 {
            after(now, self.timing.healthy_after)
        } else {
            None
        };
    }

    /// The watch delivered an event or a progress notification after its
    /// creation: it works, the retry schedule starts over.
    pub(crate) fn proved_healthy(&mut self) {
        self.recover.on_success();
        self.healthy_due = None;
    }

    /// The stream is open: start the idle clock.
    pub(crate) fn live(&mut self, now: Instant) {
        self.phase = Phase::Live;
        self.live_since = Some(now);
        self.activity(now);
    }

    /// Something arrived on the stream.
    pub(crate) fn activity(&mut self, now: Instant) {
        self.idle_due = self.timing.idle_timeout.and_then(|t| after(now, t));
    }

    /// An interruption, a failed attempt or a resync at `now`. Returns
    /// whether to report unhealthy now.
    pub(crate) fn fail(&mut self, f: Failure, now: Instant) -> bool {
        // A watch never gives up: a final error waits at the cap instead.
        let class = match f.class {
            ErrorClass::Final => ErrorClass::Persistent,
            c => c,
        };
        if let Retry::GiveUp =
            self.recover
                .on_failure(&self.timing.recover, class, now, &mut self.rng)
        {
            self.recover.on_probe_ok();
        }
        if f.lost || f.beyond_clean {
            self.reread = true;
        }
        self.unreachable = f.unreachable;
        self.phase = Phase::Down;
        self.down_at = Some(now);
        self.outage_since.get_or_insert(now);
        self.idle_due = None;
        self.healthy_due = None;
        f.lost && self.report_once()
    }

    fn report_once(&mut self) -> bool {
        if self.reported {
            return false;
        }
        self.reported = true;
        self.reread = true;
        true
    }

    /// The shared prober found etcd answering at `now`. Returns whether to
    /// attempt now (a watch down after a possible unreachability).
    pub(crate) fn answered(&mut self, now: Instant) -> bool {
        if self.phase != Phase::Down || !self.unreachable {
            return false;
        }
        self.recover.on_probe_ok();
        self.down_at = Some(now);
        true
    }

    /// When the stale report falls due, if the watch is without fresh data
    /// and has not reported yet.
    fn stale_at(&self) -> Option<Instant> {
        if self.reported || self.phase == Phase::Live {
            return None;
        }
        self.outage_since
            .and_then(|since| after(since, self.timing.stale_after))
    }

    /// The earliest instant something falls due (`None`: nothing timed).
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let attempt = match self.phase {
            // `due() == None` while down means "at once".
            Phase::Down => self.recover.due().or(self.down_at),
            _ => None,
        };
        [attempt, self.idle_due, self.healthy_due, self.stale_at()]
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
            Phase::Live if self.idle_due.is_some_and(|t| t <= now) => due.idle = true,
            Phase::Live if self.healthy_due.is_some_and(|t| t <= now) => self.proved_healthy(),
            Phase::Down if self.recover.wait(now).is_zero() => due.attempt = true,
            _ => {}
        }
        due
    }
}
