//! The registrar's vocabulary: keys, operations, actions, tunables and the
//! state a registration is shown in.

use std::time::Duration;

use crate::error::RegistryError;
use crate::model::ServiceInstance;
use crate::pending::RegistryFailure;
use crate::recover::RecoverPolicy;
use crate::subscription::DEFAULT_PROBE_INTERVAL;

/// Identifies a call or a timer; stale ones are ignored.
pub type RegistrarToken = u64;

/// Default window over which a session loss spreads the re-registrations.
pub const DEFAULT_SESSION_SPREAD: Duration = Duration::from_secs(5);

/// What kind of registry record a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKind {
    /// A provider instance's record (leased where the backend has leases).
    Instance,
    /// An interface -> app mapping entry (persistent).
    Mapping,
}

/// What a registration is keyed by: the instance's app and id, or the
/// mapped app and the interface.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegistrationKey {
    /// Provider app.
    pub app: String,
    /// Instance id within the app (a mapping: the interface).
    pub id: String,
    /// The kind of record.
    pub kind: RecordKind,
}

impl RegistrationKey {
    /// The key of `instance`.
    pub fn of(instance: &ServiceInstance) -> Self {
        Self {
            app: instance.app.clone(),
            id: instance.id.clone(),
            kind: RecordKind::Instance,
        }
    }

    /// The key of the mapping entry "`app` serves `interface`".
    pub fn mapping(interface: &str, app: &str) -> Self {
        Self {
            app: app.to_string(),
            id: interface.to_string(),
            kind: RecordKind::Mapping,
        }
    }
}

/// A registry operation the shell performs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistrarOp {
    /// `Registry::register(instance)`.
    Register(ServiceInstance),
    /// `Registry::unregister(instance)`.
    Unregister(ServiceInstance),
    /// `Registry::register_mapping(interface, app)`.
    Map {
        /// The interface.
        interface: String,
        /// The app serving it.
        app: String,
    },
    /// `Registry::unregister_mapping(interface, app)`.
    Unmap {
        /// The interface.
        interface: String,
        /// The app no longer serving it.
        app: String,
    },
}

impl RegistrarOp {
    /// Whether the operation puts a record (false: removes one).
    pub fn is_register(&self) -> bool {
        matches!(self, RegistrarOp::Register(_) | RegistrarOp::Map { .. })
    }
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistrarAction {
    /// Perform `op` under `deadline`; report with `token`.
    Call {
        /// Key of the registration.
        key: RegistrationKey,
        /// Token of the call.
        token: RegistrarToken,
        /// The operation.
        op: RegistrarOp,
        /// Deadline of the call.
        deadline: Duration,
    },
    /// Call [`RegistrarMachine::on_timer`](super::RegistrarMachine::on_timer)
    /// with `token` after `delay`.
    ArmTimer {
        /// Key of the registration.
        key: RegistrationKey,
        /// Token of the timer.
        token: RegistrarToken,
        /// Delay from now.
        delay: Duration,
    },
    /// Call [`RegistrarMachine::on_probe_timer`](super::RegistrarMachine::on_probe_timer)
    /// with `token` after `delay` (cancelled with [`RegistrarAction::CancelTimer`]).
    ArmProbe {
        /// Token of the probe timer.
        token: RegistrarToken,
        /// Delay from now.
        delay: Duration,
    },
    /// Probe the registry: `Registry::list(app)` under `deadline` (the cheap
    /// read the subscription probes with), then report whether it answered
    /// with [`RegistrarMachine::on_probe_result`](super::RegistrarMachine::on_probe_result).
    Probe {
        /// The app of a pending key.
        app: String,
        /// Token of the probe.
        token: RegistrarToken,
        /// Deadline of the call.
        deadline: Duration,
    },
    /// The timer with `token` must not fire.
    CancelTimer {
        /// Its token.
        token: RegistrarToken,
    },
    /// The key's latest intent landed: waiters of this key may be answered.
    Settled {
        /// Key of the registration.
        key: RegistrationKey,
        /// Whether the record is registered now (false: unregistered).
        registered: bool,
    },
    /// The registry answers again (a probe answered, or a call landed)
    /// after an outage: `woken` keys that waited for it issue again, each
    /// within `within`, instead of after their grown backoff. Log it.
    RegistryAnswers {
        /// Keys woken.
        woken: usize,
        /// Window their calls are spread over.
        within: Duration,
    },
    /// A call failed and is retried (`retry: Some`) or given up (`None`):
    /// log and count it.
    Failed {
        /// Key of the registration.
        key: RegistrationKey,
        /// Whether the failed call was a register (false: an unregister).
        registering: bool,
        /// The failure so far.
        failure: RegistryFailure,
        /// Delay until the retry, if any.
        retry: Option<Duration>,
    },
}

/// Tunables of the registrar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegistrarConfig {
    /// Retry schedule of failed calls (default 1 s doubling to 30 s,
    /// +0-25 %, unlimited), with the probe cadence while the registry is
    /// unreachable (default: one probe per registrar every 1 s, jittered
    /// like the backoff; `None`: the backoff alone decides).
    pub recover: RecoverPolicy,
    /// Deadline of each registry call (default 5 s).
    pub call_timeout: Duration,
    /// Window over which a session loss spreads the re-registrations
    /// (default 5 s; zero: all at once). A probe finding the registry
    /// answering again spreads the keys it wakes over the smaller of this
    /// and half the probe interval.
    pub session_spread: Duration,
}

impl Default for RegistrarConfig {
    fn default() -> Self {
        Self {
            recover: RecoverPolicy::default().with_probe(DEFAULT_PROBE_INTERVAL),
            call_timeout: Duration::from_secs(5),
            session_spread: DEFAULT_SESSION_SPREAD,
        }
    }
}

/// Where one registration stands, as shown to callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistrationState {
    /// The record is registered and nothing is pending.
    Registered,
    /// The intent has not landed yet.
    Pending {
        /// What is wanted.
        registering: bool,
        /// Failed attempts since the last success.
        attempts: u32,
        /// The latest error, if an attempt failed.
        last_error: Option<RegistryError>,
    },
    /// A final error stopped the retries.
    GaveUp {
        /// What was wanted.
        registering: bool,
        /// The error.
        error: RegistryError,
    },
}
