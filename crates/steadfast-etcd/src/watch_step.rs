//! The vocabulary between the watch machine and its IO driver: what the
//! driver reports ([`Interruption`]), what the machine asks for ([`Step`]:
//! the [`Next`] IO action, an event or an error to yield) and what it
//! needs from the client's shared prober ([`ProbeNeed`]).

use steadfast_core::{RegistryError, RegistryEvent};

use crate::error::GatewayError;
use crate::gateway::WatchError;

/// How a watch resumes.
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

/// The next IO action for the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Keep doing what is in progress (reading the stream, waiting).
    Continue,
    /// Drop any open stream and wait for the timer ([`crate::WatchMachine::next_wake`]).
    Wait,
    /// Drop any open stream and range the app prefix now.
    Range,
    /// Drop any open stream and open a watch from `from` now.
    Watch {
        /// First revision wanted.
        from: i64,
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

/// What a watch needs from the client's shared prober.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeNeed {
    /// Nothing (an attempt is in flight, or probing is off).
    Nothing,
    /// The stream is open: probe its endpoint and say if it dies.
    Liveness,
    /// Down after a possible unreachability: say when etcd answers again.
    Answer,
}

/// Why a watch stream stopped being usable.
#[derive(Clone, Debug, PartialEq)]
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
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// What the driver does next.
    pub next: Next,
    /// The event to yield: a Reset after a range, a Delta after a watch
    /// message that changed something.
    pub event: Option<RegistryEvent>,
    /// The source is unhealthy: the error to yield (once per outage).
    pub report: Option<RegistryError>,
}

impl Step {
    /// A step doing `next` and nothing else.
    pub fn next(next: Next) -> Self {
        Self {
            next,
            event: None,
            report: None,
        }
    }
}
