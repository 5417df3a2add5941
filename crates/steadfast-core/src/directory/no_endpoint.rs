//! [`NoEndpoint`]: why a caller got no endpoint, typed, with the cause the
//! directory's status names.

use std::fmt;

use crate::directory::{DirectoryStatus, EmptyReason};
use crate::pending::Pending;
use crate::update::{NotServing, Unresolved};

/// Why a pick or a wait returned no endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoEndpointReason {
    /// Nothing heard from the registry yet (and which registry step is
    /// failing, if one is).
    Pending(Pending),
    /// The registry really holds no instance of the reference's apps.
    RegistryEmpty,
    /// Instances exist but their metadata is not resolved (still retrying).
    MetadataUnresolved(Unresolved),
    /// Providers are resolved but none exports this service.
    NoMatchingService,
    /// Instances are present but none may take traffic (unhealthy, weight 0).
    NotServing(NotServing),
    /// Every endpoint is ejected by outlier detection (only possible when
    /// `max_ejection_percent` allows ejecting all of them).
    AllEjected {
        /// Endpoints held (all ejected).
        endpoints: usize,
    },
    /// Every endpoint the directory held announced closing (tombstoned or
    /// flagged closing in the registry).
    AllClosing {
        /// Endpoints closing.
        closing: usize,
    },
    /// The reference is not subscribed (unsubscribed, or the engine shut down).
    NotSubscribed,
    /// The interface -> app mapping of a reference without apps names no
    /// provider app.
    NoProviderApp,
}

/// No endpoint could be had, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no endpoint: {reason}")]
pub struct NoEndpoint {
    /// The cause.
    pub reason: NoEndpointReason,
}

impl NoEndpoint {
    /// No endpoint because of `reason`.
    pub fn new(reason: NoEndpointReason) -> Self {
        Self { reason }
    }

    /// Why `status` serves nothing, or `None` when it is ready.
    pub fn of_status(status: &DirectoryStatus) -> Option<Self> {
        let reason = match status {
            DirectoryStatus::Ready { .. } => return None,
            DirectoryStatus::Empty(EmptyReason::Pending(p)) => NoEndpointReason::Pending(p.clone()),
            DirectoryStatus::Empty(EmptyReason::RegistryEmpty) => NoEndpointReason::RegistryEmpty,
            DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => {
                NoEndpointReason::MetadataUnresolved(u.clone())
            }
            DirectoryStatus::Empty(EmptyReason::NoMatchingService) => {
                NoEndpointReason::NoMatchingService
            }
            DirectoryStatus::Empty(EmptyReason::NotServing(n)) if n.total() == n.closing => {
                NoEndpointReason::AllClosing { closing: n.closing }
            }
            DirectoryStatus::Empty(EmptyReason::NotServing(n)) => NoEndpointReason::NotServing(*n),
            DirectoryStatus::Empty(EmptyReason::NoProviderApp) => NoEndpointReason::NoProviderApp,
        };
        Some(Self::new(reason))
    }
}

impl fmt::Display for NoEndpointReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pending(p) => write!(f, "{p}"),
            Self::RegistryEmpty => write!(f, "the registry holds no provider instance"),
            Self::MetadataUnresolved(u) => write!(f, "{u}"),
            Self::NoMatchingService => write!(f, "no provider exports this service"),
            Self::NotServing(n) => write!(f, "{n}"),
            Self::AllEjected { endpoints } => {
                write!(
                    f,
                    "all {endpoints} endpoint(s) ejected by outlier detection"
                )
            }
            Self::AllClosing { closing } => {
                write!(f, "all {closing} endpoint(s) announced closing")
            }
            Self::NotSubscribed => write!(f, "the reference is not subscribed"),
            Self::NoProviderApp => write!(f, "the interface mapping names no provider app"),
        }
    }
}
