//! The human-readable form of an [`EngineReport`]: per app its instances
//! and revisions (resolution state, attempts, last error, next retry),
//! then per reference its state and endpoints, then the registry watches
//! and registrations.

use std::fmt::Write;

use steadfast_actors::EngineReport;

/// `350 ms`, `1.2 s`, `3 min 5 s`.
fn dur(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// The first 12 characters of a revision (whole characters).
fn short(revision: &str) -> String {
    revision.chars().take(12).collect()
}

/// `report` as text, headed by `source`.
pub(crate) fn render(report: &EngineReport, source: &str) -> String {
    let mut o = String::new();
    let r = &report.registry;
    let _ = write!(
        o,
        "registry {source}: {}",
        if r.connected {
            "connected"
        } else {
            "NOT CONNECTED"
        }
    );
    if let Some(ms) = r.stale_for_ms {
        let _ = write!(o, ", stale for {}", dur(ms));
    }
    match r.last_event_ago_ms {
        Some(ms) => {
            let _ = write!(o, ", last event {} ago", dur(ms));
        }
        None => o.push_str(", no event yet"),
    }
    o.push('\n');
    for w in r.watches.iter().filter(|w| {
        w.stale_for_ms.is_some()
            || w.subscribe_error.is_some()
            || w.gap_for_ms.is_some()
            || w.resets_asked > 0
    }) {
        let _ = write!(o, "  watch {}:", w.app);
        if let Some(ms) = w.stale_for_ms {
            let _ = write!(o, " stale for {}", dur(ms));
        }
        if let Some(ms) = w.gap_for_ms {
            let _ = write!(o, " re-reading for {}", dur(ms));
        }
        if w.resets_asked > 0 {
            let _ = write!(o, " {} re-read(s) asked", w.resets_asked);
        }
        if let Some(e) = &w.subscribe_error {
            let _ = write!(o, " failing: {e}");
        }
        o.push('\n');
    }
    for a in &report.apps {
        let _ = writeln!(
            o,
            "\napp {}: {} instance(s), {} revision(s)",
            a.app,
            a.instances.len(),
            a.revisions.len()
        );
        for i in &a.instances {
            let state = match (i.closing, i.serving) {
                (true, _) => "closing",
                (false, true) => "serving",
                (false, false) => "not serving",
            };
            let _ = writeln!(
                o,
                "  instance {} at {}:{}  revision {}  {state}",
                i.id,
                i.host,
                i.port,
                i.revision.as_deref().map_or_else(|| "-".into(), short)
            );
        }
        for v in &a.revisions {
            if v.resolved {
                let _ = writeln!(
                    o,
                    "  revision {}  resolved  ({} instance(s))",
                    short(&v.revision),
                    v.instances
                );
                continue;
            }
            let _ = write!(
                o,
                "  revision {}  UNRESOLVED ({})  {} attempt(s)",
                short(&v.revision),
                v.phase,
                v.attempts
            );
            if let Some(e) = &v.last_error {
                let _ = write!(o, ", last error: {e}");
            }
            if let Some(ms) = v.next_retry_in_ms {
                let _ = write!(o, ", next retry in {}", dur(ms));
            }
            if let Some(ms) = v.unresolved_for_ms {
                let _ = write!(o, ", unresolved for {}", dur(ms));
            }
            let _ = writeln!(o, "  ({} instance(s))", v.instances);
        }
    }
    for r in &report.references {
        let _ = writeln!(o, "\nreference {}: {}", r.reference, r.state);
        let _ = writeln!(o, "  status: {}", r.status);
        for e in &r.endpoints {
            let _ = write!(o, "  endpoint {}  instance {}", e.url, e.instance_id);
            if e.in_flight > 0 {
                let _ = write!(o, "  in flight {}", e.in_flight);
            }
            if let Some(l) = e.latency_ms {
                let _ = write!(o, "  latency {l:.1} ms");
            }
            if e.ejected {
                o.push_str("  [EJECTED]");
            }
            o.push('\n');
        }
        for t in &r.tombstoned {
            let _ = writeln!(o, "  tombstoned {t}");
        }
    }
    if !report.registrations.is_empty() {
        o.push_str("\nregistrations:\n");
        for g in &report.registrations {
            let state = if g.pending { "pending" } else { "done" };
            let _ = write!(o, "  {} {} {state}", g.intent, g.key);
            if let Some(e) = &g.last_error {
                let _ = write!(o, " ({} attempt(s), last error: {e})", g.attempts);
            }
            o.push('\n');
        }
    }
    if !report.missing.is_empty() {
        let _ = writeln!(o, "\nnot answering in time: {}", report.missing.join(", "));
    }
    o
}

#[cfg(test)]
mod tests {
    use steadfast_actors::{
        AppReport, EndpointReport, EngineReport, ReferenceReport, RevisionReport,
    };
    use steadfast_core::InstanceInspection;

    use super::render;

    #[test]
    fn reads_instances_then_revisions_then_endpoints() {
        let report = EngineReport {
            apps: vec![AppReport {
                app: "greeter".into(),
                instances: vec![InstanceInspection {
                    id: "i1".into(),
                    host: "10.0.0.1".into(),
                    port: 8001,
                    revision: Some("0123456789abcdef".into()),
                    serving: true,
                    closing: false,
                }],
                revisions: vec![RevisionReport {
                    revision: "0123456789abcdef".into(),
                    resolved: false,
                    attempts: 3,
                    last_error: Some("timed out".into()),
                    next_retry_in_ms: Some(1_500),
                    unresolved_for_ms: Some(65_000),
                    instances: 1,
                    phase: "waiting".into(),
                }],
                ..Default::default()
            }],
            references: vec![ReferenceReport {
                reference: "demo.Greeter:tri".into(),
                state: "ready".into(),
                status: "ready (1 endpoint(s))".into(),
                endpoints: vec![EndpointReport {
                    url: "http://10.0.0.1:20000/demo.Greeter".into(),
                    ejected: true,
                    instance_id: "i1".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = render(&report, "etcd://e:2379");
        let at = |s: &str| {
            text.find(s)
                .unwrap_or_else(|| panic!("{s} missing: {text}"))
        };
        assert!(
            at("instance i1 at 10.0.0.1:8001  revision 0123456789ab  serving")
                < at("revision 0123456789ab  UNRESOLVED")
        );
        assert!(text.contains(
            "UNRESOLVED (waiting)  3 attempt(s), last error: timed out, next retry in 1.5 s, unresolved for 1 min 5 s"
        ));
        assert!(
            at("UNRESOLVED")
                < at("endpoint http://10.0.0.1:20000/demo.Greeter  instance i1  [EJECTED]")
        );
        assert!(
            text.starts_with("registry etcd://e:2379: connected") || text.contains("NOT CONNECTED")
        );
    }

    #[test]
    fn names_a_watch_re_reading_after_a_gap() {
        let mut report = EngineReport::default();
        report.registry.watches = vec![
            steadfast_actors::WatchReport {
                app: "greeter".into(),
                version: Some("41".into()),
                resets_asked: 2,
                gap_for_ms: Some(1_200),
                ..Default::default()
            },
            steadfast_actors::WatchReport {
                app: "quiet".into(),
                version: Some("41".into()),
                ..Default::default()
            },
        ];
        let text = render(&report, "memory");
        assert!(
            text.contains("watch greeter: re-reading for 1.2 s 2 re-read(s) asked"),
            "{text}"
        );
        assert!(
            !text.contains("watch quiet"),
            "a healthy watch is not listed"
        );
    }
}
