//! The pool machine: client states, acquire/release, idle scan with
//! re-check, drain deadlines, removal by identity.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::owners::{OwnerId, Owners};

/// One pooled client's identity, unique for the machine's life: two clients
/// built for the same address have different ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// Where a client is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientState {
    /// Serving: new calls may take it.
    Active,
    /// Its endpoint was dropped: no new calls; closed once nothing is in
    /// flight, or force-closed at `deadline` (`None`: the drain timeout
    /// overflowed the clock, never forced).
    Draining {
        /// When the calls still in flight are cut.
        deadline: Option<Instant>,
    },
    /// Being closed (or closed); the entry goes when the close finishes.
    Closed,
}

/// The machine's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolPolicy {
    /// Unused this long with nothing in flight: reaped (`ZERO`: never).
    pub idle_timeout: Duration,
    /// A draining client still in use is force-closed this long after its
    /// endpoint was dropped.
    pub drain_timeout: Duration,
}

impl Default for PoolPolicy {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(180),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// What the machine counted since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Clients built (installed).
    pub built: u64,
    /// Idle clients closed by the scan.
    pub reaped: u64,
    /// Scan candidates found in use again just before their close, and kept.
    pub rescued: u64,
    /// Acquires that found their address's client not Active and built a
    /// fresh one.
    pub refused_acquires: u64,
    /// Draining clients closed once nothing was in flight.
    pub drained: u64,
    /// Draining clients closed at the drain deadline with calls in flight.
    pub forced_closes: u64,
    /// Closes that failed (counted, the others went on).
    pub close_failures: u64,
}

impl PoolCounters {
    /// Every counter with its metric family and help: the one list the
    /// exports read (`steadfast-metrics`).
    pub fn rows(&self) -> [(&'static str, &'static str, u64); 7] {
        [
            ("pool_clients_built", "Pooled clients built", self.built),
            (
                "pool_clients_reaped",
                "Idle pooled clients closed by the reaper",
                self.reaped,
            ),
            (
                "pool_clients_rescued",
                "Reaper candidates used again just before their close, and kept",
                self.rescued,
            ),
            (
                "pool_refused_acquires",
                "Acquires that found their client not active",
                self.refused_acquires,
            ),
            (
                "pool_clients_drained",
                "Draining clients closed once idle",
                self.drained,
            ),
            (
                "pool_forced_closes",
                "Draining clients force-closed at the drain timeout",
                self.forced_closes,
            ),
            (
                "pool_close_failures",
                "Client closes that failed or timed out",
                self.close_failures,
            ),
        ]
    }

    /// Adds `other`'s counts (the stripes of one pool), saturating.
    pub fn add(&mut self, other: &PoolCounters) {
        let sum = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        sum(&mut self.built, other.built);
        sum(&mut self.reaped, other.reaped);
        sum(&mut self.rescued, other.rescued);
        sum(&mut self.refused_acquires, other.refused_acquires);
        sum(&mut self.drained, other.drained);
        sum(&mut self.forced_closes, other.forced_closes);
        sum(&mut self.close_failures, other.close_failures);
    }
}

/// A call's hold on a client, as the machine hands it out.
#[derive(Clone, Debug)]
pub struct Held<C> {
    /// The client's identity (give it back to [`PoolMachine::release`]).
    pub id: ClientId,
    /// The endpoint address.
    pub address: Arc<str>,
    /// The client.
    pub client: C,
}

/// The answer to [`PoolMachine::acquire`].
#[derive(Debug)]
pub enum Acquire<C> {
    /// An Active client, now counting this call in flight.
    Held(Held<C>),
    /// No Active client for the address (none yet, or it is draining or
    /// closing: the acquire was refused): build one and
    /// [`install`](PoolMachine::install) it.
    Build,
}

/// Why a client is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Idle past the idle timeout, nothing in flight.
    Idle,
    /// Its endpoint was dropped and nothing is in flight any more.
    Drained,
    /// Its endpoint was dropped and the drain deadline passed with calls in
    /// flight: those calls must fail "closed while in use".
    Forced,
    /// Built concurrently with another client for the same address and
    /// never used.
    Duplicate,
}

/// A close for the shell to perform, then report with
/// [`PoolMachine::close_finished`].
#[derive(Clone, Debug)]
pub struct Close<C> {
    /// The client's identity.
    pub id: ClientId,
    /// The endpoint address.
    pub address: Arc<str>,
    /// The client to close.
    pub client: C,
    /// Why.
    pub reason: CloseReason,
}

#[derive(Debug)]
struct Entry<C> {
    address: Arc<str>,
    client: C,
    state: ClientState,
    in_flight: u64,
    last_use: Instant,
    /// Its address was unlisted by every owner (it drains or drained).
    unlisted: bool,
}

impl<C> Entry<C> {
    /// Idle for reaping: Active, nothing in flight, unused for `timeout`.
    fn is_idle(&self, now: Instant, timeout: Duration) -> bool {
        self.state == ClientState::Active
            && self.in_flight == 0
            && now.saturating_duration_since(self.last_use) >= timeout
    }
}

/// The pool's decisions. See the [module docs](crate::pool).
#[derive(Debug)]
pub struct PoolMachine<C> {
    policy: PoolPolicy,
    entries: FxHashMap<ClientId, Entry<C>>,
    by_address: FxHashMap<Arc<str>, ClientId>,
    owners: Owners,
    next_id: u64,
    /// Ids go up by this much (a shell striping addresses over several
    /// machines gives each its own residue, so ids stay unique pool-wide).
    id_step: u64,
    counters: PoolCounters,
}

impl<C: Clone> PoolMachine<C> {
    /// An empty pool.
    pub fn new(policy: PoolPolicy) -> Self {
        Self::stripe(policy, 0, 1)
    }

    /// Stripe `index` of `count` machines sharing one id space: its client
    /// ids are `index + 1`, `index + 1 + count`, ... (unique across the
    /// stripes).
    pub fn stripe(policy: PoolPolicy, index: u64, count: u64) -> Self {
        let step = count.max(1);
        Self {
            policy,
            entries: FxHashMap::default(),
            by_address: FxHashMap::default(),
            owners: Owners::default(),
            next_id: (index % step).wrapping_sub(step).wrapping_add(1),
            id_step: step,
            counters: PoolCounters::default(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> PoolPolicy {
        self.policy
    }

    /// Takes `address`'s client for one call, if it is Active (the call
    /// counts in flight and stamps last use); otherwise [`Acquire::Build`].
    pub fn acquire(&mut self, address: &str, now: Instant) -> Acquire<C> {
        let acquired = self.acquire_quiet(address, now);
        if matches!(acquired, Acquire::Build) && self.by_address.contains_key(address) {
            // A client is there but not Active: the acquire was refused.
            self.counters.refused_acquires = self.counters.refused_acquires.saturating_add(1);
        }
        acquired
    }

    fn hold(id: ClientId, entry: &mut Entry<C>, now: Instant) -> Held<C> {
        entry.in_flight = entry.in_flight.saturating_add(1);
        entry.last_use = now;
        Held {
            id,
            address: entry.address.clone(),
            client: entry.client.clone(),
        }
    }

    /// Installs a client built after [`Acquire::Build`] and takes it for the
    /// call. If another Active client for `address` was installed meanwhile,
    /// that one is taken and the new one is returned for closing
    /// ([`CloseReason::Duplicate`]).
    pub fn install(
        &mut self,
        address: &str,
        client: C,
        now: Instant,
    ) -> (Held<C>, Option<Close<C>>) {
        if let Acquire::Held(held) = self.acquire_quiet(address, now) {
            let id = self.fresh_id();
            let duplicate = Close {
                id,
                address: held.address.clone(),
                client,
                reason: CloseReason::Duplicate,
            };
            return (held, Some(duplicate));
        }
        // The address's client was refused because it drains or closes and
        // no owner lists the address any more: a call leased the endpoint
        // just before it left. The new client serves that call and drains
        // with it, rather than living on, unlisted, until the idle reaper.
        let dropped = self
            .by_address
            .get(address)
            .and_then(|id| self.entries.get(id))
            .is_some_and(|e| e.unlisted)
            && !self.owners.lists(address);
        let state = if dropped {
            ClientState::Draining {
                deadline: now.checked_add(self.policy.drain_timeout),
            }
        } else {
            ClientState::Active
        };
        let id = self.fresh_id();
        let address: Arc<str> = Arc::from(address);
        let mut entry = Entry {
            address: address.clone(),
            client,
            state,
            in_flight: 0,
            last_use: now,
            unlisted: dropped,
        };
        let held = Self::hold(id, &mut entry, now);
        self.entries.insert(id, entry);
        self.by_address.insert(address, id);
        self.counters.built = self.counters.built.saturating_add(1);
        (held, None)
    }

    /// Like [`acquire`](Self::acquire) without counting a refusal.
    fn acquire_quiet(&mut self, address: &str, now: Instant) -> Acquire<C> {
        let id = self.by_address.get(address).copied();
        match id.and_then(|id| self.entries.get_mut(&id).map(|e| (id, e))) {
            Some((id, entry)) if entry.state == ClientState::Active => {
                Acquire::Held(Self::hold(id, entry, now))
            }
            _ => Acquire::Build,
        }
    }

    fn fresh_id(&mut self) -> ClientId {
        self.next_id = self.next_id.wrapping_add(self.id_step);
        ClientId(self.next_id)
    }

    /// The call holding client `id` ended: stamps last use, and closes a
    /// draining client whose last call this was.
    pub fn release(&mut self, id: ClientId, now: Instant) -> Option<Close<C>> {
        let entry = self.entries.get_mut(&id)?;
        entry.in_flight = entry.in_flight.saturating_sub(1);
        entry.last_use = now;
        if matches!(entry.state, ClientState::Draining { .. }) && entry.in_flight == 0 {
            self.counters.drained = self.counters.drained.saturating_add(1);
            return Some(Self::closing(id, entry, CloseReason::Drained));
        }
        None
    }

    fn closing(id: ClientId, entry: &mut Entry<C>, reason: CloseReason) -> Close<C> {
        entry.state = ClientState::Closed;
        Close {
            id,
            address: entry.address.clone(),
            client: entry.client.clone(),
            reason,
        }
    }

    /// The idle scan: Active clients with nothing in flight, unused for the
    /// idle timeout, in id order. Changes nothing: close them one by one
    /// with [`begin_close`](Self::begin_close), which checks again.
    pub fn scan(&self, now: Instant) -> Vec<ClientId> {
        let timeout = self.policy.idle_timeout;
        if timeout.is_zero() {
            return Vec::new();
        }
        let mut idle: Vec<ClientId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.is_idle(now, timeout))
            .map(|(id, _)| *id)
            .collect();
        idle.sort();
        idle
    }

    /// Just before closing scan candidate `id`: if it is still idle, it
    /// leaves Active (acquires are refused from now on) and the close is
    /// returned; if it was used since the scan, it stays Active (rescued)
    /// and `None` is returned.
    pub fn begin_close(&mut self, id: ClientId, now: Instant) -> Option<Close<C>> {
        let timeout = self.policy.idle_timeout;
        let entry = self.entries.get_mut(&id)?;
        if entry.state != ClientState::Active {
            return None;
        }
        if timeout.is_zero() || !entry.is_idle(now, timeout) {
            self.counters.rescued = self.counters.rescued.saturating_add(1);
            return None;
        }
        self.counters.reaped = self.counters.reaped.saturating_add(1);
        Some(Self::closing(id, entry, CloseReason::Idle))
    }

    /// A fresh owner of endpoint sets.
    pub fn new_owner(&mut self) -> OwnerId {
        self.owners.new_owner()
    }

    /// `owner` now uses exactly `addresses` (empty: the owner is gone).
    /// Every address that no owner lists any more drains; the clients that
    /// can close at once (nothing in flight) are returned.
    pub fn sync_owner(
        &mut self,
        owner: OwnerId,
        addresses: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Vec<Close<C>> {
        let set: HashSet<String> = addresses.into_iter().collect();
        let mut closes = Vec::new();
        for address in self.owners.sync(owner, set) {
            if let Some(close) = self.drain(&address, now) {
                closes.push(close);
            }
        }
        closes
    }

    fn drain(&mut self, address: &str, now: Instant) -> Option<Close<C>> {
        let id = *self.by_address.get(address)?;
        let entry = self.entries.get_mut(&id)?;
        if entry.state != ClientState::Active {
            return None;
        }
        entry.unlisted = true;
        if entry.in_flight == 0 {
            self.counters.drained = self.counters.drained.saturating_add(1);
            return Some(Self::closing(id, entry, CloseReason::Drained));
        }
        entry.state = ClientState::Draining {
            deadline: now.checked_add(self.policy.drain_timeout),
        };
        None
    }

    /// Force-closes the draining clients whose deadline passed with calls
    /// still in flight (those calls must fail "closed while in use").
    pub fn poll_deadlines(&mut self, now: Instant) -> Vec<Close<C>> {
        let mut due: Vec<ClientId> = self
            .entries
            .iter()
            .filter(
                |(_, e)| matches!(e.state, ClientState::Draining { deadline: Some(d) } if d <= now),
            )
            .map(|(id, _)| *id)
            .collect();
        due.sort();
        let mut closes = Vec::with_capacity(due.len());
        for id in due {
            if let Some(entry) = self.entries.get_mut(&id) {
                self.counters.forced_closes = self.counters.forced_closes.saturating_add(1);
                closes.push(Self::closing(id, entry, CloseReason::Forced));
            }
        }
        closes
    }

    /// The earliest drain deadline, for the shell's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter_map(|e| match e.state {
                ClientState::Draining { deadline } => deadline,
                _ => None,
            })
            .min()
    }

    /// The close of client `id` finished (`ok`: it succeeded). Removes the
    /// entry by identity: the address mapping goes only if it still names
    /// `id`, never a client rebuilt under the same address. Returns the
    /// entry's client, for the shell to drop outside its lock.
    pub fn close_finished(&mut self, id: ClientId, ok: bool) -> Option<C> {
        if !ok {
            self.counters.close_failures = self.counters.close_failures.saturating_add(1);
        }
        let entry = self.entries.remove(&id)?;
        if self.by_address.get(&entry.address) == Some(&id) {
            self.by_address.remove(&entry.address);
        }
        Some(entry.client)
    }

    /// The state of client `id` (`None`: gone).
    pub fn state(&self, id: ClientId) -> Option<ClientState> {
        self.entries.get(&id).map(|e| e.state)
    }

    /// Calls in flight on client `id`.
    pub fn in_flight(&self, id: ClientId) -> u64 {
        self.entries.get(&id).map_or(0, |e| e.in_flight)
    }

    /// How many clients are Active.
    pub fn active(&self) -> usize {
        self.count(|s| s == ClientState::Active)
    }

    /// How many clients are Draining.
    pub fn draining(&self) -> usize {
        self.count(|s| matches!(s, ClientState::Draining { .. }))
    }

    fn count(&self, f: impl Fn(ClientState) -> bool) -> usize {
        self.entries.values().filter(|e| f(e.state)).count()
    }

    /// The counters.
    pub fn counters(&self) -> PoolCounters {
        self.counters
    }
}
