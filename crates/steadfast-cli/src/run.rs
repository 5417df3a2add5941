//! `steadfast inspect`: start an engine on the named registry, subscribe,
//! wait (bounded) for a first resolution, print, and with `--watch` keep
//! printing every `--interval` until ctrl-c or `--count` reports.

use std::time::Duration;

use steadfast_actors::{Engine, EngineReport};
use steadfast_core::Reference;
use tokio::time::Instant;

use crate::{source, text, InspectArgs};

/// Interface of the reference subscribed for an `--app` given without
/// `--interface`: it makes the engine resolve the app; it names no real
/// service and is left out of what is printed.
const APP_ONLY: &str = "steadfast.inspect.app-only";

/// How often the first wait re-reads the report.
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// Longest the engine's shutdown may take at exit.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

/// The references to subscribe for `args`.
fn references(args: &InspectArgs) -> Vec<Reference> {
    let with = |mut r: Reference| {
        r.group.clone_from(&args.group);
        r.version.clone_from(&args.version);
        r
    };
    match &args.interface {
        Some(iface) => vec![with(Reference::new(
            iface.as_str(),
            args.protocol.as_str(),
            args.apps.iter().map(String::as_str),
        ))],
        None => args
            .apps
            .iter()
            .map(|app| Reference::new(APP_ONLY, args.protocol.as_str(), [app.as_str()]))
            .collect(),
    }
}

/// Whether `report` shows a first answer for everything named: no
/// reference still pending, every named app resolved by a resolver, and
/// every revision resolved or tried at least once.
fn settled(report: &EngineReport, apps: &[String]) -> bool {
    report.missing.is_empty()
        && report.references.iter().all(|r| r.state != "pending")
        && apps.iter().all(|a| report.apps.iter().any(|r| &r.app == a))
        && report.apps.iter().all(|a| {
            a.revisions
                .iter()
                .all(|r| r.resolved || r.attempts > 0 || r.phase == "gave_up")
        })
}

/// The report without the app-only references.
fn visible(mut report: EngineReport, hidden: &[String]) -> EngineReport {
    report.references.retain(|r| !hidden.contains(&r.reference));
    report
}

fn print(report: &EngineReport, args: &InspectArgs, label: &str) -> Result<(), String> {
    if args.json {
        let json = if args.watch {
            serde_json::to_string(report)
        } else {
            serde_json::to_string_pretty(report)
        };
        println!("{}", json.map_err(|e| e.to_string())?);
    } else {
        println!("{}", text::render(report, label).trim_end());
    }
    Ok(())
}

/// Runs `steadfast inspect`.
pub(crate) async fn inspect(args: InspectArgs) -> Result<(), String> {
    let security = source::Security {
        user: args.user.clone(),
        password: std::env::var("STEADFAST_ETCD_PASSWORD").ok(),
        ca: args.ca.clone(),
        cert: args.cert.clone(),
        key: args.key.clone(),
    };
    let source = source::open(&args.registry, &args.prefix, &security)?;
    let engine = source.builder.start().map_err(|e| format!("engine: {e}"))?;
    let result = run(&engine, &args, &source.label).await;
    let _ = tokio::time::timeout(SHUTDOWN_LIMIT, engine.shutdown()).await;
    result
}

async fn run(engine: &Engine, args: &InspectArgs, label: &str) -> Result<(), String> {
    let refs = references(args);
    let hidden: Vec<String> = refs
        .iter()
        .filter(|r| r.interface == APP_ONLY)
        .map(Reference::subscribe_key)
        .collect();
    let mut dirs = Vec::with_capacity(refs.len());
    for r in refs {
        dirs.push(engine.subscribe(r).await.map_err(|e| e.to_string())?);
    }
    // A `--wait` past the clock's range waits a day, never panics.
    let now = Instant::now();
    let deadline = now
        .checked_add(args.wait)
        .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        .unwrap_or(now);
    let mut report = engine.inspect().await.map_err(|e| e.to_string())?;
    while !settled(&report, &args.apps) && Instant::now() < deadline {
        tokio::time::sleep(SETTLE_POLL).await;
        report = engine.inspect().await.map_err(|e| e.to_string())?;
    }
    print(&visible(report, &hidden), args, label)?;
    if !args.watch {
        return Ok(());
    }
    let mut printed: u64 = 1;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    while !matches!(args.count, Some(n) if printed >= n) {
        tokio::select! {
            _ = &mut ctrl_c => break,
            _ = tokio::time::sleep(args.interval) => {}
        }
        let report = engine.inspect().await.map_err(|e| e.to_string())?;
        if !args.json {
            println!("---");
        }
        print(&visible(report, &hidden), args, label)?;
        printed = printed.saturating_add(1);
    }
    drop(dirs);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use steadfast_actors::{AppReport, ReferenceReport, RevisionReport};

    fn report(state: &str, rev: RevisionReport) -> EngineReport {
        EngineReport {
            references: vec![ReferenceReport {
                reference: "demo:tri".into(),
                state: state.into(),
                ..Default::default()
            }],
            apps: vec![AppReport {
                app: "a".into(),
                instances: vec![],
                revisions: vec![rev],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_first_wait_ends_once_every_revision_was_tried() {
        let apps = vec!["a".to_string()];
        let untried = RevisionReport {
            revision: "r".into(),
            phase: "fetching".into(),
            ..Default::default()
        };
        assert!(!settled(&report("ready", untried.clone()), &apps));
        let tried = RevisionReport {
            attempts: 1,
            ..untried.clone()
        };
        assert!(settled(&report("empty:unresolved", tried.clone()), &apps));
        assert!(!settled(&report("pending", tried.clone()), &apps));
        assert!(!settled(&report("ready", tried), &["b".to_string()]));
        let resolved = RevisionReport {
            resolved: true,
            ..untried
        };
        assert!(settled(&report("ready", resolved), &apps));
    }
}
