//! The vocabulary between the watch machine and its IO driver: what the
//! driver reports ([`Interruption`]) and what the machine asks for
//! ([`Step`]: the [`Next`] IO action, a snapshot or an error to yield, a
//! [`Probe`] to start, an endpoint to demote).

use steadfast_core::{RegistryError, ServiceInstance};

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

/// Where a probe goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeTarget {
    /// The endpoint the open watch lives on.
    WatchEndpoint,
    /// The endpoint the next attempt will try first.
    Current,
}

/// A probe to start now; its outcome goes to [`crate::WatchMachine::on_probe`]
/// with the same `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Sequence number (outcomes of older probes are ignored).
    pub seq: u64,
    /// Which endpoint to probe.
    pub target: ProbeTarget,
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
    /// The full instance set, when it was (re)computed.
    pub snapshot: Option<Vec<ServiceInstance>>,
    /// The source is unhealthy: the error to yield (once per outage).
    pub report: Option<RegistryError>,
    /// A probe to start now.
    pub probe: Option<Probe>,
    /// The endpoint just probed is dead: try another one first.
    pub demote: bool,
}

impl Step {
    /// A step doing `next` and nothing else.
    pub fn next(next: Next) -> Self {
        Self {
            next,
            snapshot: None,
            report: None,
            probe: None,
            demote: false,
        }
    }
}
