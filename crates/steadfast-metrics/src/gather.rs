//! Reads every source of a `Metrics` at one encode, each wait bounded.

use std::time::Duration;

use steadfast_actors::Engine;
use steadfast_core::RegistrationState;

use crate::collect::{Gathered, Value};
use crate::{Sources, DEFAULT_INSPECT_TIMEOUT};

/// Everything the sources say now.
pub(crate) async fn gather(sources: &Sources) -> Gathered {
    let mut g = Gathered::default();
    let timeout = sources.inspect_timeout.unwrap_or(DEFAULT_INSPECT_TIMEOUT);
    if let Some(engine) = &sources.engine {
        registry_info(&mut g, engine);
        crate::engine_families::engine_counters(&mut g, engine);
        crate::inspect_families::inspect_gauges(&mut g, engine, timeout).await;
        registrations(&mut g, engine, timeout).await;
    }
    #[cfg(feature = "etcd")]
    for registry in &sources.etcd {
        table_counters(&mut g, registry.stats().values());
    }
    #[cfg(feature = "nacos")]
    for registry in &sources.nacos {
        table_counters(&mut g, registry.stats().values());
    }
    #[cfg(feature = "http")]
    for source in &sources.fetchers {
        fetch_source(&mut g, source.source(), &source.fetch_metrics());
    }
    for pool in &sources.pools {
        pool_stats(&mut g, &pool());
    }
    #[cfg(feature = "http")]
    for caller in &sources.callers {
        if let Some(s) = caller.read() {
            caller_stats(&mut g, caller.reference(), &s);
        }
    }
    g
}

/// `steadfast_registry_info{kind, endpoints} 1`: which registry the
/// engine uses.
fn registry_info(g: &mut Gathered, engine: &Engine) {
    let info = engine.registry().describe();
    g.add(
        "registry_info",
        "The registry the engine uses: its kind and endpoints (always 1)",
        vec![
            ("kind", info.kind.as_str().into()),
            ("endpoints", info.endpoints.join(",").as_str().into()),
        ],
        Value::Int(1),
    );
}

/// A Caller's counters under its `reference` label.
#[cfg(feature = "http")]
fn caller_stats(g: &mut Gathered, reference: &str, s: &steadfast_web::CallerStats) {
    for (name, help, v) in [
        ("caller_calls", "Caller calls started", s.calls),
        (
            "caller_attempts",
            "Caller attempts made (calls + retries)",
            s.attempts,
        ),
        (
            "caller_retries",
            "Caller retries (an attempt after a failed one)",
            s.retries,
        ),
        (
            "caller_failed",
            "Caller calls that ended in an error",
            s.failed,
        ),
        (
            "caller_budget_refused",
            "Caller retries the retry budget refused",
            s.budget_refused,
        ),
    ] {
        g.add(
            name,
            help,
            vec![("reference", reference.into())],
            Value::Count(v),
        );
    }
}

/// `steadfast_registrations{state}`: what the failback registrar holds.
async fn registrations(g: &mut Gathered, engine: &Engine, timeout: Duration) {
    let Ok(Ok(list)) = tokio::time::timeout(timeout, engine.registrations()).await else {
        return;
    };
    let (mut registered, mut pending, mut gave_up) = (0i64, 0i64, 0i64);
    for (_, state) in &list {
        match state {
            RegistrationState::Registered => registered += 1,
            RegistrationState::Pending { .. } => pending += 1,
            RegistrationState::GaveUp { .. } => gave_up += 1,
        }
    }
    for (state, n) in [
        ("registered", registered),
        ("pending", pending),
        ("gave_up", gave_up),
    ] {
        g.add(
            "registrations",
            "Registrations the failback registrar keeps, by state (pending: waiting to land)",
            vec![("state", state.into())],
            Value::Int(n),
        );
    }
}

/// A backend's counters, read from its one table
/// (`steadfast_etcd::ETCD_COUNTERS`, `steadfast_nacos::NACOS_COUNTERS`): a
/// counter declared there is exported here, with no list of its own.
#[cfg(any(feature = "etcd", feature = "nacos"))]
fn table_counters(
    g: &mut Gathered,
    values: Vec<(
        &'static steadfast_core::CounterSpec,
        steadfast_core::CounterValue,
    )>,
) {
    for (spec, value) in values {
        match value {
            steadfast_core::CounterValue::Level(v) => g.gauge(spec.name, spec.help, v),
            steadfast_core::CounterValue::Count(v) => g.counter(spec.name, spec.help, v),
        }
    }
}

#[cfg(feature = "http")]
fn fetch_source(g: &mut Gathered, source: &str, m: &steadfast_http::FetchMetricsSnapshot) {
    let outcomes = std::iter::once("success").chain(steadfast_core::FetchError::LABELS);
    for outcome in outcomes {
        g.add(
            "metadata_source_fetches",
            "Metadata answers by source (report, rpc, cache) and outcome (success or error kind)",
            vec![("source", source.into()), ("outcome", outcome.into())],
            Value::Count(m.by_label(outcome).unwrap_or(0)),
        );
    }
}

fn pool_stats(g: &mut Gathered, s: &steadfast_pool::PoolStats) {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    for (state, n) in [("active", s.active), ("draining", s.draining)] {
        g.add(
            "pool_clients",
            "Pooled clients by state (draining: endpoint dropped, calls in flight)",
            vec![("state", state.into())],
            Value::Int(count(n)),
        );
    }
    for (name, help, v) in s.counters.rows() {
        g.counter(name, help, v);
    }
}
