//! Leased keys kept alive: [`Registrations`] holds one slot per key, each
//! with its own async lock (operations on one key are serialised, keys
//! never wait for each other), its current lease and value, and a keeper
//! task performing what [`KeeperMachine`] decides.
//!
//! * `upsert` of a key held with a live lease puts the new value under the
//!   same lease (in place: no new lease, no revoke, no moment without the
//!   record); otherwise it grants a lease, puts the record with it and
//!   starts the keeper;
//! * the keeper runs a round (keepalive + key check) every TTL/3; a lost
//!   lease is replaced (new lease + put), a vanished key is put back under
//!   the live lease, always with the slot's current value and under the
//!   slot's lock, so it never races an `upsert`;
//! * a failed round backs off ([`steadfast_core::Recover`]) and reports to
//!   the shared prober (`health`); when etcd answers again every failing
//!   keeper retries within the spread window;
//! * `remove` stops the keeper, then deletes the key and/or revokes the
//!   lease. Dropping [`Registrations`] aborts every keeper: the keys expire
//!   with their leases.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::ErrorClass;
use tokio::task::JoinHandle;

use crate::error::GatewayError;
use crate::gateway::EtcdClient;
use crate::health::Health;
use crate::keeper_machine::{KeeperAction, KeeperMachine, KeeperPolicy, Lost, RoundOutcome};
use crate::stats::EtcdStats;

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
        revoke_quietly(client, lease).await;
        return Err(e);
    }
    Ok(lease)
}

async fn revoke_quietly(client: &EtcdClient, lease: i64) {
    if let Err(e) = client.lease_revoke(lease).await {
        tracing::debug!(lease, error = %e, "revoking a lease failed; it will expire");
    }
}

/// What every keeper of one registry shares.
#[derive(Debug)]
pub(crate) struct KeeperCtx {
    pub client: Arc<EtcdClient>,
    pub ttl_secs: i64,
    pub operation_timeout: Duration,
    pub policy: KeeperPolicy,
    pub stats: Arc<EtcdStats>,
    pub health: Arc<Health>,
}

/// What [`Registrations::remove`] does to the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    /// Delete the key, then revoke the lease.
    DeleteKey,
    /// Only revoke the lease: the key goes iff it is still attached to it
    /// (another publisher's put of the same key survives).
    RevokeLease,
}

#[derive(Debug, Default)]
struct SlotState {
    value: Vec<u8>,
    /// 0 = not registered.
    lease: i64,
}

#[derive(Debug)]
struct KeySlot {
    key: Vec<u8>,
    state: tokio::sync::Mutex<SlotState>,
    /// Mirror of `state.lease` for synchronous reads.
    lease: AtomicI64,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl KeySlot {
    fn keeper(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.keeper.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stop_keeper(&self) {
        if let Some(h) = self.keeper().take() {
            h.abort();
        }
    }
}

/// Leased keys of one registry, by key.
#[derive(Debug)]
pub(crate) struct Registrations {
    ctx: Arc<KeeperCtx>,
    slots: Mutex<HashMap<Vec<u8>, Arc<KeySlot>>>,
}

impl Registrations {
    pub(crate) fn new(ctx: Arc<KeeperCtx>) -> Self {
        Self {
            ctx,
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Arc<KeySlot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(&self, key: &[u8]) -> Arc<KeySlot> {
        self.slots()
            .entry(key.to_vec())
            .or_insert_with(|| {
                Arc::new(KeySlot {
                    key: key.to_vec(),
                    state: tokio::sync::Mutex::new(SlotState::default()),
                    lease: AtomicI64::new(0),
                    keeper: Mutex::new(None),
                })
            })
            .clone()
    }

    /// The lease `key` is attached to while it is kept alive here.
    pub(crate) fn lease_of(&self, key: &[u8]) -> Option<i64> {
        let lease = self.slots().get(key)?.lease.load(Ordering::Acquire);
        (lease != 0).then_some(lease)
    }

    /// Stores `value` under `key` and keeps it alive: in place under the
    /// current lease when there is one, else under a new lease.
    pub(crate) async fn upsert(&self, key: &[u8], value: Vec<u8>) -> Result<(), GatewayError> {
        let slot = self.slot(key);
        let mut st = slot.state.lock().await;
        let client = &self.ctx.client;
        if st.lease != 0 {
            match client.put(key, &value, st.lease).await {
                Ok(_) => {
                    st.value = value;
                    return Ok(());
                }
                Err(e) if e.is_not_found() => {
                    tracing::info!(key = %lossy(key), lease = st.lease, "lease gone; registering anew");
                }
                Err(e) => return Err(e),
            }
        }
        let lease = establish(client, key, &value, self.ctx.ttl_secs).await?;
        st.lease = lease;
        st.value = value;
        slot.lease.store(lease, Ordering::Release);
        let mut keeper = slot.keeper();
        if keeper.as_ref().is_none_or(JoinHandle::is_finished) {
            *keeper = Some(tokio::spawn(keep(slot.clone(), self.ctx.clone())));
        }
        Ok(())
    }

    /// Stops keeping `key` alive and removes its record as `how` says. A
    /// key not held here is deleted anyway with [`Removal::DeleteKey`].
    pub(crate) async fn remove(&self, key: &[u8], how: Removal) -> Result<(), GatewayError> {
        let slot = self.slot(key);
        let mut st = slot.state.lock().await;
        // Under the lock the keeper is between two steps: stop it there.
        slot.stop_keeper();
        slot.lease.store(0, Ordering::Release);
        let lease = std::mem::take(&mut st.lease);
        let client = &self.ctx.client;
        if how == Removal::DeleteKey {
            if let Err(e) = client.delete(key).await {
                if lease != 0 {
                    revoke_quietly(client, lease).await;
                }
                return Err(e);
            }
        }
        if lease != 0 {
            match (how, client.lease_revoke(lease).await) {
                (_, Ok(_)) => {}
                (Removal::RevokeLease, Err(e)) => return Err(e),
                (Removal::DeleteKey, Err(e)) => {
                    tracing::warn!(lease, error = %e, "revoking the lease failed; it will expire");
                }
            }
        }
        drop(st);
        let mut slots = self.slots();
        // Nobody else waits on this slot: forget it.
        if Arc::strong_count(&slot) <= 2 {
            slots.remove(key);
        }
        Ok(())
    }
}

impl Drop for Registrations {
    fn drop(&mut self) {
        for slot in self.slots().values() {
            slot.stop_keeper();
        }
    }
}

fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The keeper task of one slot: performs what its [`KeeperMachine`]
/// decides, until aborted.
async fn keep(slot: Arc<KeySlot>, ctx: Arc<KeeperCtx>) {
    let mut machine = KeeperMachine::new(ctx.policy, now(), StdRng::from_entropy());
    let mut answered = ctx.health.answered();
    answered.borrow_and_update();
    let mut signal = true;
    loop {
        let due = tokio::time::Instant::from_std(machine.due());
        tokio::select! {
            () = tokio::time::sleep_until(due) => {}
            changed = answered.changed(), if signal => {
                match changed {
                    Ok(()) => { machine.on_answered(now()); }
                    Err(_) => signal = false,
                }
                continue;
            }
        }
        if machine.on_wake(now()) != KeeperAction::Round {
            continue;
        }
        let lease = slot.lease.load(Ordering::Acquire);
        if lease == 0 {
            return;
        }
        let outcome = round(&ctx.client, &slot.key, lease).await;
        let mut action = machine.on_round(outcome, now());
        if let KeeperAction::Reregister(lost) = action {
            let result = reregister(&ctx, &slot, lease, lost).await;
            action = machine.on_reregistered(result, now());
        }
        if action == KeeperAction::ReportDown {
            EtcdStats::bump(&ctx.stats.keepalive_failures);
            ctx.health.report_down();
        }
    }
}

/// One keepalive round: refresh the lease, then check the key.
async fn round(client: &EtcdClient, key: &[u8], lease: i64) -> RoundOutcome {
    match client.lease_keepalive(lease).await {
        Ok(Some(_)) => {}
        Ok(None) => return RoundOutcome::LeaseGone,
        Err(e) => {
            tracing::warn!(key = %lossy(key), error = %e, "etcd keepalive failed");
            return RoundOutcome::Failed(e.class());
        }
    }
    match client.get(key).await {
        Ok(r) if r.kvs.is_empty() => RoundOutcome::KeyVanished,
        Ok(_) => RoundOutcome::Alive,
        Err(e) => RoundOutcome::Failed(e.class()),
    }
}

/// Redoes the registration found lost with lease `seen`, under the slot's
/// lock and with its current value.
async fn reregister(
    ctx: &KeeperCtx,
    slot: &KeySlot,
    seen: i64,
    lost: Lost,
) -> Result<(), ErrorClass> {
    let mut st = slot.state.lock().await;
    if st.lease != seen {
        // Removed, or an upsert registered anew meanwhile.
        return Ok(());
    }
    let key = &slot.key;
    tracing::warn!(key = %lossy(key), lease = seen, ?lost, "etcd registration lost; registering again");
    if lost == Lost::KeyVanished {
        match ctx.client.put(key, &st.value, seen).await {
            Ok(_) => {
                EtcdStats::bump(&ctx.stats.reregistrations);
                return Ok(());
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.class()),
        }
    }
    let fresh = establish(&ctx.client, key, &st.value, ctx.ttl_secs)
        .await
        .map_err(|e| {
            tracing::warn!(key = %lossy(key), error = %e, "etcd re-registration failed");
            e.class()
        })?;
    st.lease = fresh;
    slot.lease.store(fresh, Ordering::Release);
    EtcdStats::bump(&ctx.stats.reregistrations);
    Ok(())
}
