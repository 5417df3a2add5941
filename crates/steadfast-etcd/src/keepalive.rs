//! Leased keys kept alive: [`Registrations`] holds one slot per key, each
//! with its own task. The task owns the key's current lease and value and
//! performs the key's operations in arrival order (keys never wait for
//! each other), and, between them, what the key's [`KeeperMachine`]
//! decides. No lock is held across an etcd call: operations reach the task
//! through a bounded queue and their answers come back on a oneshot.
//!
//! * `upsert` of a key held with a live lease puts the new value under the
//!   same lease (in place: no new lease, no revoke, no moment without the
//!   record); otherwise it grants a lease, puts the record with it and
//!   starts the keeper;
//! * the keeper runs a round (keepalive + key check) every TTL/3; a lost
//!   lease is replaced (new lease + put), a vanished key is put back under
//!   the live lease, always with the key's current value and by the key's
//!   task, so it never races an `upsert`;
//! * a failed round backs off ([`steadfast_core::Recover`]) and asks the
//!   client's shared prober (`prober`) to say when etcd answers again;
//!   when it does (the client's `answered` signal) every failing keeper
//!   retries within the spread window;
//! * `remove` stops the keeper, then deletes the key and/or revokes the
//!   lease. Dropping [`Registrations`] aborts every key's task: the keys expire
//!   with their leases.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::ErrorClass;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::GatewayError;
use crate::gateway::EtcdClient;
use crate::keeper_machine::{KeeperAction, KeeperMachine, KeeperPolicy, Lost, RoundOutcome};
use crate::prober::{ProbeSub, Want};
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
    /// The keepers' subscription to the client's prober.
    pub prober: ProbeSub,
    /// How often the prober checks etcd while keepers fail.
    pub answer_cadence: Duration,
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

/// An operation on one key, performed by the key's task in arrival order.
enum Op {
    Upsert(Vec<u8>, oneshot::Sender<Result<(), GatewayError>>),
    Remove(Removal, oneshot::Sender<Result<(), GatewayError>>),
}

/// Operations queued for one key's task at most; a caller past it waits.
const OPS_QUEUE: usize = 8;

/// One key: the sender of its task's operations, the task, and a mirror of
/// the lease the task holds (for synchronous reads). The task owns the
/// key's value and lease; nothing else touches them, so no lock is held
/// across an etcd call.
#[derive(Debug)]
struct KeySlot {
    key: Vec<u8>,
    ops: mpsc::Sender<Op>,
    /// Mirror of the task's lease (0 = none).
    lease: Arc<AtomicI64>,
    task: JoinHandle<()>,
}

impl KeySlot {
    /// Queues `op` and waits for its answer (`Closed` when the task is gone:
    /// the registrations are being dropped).
    async fn perform(
        &self,
        op: impl FnOnce(oneshot::Sender<Result<(), GatewayError>>) -> Op,
    ) -> Result<(), GatewayError> {
        let (reply, answer) = oneshot::channel();
        if self.ops.send(op(reply)).await.is_err() {
            return Err(GatewayError::Closed);
        }
        answer.await.unwrap_or(Err(GatewayError::Closed))
    }
}

/// A slot and the number of operations using it right now.
#[derive(Debug)]
struct Entry {
    slot: Arc<KeySlot>,
    users: usize,
}

/// Leased keys of one registry, by key.
///
/// A slot lives in the map while an operation uses it or while it holds a
/// lease. Every `upsert` / `remove` holds a [`SlotUse`]; when the last use
/// of a slot ends and the slot holds no lease, the slot is removed, by
/// identity, under the map lock (its task, idle, then ends). The map lock
/// is never held across an await.
#[derive(Debug)]
pub(crate) struct Registrations {
    ctx: Arc<KeeperCtx>,
    slots: Mutex<HashMap<Vec<u8>, Entry>>,
}

/// One operation's use of a slot; dropping it may forget the slot.
struct SlotUse<'a> {
    owner: &'a Registrations,
    slot: Arc<KeySlot>,
}

impl std::ops::Deref for SlotUse<'_> {
    type Target = KeySlot;

    fn deref(&self) -> &KeySlot {
        &self.slot
    }
}

impl Drop for SlotUse<'_> {
    fn drop(&mut self) {
        let mut slots = self.owner.slots();
        let Some(entry) = slots.get_mut(&self.slot.key) else {
            return;
        };
        if !Arc::ptr_eq(&entry.slot, &self.slot) {
            return;
        }
        entry.users = entry.users.saturating_sub(1);
        if entry.users == 0 && entry.slot.lease.load(Ordering::Acquire) == 0 {
            slots.remove(&self.slot.key);
        }
    }
}

impl Registrations {
    pub(crate) fn new(ctx: Arc<KeeperCtx>) -> Self {
        Self {
            ctx,
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot of `key` (created with its task if needed), in use until
    /// the guard drops.
    fn acquire(&self, key: &[u8]) -> SlotUse<'_> {
        let mut slots = self.slots();
        let entry = slots.entry(key.to_vec()).or_insert_with(|| {
            let (ops, rx) = mpsc::channel(OPS_QUEUE);
            let lease = Arc::new(AtomicI64::new(0));
            let task = tokio::spawn(run_slot(key.to_vec(), rx, lease.clone(), self.ctx.clone()));
            Entry {
                slot: Arc::new(KeySlot {
                    key: key.to_vec(),
                    ops,
                    lease,
                    task,
                }),
                users: 0,
            }
        });
        entry.users = entry.users.saturating_add(1);
        SlotUse {
            owner: self,
            slot: entry.slot.clone(),
        }
    }

    /// Number of slots held (keys kept alive or in an operation).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots().len()
    }

    /// The lease `key` is attached to while it is kept alive here.
    pub(crate) fn lease_of(&self, key: &[u8]) -> Option<i64> {
        let lease = self.slots().get(key)?.slot.lease.load(Ordering::Acquire);
        (lease != 0).then_some(lease)
    }

    /// Stores `value` under `key` and keeps it alive: in place under the
    /// current lease when there is one, else under a new lease.
    pub(crate) async fn upsert(&self, key: &[u8], value: Vec<u8>) -> Result<(), GatewayError> {
        let slot = self.acquire(key);
        slot.perform(|reply| Op::Upsert(value, reply)).await
    }

    /// Stops keeping `key` alive and removes its record as `how` says. A
    /// key not held here is deleted anyway with [`Removal::DeleteKey`].
    pub(crate) async fn remove(&self, key: &[u8], how: Removal) -> Result<(), GatewayError> {
        let slot = self.acquire(key);
        slot.perform(|reply| Op::Remove(how, reply)).await
    }
}

impl Drop for Registrations {
    fn drop(&mut self) {
        for entry in self.slots().values() {
            entry.slot.task.abort();
        }
    }
}

fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The task of one key: performs its operations in arrival order and,
/// while it holds a lease, what its [`KeeperMachine`] decides, until its
/// slot is forgotten (the operations channel closes) or it is aborted.
async fn run_slot(
    key: Vec<u8>,
    mut ops: mpsc::Receiver<Op>,
    mirror: Arc<AtomicI64>,
    ctx: Arc<KeeperCtx>,
) {
    let mut st = SlotState::default();
    let mut machine: Option<KeeperMachine> = None;
    let mut answered = ctx.client.answered();
    answered.borrow_and_update();
    let mut signal = true;
    loop {
        let due = machine
            .as_ref()
            .map(|m| tokio::time::Instant::from_std(m.due()));
        tokio::select! {
            op = ops.recv() => match op {
                None => return,
                Some(Op::Upsert(value, reply)) => {
                    let r = upsert(&ctx, &key, &mut st, &mirror, value).await;
                    if st.lease != 0 && machine.is_none() {
                        machine = Some(KeeperMachine::new(ctx.policy, now(), StdRng::from_entropy()));
                    }
                    let _ = reply.send(r);
                }
                Some(Op::Remove(how, reply)) => {
                    machine = None;
                    let r = remove(&ctx, &key, &mut st, &mirror, how).await;
                    let _ = reply.send(r);
                }
            },
            () = sleep_until(due), if due.is_some() => {
                if let Some(m) = machine.as_mut() {
                    keeper_wake(&ctx, &key, &mut st, &mirror, m).await;
                }
            }
            changed = answered.changed(), if signal => match changed {
                Ok(()) => {
                    if let Some(m) = machine.as_mut() {
                        m.on_answered(now());
                    }
                }
                Err(_) => signal = false,
            },
        }
    }
}

async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// `upsert` on the key's own state: in place under a live lease, else
/// under a new one.
async fn upsert(
    ctx: &KeeperCtx,
    key: &[u8],
    st: &mut SlotState,
    mirror: &AtomicI64,
    value: Vec<u8>,
) -> Result<(), GatewayError> {
    let client = &ctx.client;
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
    let lease = establish(client, key, &value, ctx.ttl_secs).await?;
    st.lease = lease;
    st.value = value;
    mirror.store(lease, Ordering::Release);
    Ok(())
}

/// `remove` on the key's own state: the keeper has stopped already.
async fn remove(
    ctx: &KeeperCtx,
    key: &[u8],
    st: &mut SlotState,
    mirror: &AtomicI64,
    how: Removal,
) -> Result<(), GatewayError> {
    mirror.store(0, Ordering::Release);
    let lease = std::mem::take(&mut st.lease);
    let client = &ctx.client;
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
    Ok(())
}

/// The keeper's wake-up: a round when the machine asks for one, then what
/// it decides (re-register, report down).
async fn keeper_wake(
    ctx: &KeeperCtx,
    key: &[u8],
    st: &mut SlotState,
    mirror: &AtomicI64,
    machine: &mut KeeperMachine,
) {
    if machine.on_wake(now()) != KeeperAction::Round || st.lease == 0 {
        return;
    }
    let lease = st.lease;
    let outcome = round(&ctx.client, key, lease).await;
    let failing_before = machine.failures();
    let mut action = machine.on_round(outcome, now());
    if let KeeperAction::Reregister(lost) = action {
        let result = reregister(ctx, key, st, mirror, lost).await;
        action = machine.on_reregistered(result, now());
    }
    if failing_before > 0 && machine.failures() == 0 {
        // The recovery line of the warning below (one per state change).
        tracing::info!(
            key = %lossy(key),
            failed_rounds = failing_before,
            "etcd keepalive answering again"
        );
    }
    if action == KeeperAction::ReportDown {
        // Warn once per state change (the first failure since the last
        // success); its retries log at debug.
        if machine.failures() <= 1 {
            tracing::warn!(key = %lossy(key), "etcd keepalive failing; probing etcd until it answers");
        } else {
            tracing::debug!(key = %lossy(key), failures = machine.failures(), "etcd keepalive still failing");
        }
        EtcdStats::bump(&ctx.stats.keepalive_failures);
        ctx.prober.want(Want::Answer(ctx.answer_cadence));
    }
}

/// One keepalive round: refresh the lease, then check the key.
async fn round(client: &EtcdClient, key: &[u8], lease: i64) -> RoundOutcome {
    match client.lease_keepalive(lease).await {
        Ok(Some(_)) => {}
        Ok(None) => return RoundOutcome::LeaseGone,
        Err(e) => {
            // Per round: debug; the keeper's report of the state change warns.
            tracing::debug!(key = %lossy(key), error = %e, "etcd keepalive failed");
            return RoundOutcome::Failed(e.class());
        }
    }
    match client.get(key).await {
        Ok(r) if r.kvs.is_empty() => RoundOutcome::KeyVanished,
        Ok(_) => RoundOutcome::Alive,
        Err(e) => RoundOutcome::Failed(e.class()),
    }
}

/// Redoes the registration found lost, with the key's current value.
async fn reregister(
    ctx: &KeeperCtx,
    key: &[u8],
    st: &mut SlotState,
    mirror: &AtomicI64,
    lost: Lost,
) -> Result<(), ErrorClass> {
    let seen = st.lease;
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
    let failed = |e: GatewayError| {
        tracing::warn!(key = %lossy(key), error = %e, "etcd re-registration failed");
        e.class()
    };
    let fresh = ctx
        .client
        .lease_grant(ctx.ttl_secs)
        .await
        .map_err(failed)?
        .id;
    // The new lease is the slot's before the record is visible under it:
    // whoever sees the record back sees its lease in `lease_of` too.
    mirror.store(fresh, Ordering::Release);
    if let Err(e) = ctx.client.put(key, &st.value, fresh).await {
        mirror.store(seen, Ordering::Release);
        revoke_quietly(&ctx.client, fresh).await;
        return Err(failed(e));
    }
    st.lease = fresh;
    EtcdStats::bump(&ctx.stats.reregistrations);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EtcdConfig;
    use crate::harness::EtcdServer;
    use crate::registry::keeper_ctx;

    fn registrations(endpoint: &str) -> Registrations {
        let config = EtcdConfig::new([endpoint]);
        let client = EtcdClient::new(
            config.endpoints.clone(),
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap();
        Registrations::new(keeper_ctx(Arc::new(client), &config, Arc::default()))
    }

    #[tokio::test]
    async fn a_slot_goes_when_its_last_use_ends_however_many_arcs_survive() {
        let regs = registrations("http://127.0.0.1:1");
        // An aborted keeper whose task is not dropped yet still holds an Arc.
        let first = regs.acquire(b"k");
        let keeper_arc = first.slot.clone();
        let second = regs.acquire(b"k");
        assert!(Arc::ptr_eq(&first.slot, &second.slot), "one slot per key");
        drop(first);
        assert_eq!(regs.len(), 1, "another operation still uses it");
        drop(second);
        assert_eq!(regs.len(), 0, "no use and no lease: forgotten");
        // A use of a slot already replaced does not touch its successor.
        let fresh = regs.acquire(b"k");
        let stale = SlotUse {
            owner: &regs,
            slot: keeper_arc,
        };
        drop(stale);
        assert_eq!(regs.len(), 1);
        // A slot holding a lease stays after its last use.
        fresh.lease.store(7, Ordering::Release);
        drop(fresh);
        assert_eq!(regs.lease_of(b"k"), Some(7));
    }

    #[tokio::test]
    async fn failed_registrations_leave_no_slot_behind() {
        let regs = registrations("http://127.0.0.1:1");
        for n in 0..5 {
            let key = format!("k{n}");
            assert!(regs.upsert(key.as_bytes(), b"v".to_vec()).await.is_err());
        }
        assert_eq!(regs.len(), 0);
    }

    #[tokio::test]
    async fn registered_then_removed_keys_leave_no_slot_behind() {
        let etcd = EtcdServer::start().await.unwrap();
        let regs = registrations(&etcd.endpoint());
        let keys: Vec<String> = (0..20)
            .map(|n| format!("{}/k{n}", crate::harness::unique_prefix()))
            .collect();
        for k in &keys {
            regs.upsert(k.as_bytes(), b"v".to_vec()).await.unwrap();
        }
        assert_eq!(regs.len(), 20);
        // Two operations on one key at once, then removals: every keeper
        // is aborted (its task may outlive the call) and every slot goes.
        let (a, b) = tokio::join!(
            regs.upsert(keys[0].as_bytes(), b"w".to_vec()),
            regs.remove(keys[0].as_bytes(), Removal::DeleteKey)
        );
        a.unwrap();
        b.unwrap();
        for k in &keys {
            regs.remove(k.as_bytes(), Removal::DeleteKey).await.unwrap();
        }
        assert_eq!(regs.len(), 0);
        assert_eq!(regs.lease_of(keys[3].as_bytes()), None);
    }
}
