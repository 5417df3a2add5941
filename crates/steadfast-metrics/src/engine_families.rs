//! The engine's own counters (`Engine::stats`) as metric families, read
//! from the engine's counter table (`steadfast_actors::ENGINE_COUNTERS`): a
//! counter declared there is exported here, with no list of its own. Names
//! follow the Prometheus conventions: counters get `_total` from the
//! encoder, gauges say what they count.

use steadfast_actors::Engine;
use steadfast_core::{CounterKind, CounterValue};

use crate::collect::{Gathered, Value};

/// Writes `engine`'s counters and liveness gauges.
pub(crate) fn engine_counters(g: &mut Gathered, engine: &Engine) {
    let s = engine.stats();
    for (spec, value) in s.values() {
        match (spec.kind, value) {
            (CounterKind::CounterByFetchError, _) => {
                for (kind, n) in engine.fetch_failures_by_kind() {
                    g.add(
                        spec.name,
                        spec.help,
                        vec![("kind", kind.into())],
                        Value::Count(n),
                    );
                }
            }
            (_, CounterValue::Level(v)) => g.gauge(spec.name, spec.help, v),
            (_, CounterValue::Count(v)) => g.counter(spec.name, spec.help, v),
        }
    }
    g.add(
        "metadata_source_fetches",
        "Metadata answers by source (report, rpc, cache) and outcome (success or error kind)",
        vec![("source", "cache".into()), ("outcome", "success".into())],
        Value::Count(s.metadata_cache_hits),
    );
}
