//! When to write an app's snapshot: only after an authoritative, fresh,
//! fully resolved state (the caller says whether the state is good), and
//! at most once per interval: the first good state is written at once, and
//! a burst of changes after it is coalesced into one write when the
//! interval has passed, of the state as it is then. Time is an input.

use std::time::{Duration, Instant};

/// What the shell does after telling the schedule about a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteDecision {
    /// Write the current state now.
    Write,
    /// Call [`WriteSchedule::on_timer`] after this delay.
    ArmTimer(Duration),
    /// Nothing to do (a timer is armed already, or the state is not good).
    Wait,
}

/// When the next write may happen.
enum Due {
    /// Nothing written yet: at once.
    Now,
    /// Once this instant is reached.
    At(Instant),
    /// Never (the interval overflows the clock).
    Never,
}

/// The write schedule of one app's snapshot.
#[derive(Clone, Debug)]
pub struct WriteSchedule {
    interval: Duration,
    last_write: Option<Instant>,
    /// A good state arrived that is not written yet.
    pending: bool,
    /// A timer is armed.
    armed: bool,
}

impl WriteSchedule {
    /// A schedule writing at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_write: None,
            pending: false,
            armed: false,
        }
    }

    /// The state changed at `now`; `good`: it is authoritative, fresh and
    /// fully resolved (only such a state is ever written).
    pub fn on_state(&mut self, good: bool, now: Instant) -> WriteDecision {
        if !good {
            // A state that may not be written supersedes the pending one.
            self.pending = false;
            return WriteDecision::Wait;
        }
        self.pending = true;
        if self.armed {
            return WriteDecision::Wait;
        }
        match self.due() {
            Due::Now => self.written(now),
            Due::At(due) if due > now => {
                self.armed = true;
                WriteDecision::ArmTimer(due.saturating_duration_since(now))
            }
            Due::At(_) => self.written(now),
            Due::Never => WriteDecision::Wait,
        }
    }

    /// The timer fired at `now`; `good`: whether the state is good now.
    /// Returns whether to write it.
    pub fn on_timer(&mut self, good: bool, now: Instant) -> bool {
        self.armed = false;
        if !(self.pending && good) {
            self.pending = false;
            return false;
        }
        self.written(now) == WriteDecision::Write
    }

    /// The interval between writes (a re-created shell starts a fresh
    /// schedule with it).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether a good state waits to be written.
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    fn due(&self) -> Due {
        let Some(last) = self.last_write else {
            return Due::Now;
        };
        // An interval that overflows the clock: never due again.
        last.checked_add(self.interval).map_or(Due::Never, Due::At)
    }

    fn written(&mut self, now: Instant) -> WriteDecision {
        self.pending = false;
        self.last_write = Some(now);
        WriteDecision::Write
    }
}
