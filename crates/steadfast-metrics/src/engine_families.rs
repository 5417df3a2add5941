//! The engine's own counters (`Engine::stats`) as metric families. Names
//! follow the Prometheus conventions: counters get `_total` from the
//! encoder, gauges say what they count.

use steadfast_actors::{Engine, EngineStatsSnapshot};

use crate::collect::{Gathered, Value};

/// Writes `engine`'s counters and liveness gauges.
pub(crate) fn engine_counters(g: &mut Gathered, engine: &Engine) {
    let s: EngineStatsSnapshot = engine.stats();
    let gauges: [(&'static str, &'static str, i64); 7] = [
        ("actors", "Actors alive", s.actors_alive),
        (
            "metadata_fetches_in_flight",
            "Metadata fetch flights under way",
            s.flights_in_flight,
        ),
        (
            "retry_timers_pending",
            "Retry and re-subscribe timers armed, not yet fired",
            s.timers_pending,
        ),
        (
            "resync_timers_pending",
            "Periodic full re-read timers armed",
            s.resyncs_scheduled,
        ),
        (
            "registry_watches",
            "Registry watch streams open",
            s.watches_active,
        ),
        (
            "resolvers",
            "Resolver actors alive (one per provider app)",
            s.resolvers_alive,
        ),
        (
            "directories",
            "Directory actors alive (one per reference)",
            s.directories_alive,
        ),
    ];
    for (name, help, v) in gauges {
        g.gauge(name, help, v);
    }
    let counters: [(&'static str, &'static str, u64); 31] = [
        (
            "metadata_fetch_attempts",
            "Metadata fetcher calls (one per candidate tried, hedges included)",
            s.fetch_attempts,
        ),
        (
            "metadata_fetch_hedged",
            "Fetcher calls started by the hedge",
            s.fetch_hedged,
        ),
        (
            "metadata_fetch_deadlines",
            "Fetch flights that ended at their whole-fetch deadline",
            s.fetch_deadlines,
        ),
        (
            "metadata_flights",
            "Fetch flights started (one per app and revision at a time)",
            s.flights_started,
        ),
        (
            "metadata_cache_hits",
            "Metadata requests answered from the shared cache",
            s.metadata_cache_hits,
        ),
        (
            "metadata_demand_fetches",
            "Fetches started early because callers waited",
            s.demand_fetches,
        ),
        (
            "timers_fired",
            "Retry and re-subscribe timers that fired",
            s.timers_fired,
        ),
        (
            "registry_snapshots",
            "Registry snapshots received",
            s.snapshots_received,
        ),
        (
            "directory_updates",
            "Directory updates published by resolvers",
            s.updates_published,
        ),
        (
            "registry_watch_failures",
            "Registry watch failures (failed opens, error items, ended streams)",
            s.watch_failures,
        ),
        (
            "registry_missed_notifications",
            "Instances a resync found differing from the pushed state",
            s.missed_notifications,
        ),
        (
            "registry_older_events_ignored",
            "Registry events not newer than the state held",
            s.older_events_ignored,
        ),
        (
            "registry_session_losses",
            "Registry session losses seen",
            s.session_losses,
        ),
        (
            "registry_panics",
            "Registry calls or streams that panicked (contained)",
            s.registry_panics,
        ),
        (
            "resets_requested",
            "Resets asked for after a change that did not follow the state held",
            s.resets_requested,
        ),
        (
            "queue_collapses",
            "Change queues replaced by one Reset because their consumer fell behind",
            s.queue_collapses,
        ),
        (
            "instances_held",
            "Instances held after a mass expiry right after a registry recovery",
            s.instances_held,
        ),
        (
            "handler_panics",
            "Actor handlers that panicked (contained, actor restarted)",
            s.handler_panics,
        ),
        (
            "actor_restarts",
            "Actor restarts under supervision",
            s.restarts,
        ),
        (
            "register_failures",
            "Failed register or unregister attempts",
            s.register_failures,
        ),
        (
            "registrar_retries",
            "Registrar retries armed after a failed register or unregister",
            s.registrar_retries,
        ),
        (
            "tombstones_written",
            "Closing tombstones written",
            s.tombstones_written,
        ),
        (
            "tombstone_vetoes",
            "Re-adds vetoed by a tombstone (same incarnation as the closed one)",
            s.closing_readds_vetoed,
        ),
        (
            "tombstones_expired",
            "Tombstones expired",
            s.tombstones_expired,
        ),
        (
            "linger_unsubscribes",
            "References unsubscribed after their last handle was dropped",
            s.linger_unsubscribes,
        ),
        ("lookups", "One-shot instance queries", s.lookups),
        (
            "lookup_registry_calls",
            "Registry list calls made by the lookup cache",
            s.lookup_registry_calls,
        ),
        (
            "snapshot_loaded",
            "Disk snapshots served at a cold start",
            s.snapshot_loaded,
        ),
        (
            "snapshot_rejected",
            "Snapshot files refused (never served)",
            s.snapshot_rejected,
        ),
        (
            "mapping_read_failures",
            "Interface mapping watch failures",
            s.mapping_read_failures,
        ),
        (
            "mapping_write_failures",
            "Failed interface mapping writes at export",
            s.mapping_write_failures,
        ),
    ];
    for (name, help, v) in counters {
        g.counter(name, help, v);
    }
    for (kind, n) in engine.fetch_failures_by_kind() {
        g.add(
            "metadata_fetch_failures",
            "Failed metadata fetcher calls by error kind",
            vec![("kind", kind.to_string())],
            Value::Count(n),
        );
    }
    g.add(
        "metadata_source_fetches",
        "Metadata answers by source (report, rpc, cache) and outcome (success or error kind)",
        vec![("source", "cache".into()), ("outcome", "success".into())],
        Value::Count(s.metadata_cache_hits),
    );
}
