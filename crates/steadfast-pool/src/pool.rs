//! The pool handle: acquire, the owners' endpoint feed, stats.
//!
//! The machine's state is striped by address over [`STRIPES`] machines,
//! each under its own lock: an acquire or a release locks only its
//! address's stripe, so calls to different endpoints never wait for each
//! other (and no lock is ever held across a build, a close or an await).

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures::FutureExt;
use tokio::sync::Notify;

use steadfast_core::pool::{
    Acquire, ClientId, Close, CloseReason, OwnerId, PoolCounters, PoolMachine, PoolPolicy,
};

use crate::pooled::{ClosedSignal, PooledClient, Release};
use crate::{ClientFactory, PoolConfig, PoolError};

/// What the machine holds per client: the client and the signal its calls
/// watch for a forced close.
pub(crate) struct Slot<C> {
    pub(crate) client: C,
    pub(crate) closed: Arc<ClosedSignal>,
}

impl<C: Clone> Clone for Slot<C> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            closed: self.closed.clone(),
        }
    }
}

/// One stripe's machine.
pub(crate) type Machine<C> = PoolMachine<Slot<C>>;

/// The state shared by the handles, the pooled clients and the reaper.
pub(crate) struct Inner<F: ClientFactory> {
    pub(crate) factory: F,
    pub(crate) config: PoolConfig,
    /// The machines, one per stripe of addresses.
    pub(crate) stripes: Box<[Mutex<Machine<F::Client>>]>,
    /// Owner ids (the same owner in every stripe).
    pub(crate) next_owner: AtomicU64,
    /// Wakes the reaper early (a new drain deadline).
    pub(crate) wake: Notify,
    /// The runtime the pool was made in (closes are spawned there, also
    /// from a `Drop` outside any runtime).
    pub(crate) runtime: tokio::runtime::Handle,
}

/// Stripes of the pool's state (addresses hashed over them).
pub(crate) const STRIPES: usize = 16;

impl<F: ClientFactory> Inner<F> {
    /// The stripe `address` lands on (always the same one).
    pub(crate) fn stripe_of(&self, address: &str) -> usize {
        // Zero-keyed SipHash: the same address always lands on the same
        // stripe, in every pool.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        address.hash(&mut h);
        usize::try_from(h.finish() % STRIPES as u64).unwrap_or(0)
    }

    /// The machine of `address`'s stripe, locked.
    pub(crate) fn lock_for(&self, address: &str) -> MutexGuard<'_, Machine<F::Client>> {
        Self::lock(&self.stripes[self.stripe_of(address)])
    }

    /// Stripe `at`, locked.
    pub(crate) fn lock_stripe(&self, at: usize) -> MutexGuard<'_, Machine<F::Client>> {
        Self::lock(&self.stripes[at])
    }

    /// Every stripe, one at a time.
    pub(crate) fn each_stripe(&self) -> impl Iterator<Item = MutexGuard<'_, Machine<F::Client>>> {
        self.stripes.iter().map(Self::lock)
    }

    fn lock(m: &Mutex<PoolMachine<Slot<F::Client>>>) -> MutexGuard<'_, Machine<F::Client>> {
        // The machine does not panic on input; should a bug panic under the
        // lock, later calls go on with the state as it is rather than all
        // failing on the poison.
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Performs closes off the caller's path (a release runs in `Drop`).
    pub(crate) fn spawn_closes(self: &Arc<Self>, closes: Vec<Close<Slot<F::Client>>>) {
        if closes.is_empty() {
            return;
        }
        let inner = self.clone();
        self.runtime.spawn(async move {
            for close in closes {
                inner.perform_close(close).await;
            }
        });
    }

    /// Closes one client, bounded by the close timeout, panics contained;
    /// a failure is logged and counted, never propagated. Returns whether
    /// the close succeeded.
    pub(crate) async fn perform_close(&self, close: Close<Slot<F::Client>>) -> bool {
        if close.reason == CloseReason::Forced {
            close.client.closed.close();
        }
        let ok = match self.close_bounded(close.client.client).await {
            Ok(()) => {
                tracing::debug!(address = %close.address, reason = ?close.reason, "pool: client closed");
                true
            }
            Err(why) => {
                tracing::warn!(address = %close.address, reason = ?close.reason, error = %why, "pool: closing a client failed");
                false
            }
        };
        // Removal by identity: a duplicate's id was never installed, and an
        // old client's id never names a client rebuilt under its address.
        let removed = self.lock_for(&close.address).close_finished(close.id, ok);
        // Dropped here, after the lock: a client's drop never runs under it.
        drop(removed);
        ok
    }

    async fn close_bounded(&self, client: F::Client) -> Result<(), String> {
        let closing =
            std::panic::AssertUnwindSafe(async { self.factory.close(client).await }).catch_unwind();
        match tokio::time::timeout(self.config.close_timeout, closing).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(panic)) => Err(format!(
                "close panicked: {}",
                steadfast_core::panic_message(&*panic)
            )),
            Err(_) => Err(format!(
                "close timed out after {:?}",
                self.config.close_timeout
            )),
        }
    }
}

impl<F: ClientFactory> Release for Inner<F> {
    fn release(self: Arc<Self>, id: ClientId, address: &str) {
        let close = self.lock_for(address).release(id, now());
        if let Some(close) = close {
            self.spawn_closes(vec![close]);
        }
    }
}

/// The clock the pool feeds its machine (tokio's, so paused time applies).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Gauges and counters of a [`ClientPool`]. It reads as its counters
/// too (`stats.built`: [`PoolCounters`], summed over the pool's stripes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Clients Active now.
    pub active: usize,
    /// Clients Draining now (endpoint dropped, calls in flight).
    pub draining: usize,
    /// What the pool did so far.
    pub counters: PoolCounters,
}

impl std::ops::Deref for PoolStats {
    type Target = PoolCounters;
    fn deref(&self) -> &PoolCounters {
        &self.counters
    }
}

/// A pool of clients keyed by endpoint address ("host:port"), generic over
/// the [`ClientFactory`] that builds them. Cheap to clone (an `Arc`
/// inside); the reaper task ends when the last handle drops.
pub struct ClientPool<F: ClientFactory> {
    inner: Arc<Inner<F>>,
    _reaper: Arc<crate::reaper::ReaperGuard>,
}

impl<F: ClientFactory> Clone for ClientPool<F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _reaper: self._reaper.clone(),
        }
    }
}

impl<F: ClientFactory> ClientPool<F> {
    /// A pool over `factory`. Must be called inside a tokio runtime: it
    /// spawns the reaper (idle scans every `scan_interval`, drain
    /// deadlines) there.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(factory: F, config: PoolConfig) -> Self {
        let policy = PoolPolicy {
            idle_timeout: config.idle_timeout,
            drain_timeout: config.drain_timeout,
        };
        let inner = Arc::new(Inner {
            factory,
            config,
            stripes: (0..STRIPES as u64)
                .map(|i| Mutex::new(PoolMachine::stripe(policy, i, STRIPES as u64)))
                .collect(),
            next_owner: AtomicU64::new(0),
            wake: Notify::new(),
            runtime: tokio::runtime::Handle::current(),
        });
        let reaper = crate::reaper::spawn(&inner);
        Self {
            inner,
            _reaper: Arc::new(reaper),
        }
    }

    /// The pool's configuration.
    pub fn config(&self) -> PoolConfig {
        self.inner.config
    }

    /// The factory.
    pub fn factory(&self) -> &F {
        &self.inner.factory
    }

    /// Takes `address`'s client for one call (building it on first use, or
    /// when the current one is draining or closing: such an acquire is
    /// refused and transparently gets a fresh client). The call counts in
    /// flight until the returned hold drops.
    pub fn acquire(&self, address: &str) -> Result<PooledClient<F::Client>, PoolError> {
        let held = self.inner.lock_for(address).acquire(address, now());
        let held = match held {
            Acquire::Held(held) => held,
            Acquire::Build => {
                let client = self.build(address)?;
                let slot = Slot {
                    client,
                    closed: Arc::new(ClosedSignal::default()),
                };
                let (held, duplicate) = self.inner.lock_for(address).install(address, slot, now());
                if let Some(duplicate) = duplicate {
                    self.inner.spawn_closes(vec![duplicate]);
                }
                // A client built for an address every owner dropped drains
                // from the start: the reaper must learn its deadline.
                self.inner.wake.notify_one();
                held
            }
        };
        let release: Arc<dyn Release> = self.inner.clone();
        Ok(PooledClient::new(
            held.client.client,
            held.id,
            held.address,
            held.client.closed,
            release,
        ))
    }

    fn build(&self, address: &str) -> Result<F::Client, PoolError> {
        let factory = &self.inner.factory;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory.build(address))) {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(source)) => Err(PoolError::Build {
                address: address.to_string(),
                source: Box::new(source),
            }),
            Err(panic) => Err(PoolError::BuildPanicked {
                address: address.to_string(),
                message: steadfast_core::panic_message(&*panic),
            }),
        }
    }

    /// A fresh owner of endpoint sets: one per caller or directory that
    /// feeds [`sync_endpoints`](Self::sync_endpoints).
    pub fn new_owner(&self) -> OwnerId {
        OwnerId(
            self.inner
                .next_owner
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_add(1),
        )
    }

    /// The addresses `owner` still uses. An address that no owner lists any
    /// more drains: no new calls on its client, closed once its calls in
    /// flight reach zero, force-closed after `drain_timeout`.
    pub fn sync_endpoints(&self, owner: OwnerId, addresses: impl IntoIterator<Item = String>) {
        // Each stripe learns the owner's addresses that hash to it (none:
        // the owner is forgotten there).
        let mut by_stripe: Vec<Vec<String>> = vec![Vec::new(); STRIPES];
        for address in addresses {
            let at = self.inner.stripe_of(&address);
            by_stripe[at].push(address);
        }
        let t = now();
        let mut closes = Vec::new();
        for (stripe, addresses) in self.inner.stripes.iter().zip(by_stripe) {
            closes.extend(Inner::<F>::lock(stripe).sync_owner(owner, addresses, t));
        }
        self.inner.spawn_closes(closes);
        // A drain may have set a new deadline.
        self.inner.wake.notify_one();
    }

    /// `owner` is gone (= `sync_endpoints(owner, [])`).
    pub fn drop_owner(&self, owner: OwnerId) {
        self.sync_endpoints(owner, std::iter::empty());
    }

    /// Counters and gauges.
    pub fn stats(&self) -> PoolStats {
        let mut s = PoolStats::default();
        for machine in self.inner.each_stripe() {
            s.active += machine.active();
            s.draining += machine.draining();
            s.counters.add(&machine.counters());
        }
        s
    }
}

impl<F: ClientFactory> std::fmt::Debug for ClientPool<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPool")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}
