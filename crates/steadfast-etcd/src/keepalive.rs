//! Registration of one instance key: grant a lease, put the record with it,
//! and keep it alive every TTL/3 from a spawned task.
//!
//! The task re-registers (new lease + put, then revokes the old lease) when
//! etcd says the lease is gone (keepalive answer without TTL: expired,
//! revoked, or etcd came back with a wiped data dir) or when the key has
//! vanished (deleted behind its back). A failed round is counted and retried
//! on the next tick; etcd resets lease TTLs on restart or leader change, so a
//! short outage does not expire the record.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::GatewayError;
use crate::gateway::EtcdClient;
use crate::stats::EtcdStats;

/// Shortest keepalive period, whatever the TTL.
const MIN_PERIOD: Duration = Duration::from_millis(200);

/// Grants a lease of `ttl_secs` and puts `value` under `key` with it.
/// Returns the lease id. On a failed put the lease is revoked (best effort).
pub(crate) async fn establish(
    client: &EtcdClient,
    key: &[u8],
    value: &[u8],
    ttl_secs: i64,
) -> Result<i64, GatewayError> {
    let lease = client.lease_grant(ttl_secs).await?.id;
    if let Err(e) = client.put(key, value, lease).await {
        if let Err(r) = client.lease_revoke(lease).await {
            tracing::debug!(lease, error = %r, "revoking an unused lease failed; it will expire");
        }
        return Err(e);
    }
    Ok(lease)
}

/// A live registration: the current lease and the task keeping it alive.
/// [`Registration::stop`] ends the task between rounds (so a re-register in
/// progress lands before the caller deletes the record); dropping it aborts
/// the task (the record then expires with its lease).
#[derive(Debug)]
pub(crate) struct Registration {
    lease: Arc<AtomicI64>,
    stop: Arc<Notify>,
    task: Option<JoinHandle<()>>,
}

impl Registration {
    /// Starts keeping `key` alive, registered with `lease`.
    pub(crate) fn spawn(
        client: Arc<EtcdClient>,
        key: Vec<u8>,
        value: Vec<u8>,
        ttl_secs: i64,
        lease: i64,
        stats: Arc<EtcdStats>,
    ) -> Self {
        let lease = Arc::new(AtomicI64::new(lease));
        let stop = Arc::new(Notify::new());
        let keeper = Keeper {
            client,
            key,
            value,
            ttl_secs,
            lease: lease.clone(),
            stats,
        };
        Self {
            lease,
            task: Some(tokio::spawn(keeper.run(stop.clone()))),
            stop,
        }
    }

    /// Stops keeping the record alive once the current round (if any) is
    /// done, and returns the lease it ended on.
    pub(crate) async fn stop(mut self) -> i64 {
        self.stop.notify_one();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.lease()
    }

    /// The lease the record is currently attached to.
    pub(crate) fn lease(&self) -> i64 {
        self.lease.load(Ordering::Acquire)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

struct Keeper {
    client: Arc<EtcdClient>,
    key: Vec<u8>,
    value: Vec<u8>,
    ttl_secs: i64,
    lease: Arc<AtomicI64>,
    stats: Arc<EtcdStats>,
}

/// What one keepalive round found.
enum Health {
    /// Lease alive and key present.
    Alive,
    /// The lease is gone or the key vanished: register again.
    Lost(&'static str),
    /// etcd could not be asked; try again next tick.
    Unknown(GatewayError),
}

impl Keeper {
    fn period(&self) -> Duration {
        let ttl = Duration::from_secs(u64::try_from(self.ttl_secs).unwrap_or(1));
        (ttl / 3).max(MIN_PERIOD)
    }

    async fn run(self, stop: Arc<Notify>) {
        let period = self.period();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.notified() => return,
            }
            let lease = self.lease.load(Ordering::Acquire);
            match self.check(lease).await {
                Health::Alive => {}
                Health::Lost(why) => self.reregister(lease, why).await,
                Health::Unknown(e) => {
                    EtcdStats::bump(&self.stats.keepalive_failures);
                    tracing::warn!(key = %self.key_str(), error = %e, "etcd keepalive failed");
                }
            }
        }
    }

    async fn check(&self, lease: i64) -> Health {
        match self.client.lease_keepalive(lease).await {
            Ok(Some(_)) => {}
            Ok(None) => return Health::Lost("lease gone"),
            Err(e) => return Health::Unknown(e),
        }
        match self.client.get(&self.key).await {
            Ok(r) if r.kvs.is_empty() => Health::Lost("key vanished"),
            Ok(_) => Health::Alive,
            Err(e) => Health::Unknown(e),
        }
    }

    async fn reregister(&self, old: i64, why: &'static str) {
        tracing::warn!(key = %self.key_str(), lease = old, why, "etcd registration lost; registering again");
        match establish(&self.client, &self.key, &self.value, self.ttl_secs).await {
            Ok(new) => {
                self.lease.store(new, Ordering::Release);
                EtcdStats::bump(&self.stats.reregistrations);
                if let Err(e) = self.client.lease_revoke(old).await {
                    tracing::debug!(lease = old, error = %e, "revoking the old lease failed");
                }
            }
            Err(e) => {
                EtcdStats::bump(&self.stats.keepalive_failures);
                tracing::warn!(key = %self.key_str(), error = %e, "etcd re-registration failed");
            }
        }
    }

    fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}
