//! The gauges of what the engine sees now, from `Engine::inspect` (bounded):
//! per app, per reference, the registry connection.

use std::time::Duration;

use steadfast_actors::Engine;
use steadfast_actors::{EngineReport, REFERENCE_STATES};

use crate::collect::{Gathered, Value};

fn int(n: usize) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn secs(ms: u64) -> Value {
    // Milliseconds to seconds; precision loss past 2^53 ms is harmless.
    Value::Real(ms as f64 / 1000.0)
}

/// Writes the inspection's gauges, or `steadfast_inspect_up 0` when the
/// engine did not answer within `timeout`.
pub(crate) async fn inspect_gauges(g: &mut Gathered, engine: &Engine, timeout: Duration) {
    const UP: &str = "Whether the engine's inspection answered in time";
    let report = match engine.inspect_within(timeout).await {
        Ok(report) => report,
        Err(e) => {
            tracing::debug!(error = %e, "engine inspection failed; its gauges are left out");
            g.gauge("inspect_up", UP, 0);
            return;
        }
    };
    g.gauge("inspect_up", UP, 1);
    g.gauge(
        "inspect_missing_parts",
        "Parts of the engine (actors) that did not answer the inspection in time",
        i64::try_from(report.missing.len()).unwrap_or(i64::MAX),
    );
    write(g, &report);
}

/// Writes the gauges of `report`.
pub(crate) fn write(g: &mut Gathered, report: &EngineReport) {
    for app in &report.apps {
        let l = || vec![("app", (&app.app).into())];
        g.add(
            "app_instances",
            "Instances the registry lists for the app",
            l(),
            int(app.instances.len()),
        );
        let serving = app.instances.iter().filter(|i| i.serving).count();
        g.add(
            "app_instances_serving",
            "Instances of the app that may take traffic",
            l(),
            int(serving),
        );
        let unresolved: Vec<_> = app.revisions.iter().filter(|r| !r.resolved).collect();
        g.add(
            "app_unresolved_revisions",
            "Metadata revisions of the app not resolved yet (retrying)",
            l(),
            int(unresolved.len()),
        );
        let oldest = unresolved
            .iter()
            .filter_map(|r| r.unresolved_for_ms)
            .max()
            .unwrap_or(0);
        g.add(
            "app_oldest_unresolved_seconds",
            "Age of the app's oldest unresolved revision (0: none)",
            l(),
            secs(oldest),
        );
    }
    for r in &report.references {
        let l = || vec![("reference", (&r.reference).into())];
        g.add(
            "reference_endpoints",
            "Endpoints the reference's directory serves",
            l(),
            int(r.endpoints.len()),
        );
        let ejected = r.endpoints.iter().filter(|e| e.ejected).count();
        g.add(
            "reference_endpoints_ejected",
            "Endpoints of the reference ejected by outlier detection now",
            l(),
            int(ejected),
        );
        g.add(
            "reference_tombstones",
            "Closed endpoints of the reference held as tombstones (stale re-adds vetoed)",
            l(),
            int(r.tombstoned.len()),
        );
        // One 0/1 sample per known state, so a series does not vanish when
        // the state changes (a state not in the list is added while current).
        let current = r.state.as_str();
        let extra = (!REFERENCE_STATES.contains(&current)).then_some(current);
        for state in REFERENCE_STATES.iter().copied().chain(extra) {
            g.add(
                "reference_state",
                "The reference's directory state: 1 for the current one (ready, degraded, stale, pending, empty:<reason>)",
                vec![("reference", (&r.reference).into()), ("state", state.into())],
                Value::Int(i64::from(state == current)),
            );
        }
    }
    let reg = &report.registry;
    g.gauge(
        "registry_connected",
        "Whether the registry watch is healthy (1) or down (0)",
        i64::from(reg.connected),
    );
    g.add(
        "registry_stale_seconds",
        "How long the registry watch has been down (0: connected)",
        Vec::new(),
        secs(reg.stale_for_ms.unwrap_or(0)),
    );
    if let Some(ago) = reg.last_event_ago_ms {
        g.add(
            "registry_last_event_age_seconds",
            "Time since the registry last delivered an event or listing",
            Vec::new(),
            secs(ago),
        );
    }
}
