//! [`Directory::select`]: a lock-free pick with the directory's strategy,
//! handing out a [`Lease`] that takes the call's outcome, and the
//! environment leases report through (the clock, the engine's live
//! settings, closing notices to the directory actor).

use actix::WeakAddr;
use steadfast_core::{BalanceConfig, BalanceEnv, PickError, Strategy};
use steadfast_core::{
    Closing, ClosingSource, DirectorySnapshot, Lease, NoEndpoint, NoEndpointReason, NotServing,
    Reference, ServiceUrl,
};

use super::Directory;
use crate::directory_actor::{DirectoryActor, DirectoryShared};
use crate::live_config::LiveConfig;
use crate::messages::EndpointClosing;

/// The clock of picks and outcomes: tokio's, so virtual time applies.
#[inline]
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// What a directory's leases call back into.
struct HandleEnv {
    config: LiveConfig,
    addr: WeakAddr<DirectoryActor>,
    service_key: String,
}

impl BalanceEnv for HandleEnv {
    fn now(&self) -> std::time::Instant {
        now()
    }

    fn config(&self) -> BalanceConfig {
        self.config.balance()
    }

    fn closing(&self, endpoint: &ServiceUrl) {
        if let Some(addr) = self.addr.upgrade() {
            let closing = Closing::of(endpoint, &self.service_key, ClosingSource::Call);
            addr.do_send(EndpointClosing(closing));
        }
    }
}

/// Installs the leases' environment of the directory behind `shared` (the
/// first handle does; later ones find it there).
pub(super) fn install(
    shared: &DirectoryShared,
    addr: &WeakAddr<DirectoryActor>,
    reference: &Reference,
) {
    shared.balance.install(Box::new(HandleEnv {
        config: shared.config.clone(),
        addr: addr.clone(),
        service_key: reference.subscribe_key(),
    }));
}

/// Why a pick of `snapshot` found nothing.
#[cold]
pub(super) fn no_endpoint(e: PickError, snapshot: &DirectorySnapshot) -> NoEndpoint {
    match e {
        PickError::AllEjected { endpoints } => {
            NoEndpoint::new(NoEndpointReason::AllEjected { endpoints })
        }
        // Empty (and any kind added later): say why from the status.
        _ => NoEndpoint::of_status(snapshot.status()).unwrap_or_else(|| {
            // Ready in name, yet every endpoint has weight 0.
            NoEndpoint::new(NoEndpointReason::NotServing(NotServing {
                zero_weight: snapshot.len(),
                ..NotServing::default()
            }))
        }),
    }
}

impl Directory {
    /// Picks an endpoint with the directory's strategy
    /// ([`Directory::strategy`], by default the engine's
    /// `CallerConfig::strategy`, P2C over peak-EWMA latency) and leases it:
    /// sync and lock-free, no actor messaged. Ejected endpoints are routed
    /// around (unless more than `max_ejection_percent` of the directory is
    /// ejected). The lease counts the call in flight until dropped; report
    /// the outcome on it ([`Lease::success`], [`Lease::failure`]) so that
    /// latency steers picks and failures eject. A
    /// [`FailureClass::Closing`](steadfast_core::FailureClass::Closing)
    /// failure also makes the directory tombstone the endpoint.
    ///
    /// `Err` says why nothing could be picked: the directory's status
    /// (`Pending`, `RegistryEmpty`, `MetadataUnresolved`, ...),
    /// `AllEjected`, or `NotSubscribed` once the directory is closed.
    pub fn select(&self) -> Result<Lease<'_>, NoEndpoint> {
        self.select_at(tokio::time::Instant::now())
    }

    /// [`Directory::select`] at a time the caller already read (e.g. its
    /// request's start), saving the clock read of the pick; an outcome
    /// reported without a latency is measured from `now`.
    pub fn select_at(&self, now: tokio::time::Instant) -> Result<Lease<'_>, NoEndpoint> {
        let now = now.into_std();
        let cfg = self.shared.config.balance();
        let balance = &self.shared.balance;
        let strategy = balance.strategy().unwrap_or(cfg.strategy);
        self.shared.published.read(|snapshot| {
            if snapshot.is_closed() {
                return Err(NoEndpoint::new(NoEndpointReason::NotSubscribed));
            }
            let mut rng = crate::random::thread_random;
            balance
                .lease(snapshot, strategy, &cfg, now, &mut rng)
                .map_err(|e| no_endpoint(e, snapshot))
        })
    }

    /// The strategy this directory picks with.
    pub fn strategy(&self) -> Strategy {
        self.shared
            .balance
            .strategy()
            .unwrap_or_else(|| self.shared.config.peek().strategy)
    }

    /// Overrides the engine's strategy for this directory, for every handle
    /// of it (`None`: follow the engine's `CallerConfig::strategy` again).
    pub fn set_strategy(&self, strategy: Option<Strategy>) {
        self.shared.balance.set_strategy(strategy);
    }

    /// Endpoints of this directory ejected by outlier detection now.
    pub fn ejected(&self) -> usize {
        self.shared.balance.ledger().ejected(now())
    }
}
