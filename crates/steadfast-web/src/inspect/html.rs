//! The status page: an [`EngineReport`] rendered as one self-contained
//! HTML document (inline CSS, no script). Every value from the report is
//! escaped; revisions are shortened by whole characters.

use std::fmt::Write;
use std::time::Duration;

use steadfast_actors::EngineReport;
use steadfast_actors::{AppReport, ReferenceReport};

/// Escapes `s` for HTML text and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The first 12 characters of a revision (whole characters).
fn short(revision: &str) -> String {
    revision.chars().take(12).collect()
}

/// `1.2 s`, `350 ms`, `3 min 5 s`.
fn dur(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => {
            let s = ms / 1000;
            if s < 3600 {
                format!("{} min {} s", s / 60, s % 60)
            } else {
                format!("{} h {} min", s / 3600, (s % 3600) / 60)
            }
        }
    }
}

/// `ms` since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// CSS class of a reference state label.
fn state_class(state: &str) -> &'static str {
    match state {
        "ready" => "ok",
        "degraded" | "stale" | "snapshot" | "pending" => "warn",
        _ => "bad",
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}h3{font-size:1em}\
table{border-collapse:collapse;margin:.4em 0 1em}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top;font-size:.9em}\
th{background:#f3f3f3}.ok{color:#14700f;font-weight:600}.warn{color:#9a6200;font-weight:600}\
.bad{color:#b00020;font-weight:600}.mark{font-size:.8em;padding:0 .3em;border-radius:3px;\
background:#b00020;color:#fff}.tomb{background:#555}.muted{color:#777}code{font-size:.9em}";

/// The status page of `report`, titled `title`, reloading every `refresh`
/// (zero: never).
pub fn render_status(report: &EngineReport, title: &str, refresh: Duration) -> String {
    let mut h = String::with_capacity(8 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>",
        esc(title)
    );
    if !refresh.is_zero() {
        let secs = refresh
            .as_secs()
            .saturating_add(u64::from(refresh.subsec_nanos() > 0));
        let _ = write!(h, "<meta http-equiv=\"refresh\" content=\"{secs}\">");
    }
    let _ = write!(
        h,
        "<style>{STYLE}</style></head><body><h1>{}</h1>",
        esc(title)
    );
    let _ = write!(
        h,
        "<p class=\"muted\">Taken at {}; {} reference(s), {} app(s).",
        utc(report.taken_at_ms),
        report.references.len(),
        report.apps.len()
    );
    if !report.missing.is_empty() {
        let _ = write!(
            h,
            " <span class=\"bad\">Not answering in time: {}</span>",
            esc(&report.missing.join(", "))
        );
    }
    h.push_str("</p>");
    registry(&mut h, report);
    h.push_str("<h2>References</h2>");
    if report.references.is_empty() {
        h.push_str("<p class=\"muted\">No reference subscribed.</p>");
    }
    for r in &report.references {
        reference(&mut h, r);
    }
    h.push_str("<h2>Apps</h2>");
    if report.apps.is_empty() {
        h.push_str("<p class=\"muted\">No provider app resolved.</p>");
    }
    for a in &report.apps {
        app(&mut h, a);
    }
    registrations(&mut h, report);
    h.push_str("</body></html>");
    h
}

fn registry(h: &mut String, report: &EngineReport) {
    let r = &report.registry;
    let (class, word) = if r.connected {
        ("ok", "connected")
    } else {
        ("bad", "disconnected")
    };
    let _ = write!(
        h,
        "<h2>Registry</h2><p class=\"backend\">Backend: <b>{}</b>{}</p>\
         <p>Watches: <span class=\"{class}\">{word}</span>",
        esc(&r.backend.kind),
        if r.backend.endpoints.is_empty() {
            String::new()
        } else {
            format!(" at {}", esc(&r.backend.endpoints.join(", ")))
        }
    );
    if let Some(ms) = r.stale_for_ms {
        let _ = write!(h, ", stale for {}", dur(ms));
    }
    match r.last_event_ago_ms {
        Some(ms) => {
            let _ = write!(h, ", last event {} ago", dur(ms));
        }
        None => h.push_str(", no event yet"),
    }
    h.push_str(".</p>");
    if r.watches.is_empty() {
        return;
    }
    h.push_str(
        "<table><tr><th>app</th><th>watch</th><th>version</th>\
         <th>re-reads asked</th><th>error</th></tr>",
    );
    for w in &r.watches {
        let state = match (w.stale_for_ms, &w.subscribe_error, w.gap_for_ms) {
            (_, Some(_), _) => "<span class=\"bad\">failing</span>".to_string(),
            (Some(ms), None, _) => format!("<span class=\"warn\">stale {}</span>", dur(ms)),
            (None, None, Some(ms)) => {
                format!("<span class=\"warn\">re-reading {}</span>", dur(ms))
            }
            (None, None, None) => "<span class=\"ok\">healthy</span>".to_string(),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{state}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&w.app),
            esc(w.version.as_deref().unwrap_or("-")),
            w.resets_asked,
            esc(w.subscribe_error.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table>");
}

fn reference(h: &mut String, r: &ReferenceReport) {
    let _ = write!(
        h,
        "<h3><code>{}</code> <span class=\"{}\">{}</span></h3><p>{}",
        esc(&r.reference),
        state_class(&r.state),
        esc(&r.state),
        esc(&r.status)
    );
    if !r.apps.is_empty() {
        let _ = write!(
            h,
            " <span class=\"muted\">(apps: {})</span>",
            esc(&r.apps.join(", "))
        );
    }
    h.push_str("</p>");
    if !r.endpoints.is_empty() {
        h.push_str(
            "<table><tr><th>endpoint</th><th>instance</th><th>in flight</th>\
             <th>latency</th><th>marks</th></tr>",
        );
        for e in &r.endpoints {
            let latency = e
                .latency_ms
                .map_or_else(String::new, |l| format!("{l:.1} ms"));
            let mark = if e.ejected {
                "<span class=\"mark\">ejected</span>"
            } else {
                ""
            };
            let _ = write!(
                h,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{latency}</td><td>{mark}</td></tr>",
                esc(&e.url),
                esc(&e.instance_id),
                e.in_flight
            );
        }
        h.push_str("</table>");
    }
    if !r.tombstoned.is_empty() {
        h.push_str("<p>Tombstoned (closed, held out): ");
        for t in &r.tombstoned {
            let _ = write!(
                h,
                "<span class=\"mark tomb\">tombstone</span> <code>{}</code> ",
                esc(t)
            );
        }
        h.push_str("</p>");
    }
}

fn app(h: &mut String, a: &AppReport) {
    let _ = write!(h, "<h3>{}</h3>", esc(&a.app));
    h.push_str(
        "<table><tr><th>revision</th><th>phase</th><th>instances</th><th>attempts</th>\
         <th>last error</th><th>next retry</th><th>unresolved for</th></tr>",
    );
    for r in &a.revisions {
        let class = if r.resolved { "ok" } else { "bad" };
        let phase = if r.resolved {
            "resolved"
        } else {
            r.phase.as_str()
        };
        let phase = if phase.is_empty() {
            "unresolved"
        } else {
            phase
        };
        let _ = write!(
            h,
            "<tr><td><code title=\"{}\">{}</code></td><td class=\"{class}\">{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.revision),
            esc(&short(&r.revision)),
            esc(phase),
            r.instances,
            r.attempts,
            esc(r.last_error.as_deref().unwrap_or("")),
            r.next_retry_in_ms
                .map_or_else(String::new, |ms| format!("in {}", dur(ms))),
            r.unresolved_for_ms.map_or_else(String::new, dur)
        );
    }
    h.push_str("</table>");
    h.push_str(
        "<table><tr><th>instance</th><th>address</th><th>revision</th><th>serving</th></tr>",
    );
    for i in &a.instances {
        let serving = match (i.serving, i.closing) {
            (_, true) => "<span class=\"warn\">closing</span>",
            (true, false) => "<span class=\"ok\">yes</span>",
            (false, false) => "<span class=\"bad\">no</span>",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td><code>{}:{}</code></td><td><code>{}</code></td><td>{serving}</td></tr>",
            esc(&i.id),
            esc(&i.host),
            i.port,
            esc(&short(i.revision.as_deref().unwrap_or("")))
        );
    }
    h.push_str("</table>");
}

fn registrations(h: &mut String, report: &EngineReport) {
    if report.registrations.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Registrations</h2><table><tr><th>key</th><th>intent</th><th>state</th>\
         <th>attempts</th><th>last error</th></tr>",
    );
    for r in &report.registrations {
        let state = if r.pending {
            "<span class=\"warn\">pending</span>"
        } else if r.last_error.is_some() {
            "<span class=\"bad\">gave up</span>"
        } else {
            "<span class=\"ok\">done</span>"
        };
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td>{state}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.key),
            esc(&r.intent),
            r.attempts,
            esc(r.last_error.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use steadfast_actors::{EngineReport, WatchReport};

    use super::{dur, esc, registry, utc};

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn renders_epoch_milliseconds_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_709_164_800_000), "2024-02-29 00:00:00 UTC");
        // Any input renders (no overflow).
        assert!(utc(u64::MAX).ends_with(" UTC"));
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(dur(350), "350 ms");
        assert_eq!(dur(1_200), "1.2 s");
        assert_eq!(dur(185_000), "3 min 5 s");
        assert_eq!(dur(7_260_000), "2 h 1 min");
    }

    #[test]
    fn the_registry_in_use_is_named_escaped() {
        let mut report = EngineReport::default();
        report.registry.backend =
            steadfast_core::RegistryInfo::new("etcd", vec!["http://<e1>:2379".into()]);
        let mut h = String::new();
        registry(&mut h, &report);
        assert!(
            h.contains("Backend: <b>etcd</b> at http://&lt;e1&gt;:2379</p>"),
            "{h}"
        );
    }

    #[test]
    fn a_watch_re_reading_after_a_gap_shows_its_version_and_asks_escaped() {
        let mut report = EngineReport::default();
        report.registry.watches = vec![WatchReport {
            app: "<app>".into(),
            version: Some("3:41.2".into()),
            resets_asked: 2,
            gap_for_ms: Some(1_200),
            ..Default::default()
        }];
        let mut h = String::new();
        registry(&mut h, &report);
        assert!(
            h.contains(
                "<tr><td>&lt;app&gt;</td><td><span class=\"warn\">re-reading 1.2 s</span></td>\
                 <td>3:41.2</td><td>2</td><td></td></tr>"
            ),
            "{h}"
        );
    }
}
