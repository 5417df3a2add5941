//! Engine counters that tests and operators read: live actors, fetches and
//! timers under way, and failure metrics. Liveness counters are kept by drop
//! guards, so a cancelled future or a stopped actor can never leave a count
//! behind.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use steadfast_core::{FetchError, TombstoneCounts};

steadfast_core::counter_table! {
    /// Shared counters of one engine (declared once, in the table of
    /// [`ENGINE_COUNTERS`]).
    pub struct EngineStats {
        fetch_failures_by_kind: [AtomicU64; FetchError::LABELS.len()],
    }
    /// A point-in-time copy of the engine's counters (named apart from the
    /// etcd backend's `EtcdStatsSnapshot`).
    pub struct EngineStatsSnapshot;
    /// Every engine counter and gauge, in snapshot order: the one table the
    /// snapshot, inspect and the Prometheus export are read from.
    pub const ENGINE_COUNTERS;
    rows {
    /// Actors currently alive (registry, cache, resolvers, directories, engine).
    gauge actors_alive: "actors", "Actors alive";
    /// Resolver actors alive.
    gauge resolvers_alive: "resolvers", "Resolver actors alive (one per provider app)";
    /// Directory actors alive.
    gauge directories_alive: "directories", "Directory actors alive (one per reference)";
    /// Metadata fetch flights under way (spawned and not finished or dropped).
    gauge flights_in_flight: "metadata_fetches_in_flight", "Metadata fetch flights under way";
    /// Timers armed and not yet fired or cancelled (retries, re-subscribes,
    /// fetch deadlines, lingers, tombstone expiries).
    gauge timers_pending: "retry_timers_pending", "Retry, re-subscribe and deadline timers armed, not yet fired";
    /// Registry watch streams open.
    gauge watches_active: "registry_watches", "Registry watch streams open";
    /// Resync timers armed (periodic full re-reads of subscribed apps; not
    /// counted in `timers_pending`).
    gauge resyncs_scheduled: "resync_timers_pending", "Periodic full re-read timers armed";
    /// Calls made to the metadata fetcher (one per candidate tried).
    counter fetch_attempts: "metadata_fetch_attempts", "Metadata fetcher calls (one per candidate tried, hedges included)";
    /// Fetcher calls that failed (each counted when it fails; a call still
    /// pending at the fetch deadline fails then, as a timeout).
    by_kind fetch_failures: "metadata_fetch_failures", "Failed metadata fetcher calls by error kind";
    /// Fetcher calls started by the hedge (nothing had answered within the
    /// hedge delay).
    counter fetch_hedged: "metadata_fetch_hedged", "Fetcher calls started by the hedge";
    /// Flights that ended at their whole-fetch deadline.
    counter fetch_deadlines: "metadata_fetch_deadlines", "Fetch flights that ended at their whole-fetch deadline";
    /// Actor handlers that panicked; each one restarted its actor.
    counter handler_panics: "handler_panics", "Actor handlers that panicked (contained, actor restarted)";
    /// Flights started (one per (app, revision) at a time, shared by listeners).
    counter flights_started: "metadata_flights", "Fetch flights started (one per app and revision at a time)";
    /// Timers that fired.
    counter timers_fired: "timers_fired", "Retry and re-subscribe timers that fired";
    /// Registry snapshots received.
    counter snapshots_received: "registry_snapshots", "Registry snapshots received";
    /// Directory updates published by resolvers.
    counter updates_published: "directory_updates", "Directory updates published by resolvers";
    /// Registry watch failures: failed opens, `Err` items (the stream is
    /// kept) and ended streams (re-established).
    counter watch_failures: "registry_watch_failures", "Registry watch failures (failed opens, error items, ended streams)";
    /// Failed register/unregister attempts.
    counter register_failures: "register_failures", "Failed register or unregister attempts";
    /// Actor restarts under supervision.
    counter restarts: "actor_restarts", "Actor restarts under supervision";
    /// Missed registry notifications found by resyncs, counted per instance
    /// that differed from the pushed state (added, removed or changed), as
    /// the etcd backend counts its re-reads; the listed state was applied.
    counter missed_notifications: "registry_missed_notifications", "Instances a resync found differing from the pushed state";
    /// Registry calls or watch streams that panicked (contained).
    counter registry_panics: "registry_panics", "Registry calls or streams that panicked (contained)";
    /// Registry events (or listings) not newer than the state held, ignored
    /// so that a replay of an older state is never served.
    counter older_events_ignored: "registry_older_events_ignored", "Registry events not newer than the state held";
    /// Resets asked for after a change that did not follow the version a
    /// stage held (a lost notification or delivery): re-reads of the
    /// registry by the subscription, whole states asked of the registry
    /// actor by a resolver or of a resolver by a directory (one per gap, at
    /// most one per second per receiver).
    counter resets_requested: "resets_requested", "Resets asked for after a change that did not follow the state held";
    /// Times a consumer fell so far behind that its queue of changes was
    /// replaced by one Reset of the producer's state.
    counter queue_collapses: "queue_collapses", "Change queues replaced by one Reset because their consumer fell behind";
    /// Instances held after a mass expiry right after a registry recovery.
    counter instances_held: "instances_held", "Instances held after a mass expiry right after a registry recovery";
    /// Demand-driven re-resolves a directory asked of its resolvers because
    /// callers waited on it while its metadata was unresolved (at most one
    /// per `min_probe_interval` per directory).
    counter demand_probes: "metadata_demand_probes", "Re-resolves asked because callers waited on unresolved metadata";
    /// Metadata fetches started early by those demands (a revision already
    /// being fetched is not fetched twice).
    counter demand_fetches: "metadata_demand_fetches", "Fetches started early because callers waited";
    /// References unsubscribed because their last handle was dropped and
    /// `unsubscribe_linger` passed.
    counter linger_unsubscribes: "linger_unsubscribes", "References unsubscribed after their last handle was dropped";
    /// Closing tombstones written (a directory held an endpoint that
    /// announced closing, in the registry or through a failed call).
    counter tombstones_written: "tombstones_written", "Closing tombstones written";
    /// Re-adds vetoed by a tombstone (same incarnation as the closed one).
    counter closing_readds_vetoed: "tombstone_vetoes", "Re-adds vetoed by a tombstone (same incarnation as the closed one)";
    /// Tombstones cleared by a re-add of another incarnation (a restart).
    counter tombstones_cleared_by_restart: "tombstones_cleared_by_restart", "Tombstones cleared by a re-add of another incarnation (a restart)";
    /// Tombstones cleared by the registry removing the instance.
    counter tombstones_cleared_by_removal: "tombstones_cleared_by_removal", "Tombstones cleared by the registry removing the instance";
    /// Closing notices that wrote no tombstone (endpoint not held, another
    /// incarnation, another directory).
    counter closings_ignored: "closings_ignored", "Closing notices that wrote no tombstone";
    /// Tombstones expired.
    counter tombstones_expired: "tombstones_expired", "Tombstones expired";
    /// Vetoed endpoints re-added when their tombstone expired.
    counter vetoed_readds_replayed: "vetoed_readds_replayed", "Vetoed endpoints re-added when their tombstone expired";
    /// One-shot instance queries (`Engine::instances`).
    counter lookups: "lookups", "One-shot instance queries";
    /// Registry `list` calls made by the lookup cache (one per app per flight, shared by its
    /// concurrent callers).
    counter lookup_registry_calls: "lookup_registry_calls", "Registry list calls made by the lookup cache";
    /// Queries answered from the live watch of a subscribed app (no registry call).
    counter lookup_watch_answers: "lookup_watch_answers", "Instance queries answered from a live watch";
    /// Queries answered fresh from the lookup cache (no registry call).
    counter lookup_cache_hits: "lookup_cache_hits", "Instance queries answered fresh from the lookup cache";
    /// Queries answered with a stale copy (the registry could not confirm it, or the app's watch
    /// is stale).
    counter lookup_stale_answers: "lookup_stale_answers", "Instance queries answered with a stale copy";
    /// Queries refused `Throttled`: no copy held and the app's registry call was less than
    /// `min_retry_interval` ago.
    counter lookup_throttled: "lookup_throttled", "Instance queries refused Throttled";
    /// Queries refused `Unavailable`: the registry call failed and no copy was held.
    counter lookup_unavailable: "lookup_unavailable", "Instance queries refused Unavailable";
    /// Queries answered `NotFound` (the registry listed no instance).
    counter lookup_not_found: "lookup_not_found", "Instance queries answered NotFound";
    /// Queries refused `TooStale` (the copy was older than `max_staleness`).
    counter lookup_too_stale: "lookup_too_stale", "Instance queries refused TooStale";
    /// Apps dropped from the lookup cache to keep within its capacity.
    counter lookup_evictions: "lookup_evictions", "Apps dropped from the lookup cache to keep within its capacity";
    /// Disk snapshots served at a cold start (an app seeded from its
    /// snapshot before the registry delivered a state).
    counter snapshot_loaded: "snapshot_loaded", "Disk snapshots served at a cold start";
    /// Snapshot files refused (corrupt, truncated, foreign, unsupported
    /// version, too large, too old, unreadable); never served.
    counter snapshot_rejected: "snapshot_rejected", "Snapshot files refused (never served)";
    /// Snapshot files written (atomically).
    counter snapshot_written: "snapshot_written", "Snapshot files written";
    /// Snapshot writes that failed (io, deadline, too large).
    counter snapshot_write_failures: "snapshot_write_failures", "Snapshot writes that failed";
    /// Failed interface -> app mapping writes at export (one per interface
    /// and attempt; retried until they land).
    counter mapping_write_failures: "mapping_write_failures", "Failed interface mapping writes at export";
    /// Interface mapping watch failures: failed opens, `Err` items (the
    /// stream is kept) and ended streams (re-watched).
    counter mapping_read_failures: "mapping_read_failures", "Interface mapping watch failures";
    /// Apps of a followed mapping that could not be attached (no resolver
    /// could be had); each is retried at the interface's next mapping event.
    counter mapping_attach_failures: "mapping_attach_failures", "Apps of a followed mapping that could not be attached";
    /// Registrar retries armed after a failed register or unregister.
    counter registrar_retries: "registrar_retries", "Registrar retries armed after a failed register or unregister";
    /// Registry session losses seen (each re-registers and re-subscribes
    /// everything, spread).
    counter session_losses: "registry_session_losses", "Registry session losses seen";
    /// Failed unregister calls (each retried by the registrar).
    counter unregister_failures: "unregister_failures", "Failed unregister calls (each retried)";
    /// Metadata requests of resolvers answered from the shared cache (no
    /// fetcher call).
    counter metadata_cache_hits: "metadata_cache_hits", "Metadata requests answered from the shared cache";
    }
}

impl EngineStats {
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
