//! Engine counters that tests and operators read: live actors, fetches and
//! timers under way, and failure metrics. Liveness counters are kept by drop
//! guards, so a cancelled future or a stopped actor can never leave a count
//! behind.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use steadfast_core::{FetchError, TombstoneCounts};

/// Shared counters of one engine.
#[derive(Debug, Default)]
pub struct EngineStats {
    pub(crate) actors_alive: AtomicI64,
    pub(crate) resolvers_alive: AtomicI64,
    pub(crate) directories_alive: AtomicI64,
    pub(crate) flights_in_flight: AtomicI64,
    pub(crate) timers_pending: AtomicI64,
    pub(crate) watches_active: AtomicI64,
    pub(crate) resyncs_scheduled: AtomicI64,
    pub(crate) fetch_attempts: AtomicU64,
    pub(crate) fetch_failures: AtomicU64,
    fetch_failures_by_kind: [AtomicU64; FetchError::LABELS.len()],
    pub(crate) fetch_hedged: AtomicU64,
    pub(crate) fetch_deadlines: AtomicU64,
    pub(crate) handler_panics: AtomicU64,
    pub(crate) flights_started: AtomicU64,
    pub(crate) timers_fired: AtomicU64,
    pub(crate) snapshots_received: AtomicU64,
    pub(crate) updates_published: AtomicU64,
    pub(crate) watch_failures: AtomicU64,
    pub(crate) register_failures: AtomicU64,
    pub(crate) restarts: AtomicU64,
    pub(crate) missed_notifications: AtomicU64,
    pub(crate) registry_panics: AtomicU64,
    pub(crate) instances_held: AtomicU64,
    pub(crate) older_events_ignored: AtomicU64,
    pub(crate) resets_requested: AtomicU64,
    pub(crate) queue_collapses: AtomicU64,
    pub(crate) demand_probes: AtomicU64,
    pub(crate) demand_fetches: AtomicU64,
    pub(crate) linger_unsubscribes: AtomicU64,
    pub(crate) tombstones_written: AtomicU64,
    pub(crate) closing_readds_vetoed: AtomicU64,
    pub(crate) tombstones_cleared_by_restart: AtomicU64,
    pub(crate) tombstones_cleared_by_removal: AtomicU64,
    pub(crate) closings_ignored: AtomicU64,
    pub(crate) tombstones_expired: AtomicU64,
    pub(crate) vetoed_readds_replayed: AtomicU64,
    pub(crate) lookups: AtomicU64,
    pub(crate) lookup_registry_calls: AtomicU64,
    pub(crate) lookup_watch_answers: AtomicU64,
    pub(crate) lookup_cache_hits: AtomicU64,
    pub(crate) lookup_stale_answers: AtomicU64,
    pub(crate) lookup_throttled: AtomicU64,
    pub(crate) lookup_unavailable: AtomicU64,
    pub(crate) lookup_not_found: AtomicU64,
    pub(crate) lookup_too_stale: AtomicU64,
    pub(crate) lookup_evictions: AtomicU64,
    pub(crate) snapshot_loaded: AtomicU64,
    pub(crate) snapshot_rejected: AtomicU64,
    pub(crate) snapshot_written: AtomicU64,
    pub(crate) snapshot_write_failures: AtomicU64,
    pub(crate) mapping_write_failures: AtomicU64,
    pub(crate) mapping_read_failures: AtomicU64,
    pub(crate) mapping_attach_failures: AtomicU64,
    pub(crate) registrar_retries: AtomicU64,
    pub(crate) session_losses: AtomicU64,
    pub(crate) unregister_failures: AtomicU64,
    pub(crate) metadata_cache_hits: AtomicU64,
}

/// A point-in-time copy of [`EngineStats`] (named apart from the etcd
/// backend's `EtcdStatsSnapshot`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStatsSnapshot {
    /// Actors currently alive (registry, cache, resolvers, directories, engine).
    pub actors_alive: i64,
    /// Resolver actors alive.
    pub resolvers_alive: i64,
    /// Directory actors alive.
    pub directories_alive: i64,
    /// Metadata fetch flights under way (spawned and not finished or dropped).
    pub flights_in_flight: i64,
    /// Timers armed and not yet fired or cancelled (retries and re-subscribes).
    pub timers_pending: i64,
    /// Registry watch streams open.
    pub watches_active: i64,
    /// Resync timers armed (periodic full re-reads of subscribed apps; not
    /// counted in `timers_pending`).
    pub resyncs_scheduled: i64,
    /// Calls made to the metadata fetcher (one per candidate tried).
    pub fetch_attempts: u64,
    /// Fetcher calls that failed (each counted when it fails; a call still
    /// pending at the fetch deadline fails then, as a timeout).
    pub fetch_failures: u64,
    /// Fetcher calls started by the hedge (nothing had answered within the
    /// hedge delay).
    pub fetch_hedged: u64,
    /// Flights that ended at their whole-fetch deadline.
    pub fetch_deadlines: u64,
    /// Actor handlers that panicked; each one restarted its actor.
    pub handler_panics: u64,
    /// Flights started (one per (app, revision) at a time, shared by listeners).
    pub flights_started: u64,
    /// Timers that fired.
    pub timers_fired: u64,
    /// Registry snapshots received.
    pub snapshots_received: u64,
    /// Directory updates published by resolvers.
    pub updates_published: u64,
    /// Registry watch failures: failed opens, `Err` items (the stream is
    /// kept) and ended streams (re-established).
    pub watch_failures: u64,
    /// Failed register/unregister attempts.
    pub register_failures: u64,
    /// Actor restarts under supervision.
    pub restarts: u64,
    /// Missed registry notifications found by resyncs, counted per instance
    /// that differed from the pushed state (added, removed or changed), as
    /// the etcd backend counts its re-reads; the listed state was applied.
    pub missed_notifications: u64,
    /// Registry calls or watch streams that panicked (contained).
    pub registry_panics: u64,
    /// Registry events (or listings) not newer than the state held, ignored
    /// so that a replay of an older state is never served.
    pub older_events_ignored: u64,
    /// Resets asked for after a change that did not follow the version a
    /// stage held (a lost notification or delivery): re-reads of the
    /// registry by the subscription, whole states asked of the registry
    /// actor by a resolver or of a resolver by a directory (one per gap, at
    /// most one per second per receiver).
    pub resets_requested: u64,
    /// Times a consumer fell so far behind that its queue of changes was
    /// replaced by one Reset of the producer's state.
    pub queue_collapses: u64,
    /// Instances held after a mass expiry right after a registry recovery.
    pub instances_held: u64,
    /// Demand-driven re-resolves a directory asked of its resolvers because
    /// callers waited on it while its metadata was unresolved (at most one
    /// per `min_probe_interval` per directory).
    pub demand_probes: u64,
    /// Metadata fetches started early by those demands (a revision already
    /// being fetched is not fetched twice).
    pub demand_fetches: u64,
    /// References unsubscribed because their last handle was dropped and
    /// `unsubscribe_linger` passed.
    pub linger_unsubscribes: u64,
    /// Closing tombstones written (a directory held an endpoint that
    /// announced closing, in the registry or through a failed call).
    pub tombstones_written: u64,
    /// Re-adds vetoed by a tombstone (same incarnation as the closed one).
    pub closing_readds_vetoed: u64,
    /// Tombstones cleared by a re-add of another incarnation (a restart).
    pub tombstones_cleared_by_restart: u64,
    /// Tombstones cleared by the registry removing the instance.
    pub tombstones_cleared_by_removal: u64,
    /// Closing notices that wrote no tombstone (endpoint not held, another
    /// incarnation, another directory).
    pub closings_ignored: u64,
    /// Tombstones expired.
    pub tombstones_expired: u64,
    /// Vetoed endpoints re-added when their tombstone expired.
    pub vetoed_readds_replayed: u64,
    /// One-shot instance queries (`Engine::instances`).
    pub lookups: u64,
    /// Registry `list` calls made by the lookup cache (one per app per flight, shared by its
    /// concurrent callers).
    pub lookup_registry_calls: u64,
    /// Queries answered from the live watch of a subscribed app (no registry call).
    pub lookup_watch_answers: u64,
    /// Queries answered fresh from the lookup cache (no registry call).
    pub lookup_cache_hits: u64,
    /// Queries answered with a stale copy (the registry could not confirm it, or the app's watch
    /// is stale).
    pub lookup_stale_answers: u64,
    /// Queries refused `Throttled`: no copy held and the app's registry call was less than
    /// `min_retry_interval` ago.
    pub lookup_throttled: u64,
    /// Queries refused `Unavailable`: the registry call failed and no copy was held.
    pub lookup_unavailable: u64,
    /// Queries answered `NotFound` (the registry listed no instance).
    pub lookup_not_found: u64,
    /// Queries refused `TooStale` (the copy was older than `max_staleness`).
    pub lookup_too_stale: u64,
    /// Apps dropped from the lookup cache to keep within its capacity.
    pub lookup_evictions: u64,
    /// Disk snapshots served at a cold start (an app seeded from its
    /// snapshot before the registry delivered a state).
    pub snapshot_loaded: u64,
    /// Snapshot files refused (corrupt, truncated, foreign, unsupported
    /// version, too large, too old, unreadable); never served.
    pub snapshot_rejected: u64,
    /// Snapshot files written (atomically).
    pub snapshot_written: u64,
    /// Snapshot writes that failed (io, deadline, too large).
    pub snapshot_write_failures: u64,
    /// Failed interface -> app mapping writes at export (one per interface
    /// and attempt; retried until they land).
    pub mapping_write_failures: u64,
    /// Interface mapping watch failures: failed opens, `Err` items (the
    /// stream is kept) and ended streams (re-watched).
    pub mapping_read_failures: u64,
    /// Apps of a followed mapping that could not be attached (no resolver
    /// could be had); each is retried at the interface's next mapping event.
    pub mapping_attach_failures: u64,
    /// Registrar retries armed after a failed register or unregister.
    pub registrar_retries: u64,
    /// Registry session losses seen (each re-registers and re-subscribes
    /// everything, spread).
    pub session_losses: u64,
    /// Failed unregister calls (each retried by the registrar).
    pub unregister_failures: u64,
    /// Metadata requests of resolvers answered from the shared cache (no
    /// fetcher call).
    pub metadata_cache_hits: u64,
}

/// The former name of [`EngineStatsSnapshot`].
#[deprecated(note = "renamed EngineStatsSnapshot (the etcd backend has its own EtcdStatsSnapshot)")]
pub type StatsSnapshot = EngineStatsSnapshot;

impl EngineStats {
    /// Copies every counter.
    pub fn snapshot(&self) -> EngineStatsSnapshot {
        let i = |a: &AtomicI64| a.load(Ordering::SeqCst);
        let u = |a: &AtomicU64| a.load(Ordering::SeqCst);
        EngineStatsSnapshot {
            actors_alive: i(&self.actors_alive),
            resolvers_alive: i(&self.resolvers_alive),
            directories_alive: i(&self.directories_alive),
            flights_in_flight: i(&self.flights_in_flight),
            timers_pending: i(&self.timers_pending),
            watches_active: i(&self.watches_active),
            resyncs_scheduled: i(&self.resyncs_scheduled),
            fetch_attempts: u(&self.fetch_attempts),
            fetch_failures: u(&self.fetch_failures),
            fetch_hedged: u(&self.fetch_hedged),
            fetch_deadlines: u(&self.fetch_deadlines),
            handler_panics: u(&self.handler_panics),
            flights_started: u(&self.flights_started),
            timers_fired: u(&self.timers_fired),
            snapshots_received: u(&self.snapshots_received),
            updates_published: u(&self.updates_published),
            watch_failures: u(&self.watch_failures),
            register_failures: u(&self.register_failures),
            restarts: u(&self.restarts),
            missed_notifications: u(&self.missed_notifications),
            registry_panics: u(&self.registry_panics),
            instances_held: u(&self.instances_held),
            older_events_ignored: u(&self.older_events_ignored),
            resets_requested: u(&self.resets_requested),
            queue_collapses: u(&self.queue_collapses),
            demand_probes: u(&self.demand_probes),
            demand_fetches: u(&self.demand_fetches),
            linger_unsubscribes: u(&self.linger_unsubscribes),
            tombstones_written: u(&self.tombstones_written),
            closing_readds_vetoed: u(&self.closing_readds_vetoed),
            tombstones_cleared_by_restart: u(&self.tombstones_cleared_by_restart),
            tombstones_cleared_by_removal: u(&self.tombstones_cleared_by_removal),
            closings_ignored: u(&self.closings_ignored),
            tombstones_expired: u(&self.tombstones_expired),
            vetoed_readds_replayed: u(&self.vetoed_readds_replayed),
            lookups: u(&self.lookups),
            lookup_registry_calls: u(&self.lookup_registry_calls),
            lookup_watch_answers: u(&self.lookup_watch_answers),
            lookup_cache_hits: u(&self.lookup_cache_hits),
            lookup_stale_answers: u(&self.lookup_stale_answers),
            lookup_throttled: u(&self.lookup_throttled),
            lookup_unavailable: u(&self.lookup_unavailable),
            lookup_not_found: u(&self.lookup_not_found),
            lookup_too_stale: u(&self.lookup_too_stale),
            lookup_evictions: u(&self.lookup_evictions),
            snapshot_loaded: u(&self.snapshot_loaded),
            snapshot_rejected: u(&self.snapshot_rejected),
            snapshot_written: u(&self.snapshot_written),
            snapshot_write_failures: u(&self.snapshot_write_failures),
            mapping_write_failures: u(&self.mapping_write_failures),
            mapping_read_failures: u(&self.mapping_read_failures),
            mapping_attach_failures: u(&self.mapping_attach_failures),
            registrar_retries: u(&self.registrar_retries),
            session_losses: u(&self.session_losses),
            unregister_failures: u(&self.unregister_failures),
            metadata_cache_hits: u(&self.metadata_cache_hits),
        }
    }

    /// Failed fetcher calls per [`FetchError::label`], for metrics: a
    /// provider serving malformed or mismatched metadata shows up as such.
    pub fn fetch_failures_by_kind(&self) -> Vec<(&'static str, u64)> {
        FetchError::LABELS
            .iter()
            .zip(&self.fetch_failures_by_kind)
            .map(|(l, c)| (*l, c.load(Ordering::SeqCst)))
            .collect()
    }

    pub(crate) fn record_fetch_failure(&self, err: &FetchError) {
        Self::bump(&self.fetch_failures);
        if let Some(i) = FetchError::LABELS.iter().position(|l| *l == err.label()) {
            Self::bump(&self.fetch_failures_by_kind[i]);
        }
    }

    /// Adds what a directory's tombstones did.
    pub(crate) fn record_tombstones(&self, c: &TombstoneCounts) {
        for (counter, n) in [
            (&self.tombstones_written, c.written),
            (&self.closing_readds_vetoed, c.vetoed),
            (&self.tombstones_cleared_by_restart, c.cleared_by_restart),
            (&self.tombstones_cleared_by_removal, c.cleared_by_removal),
            (&self.closings_ignored, c.ignored),
            (&self.tombstones_expired, c.expired),
            (&self.vetoed_readds_replayed, c.replayed),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::SeqCst);
            }
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::SeqCst);
    }
}

/// Which liveness counter a [`LiveGuard`] holds.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Live {
    Actor,
    Resolver,
    Directory,
    Flight,
    Timer,
    Watch,
    Resync,
}

/// Increments a liveness counter on creation and decrements it on drop.
#[derive(Debug)]
pub(crate) struct LiveGuard {
    stats: Arc<EngineStats>,
    kind: Live,
}

impl LiveGuard {
    pub(crate) fn new(stats: &Arc<EngineStats>, kind: Live) -> Self {
        Self::counter(stats, kind).fetch_add(1, Ordering::SeqCst);
        if matches!(kind, Live::Resolver | Live::Directory) {
            stats.actors_alive.fetch_add(1, Ordering::SeqCst);
        }
        Self {
            stats: stats.clone(),
            kind,
        }
    }

    fn counter(stats: &EngineStats, kind: Live) -> &AtomicI64 {
        match kind {
            Live::Actor => &stats.actors_alive,
            Live::Resolver => &stats.resolvers_alive,
            Live::Directory => &stats.directories_alive,
            Live::Flight => &stats.flights_in_flight,
            Live::Timer => &stats.timers_pending,
            Live::Watch => &stats.watches_active,
            Live::Resync => &stats.resyncs_scheduled,
        }
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        Self::counter(&self.stats, self.kind).fetch_sub(1, Ordering::SeqCst);
        if matches!(self.kind, Live::Resolver | Live::Directory) {
            self.stats.actors_alive.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
