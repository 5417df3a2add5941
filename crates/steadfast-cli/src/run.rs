//! `steadfast inspect`: start an engine on the named registry, subscribe,
//! wait (bounded) for a first resolution, print, and with `--watch` keep
//! printing every `--interval` until ctrl-c or `--count` reports. Each
//! report is judged ([`crate::verdict`]): its causes go to stderr, its
//! [`Exit`] code is the command's.

use std::io::Write;
use std::time::Duration;

use steadfast_actors::{Directory, Engine, EngineError, EngineReport};
use steadfast_core::{DirectoryStatus, EmptyReason, Reference, ServiceInfo};
use tokio::time::Instant;

use crate::exit::{Exit, Failure};
use crate::exported::Exported;
use crate::source::{self, SharedFetcher};
use crate::verdict::{self, Checked, Verdict};
use crate::{text, InspectArgs};

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

/// Writes `report` to stdout: JSON (the engine's report as is), or text
/// in which a reference no provider exports as asked reads as the
/// verdict's note (which protocols it found instead).
fn print(
    report: &EngineReport,
    args: &InspectArgs,
    label: &str,
    verdict: &Verdict,
) -> Result<(), Failure> {
    let doc = if args.json {
        let json = if args.watch {
            serde_json::to_string(report)
        } else {
            serde_json::to_string_pretty(report)
        };
        json.map_err(|e| Failure::failed(format!("the report as JSON: {e}")))?
    } else {
        let mut report = report.clone();
        for r in &mut report.references {
            if let Some(note) = verdict.notes.get(&r.reference) {
                r.status = format!("empty: {note}");
            }
        }
        text::render(&report, label).trim_end().to_string()
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{doc}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::failed(format!("writing the report: {e}")))
}

/// One subscribed reference and its directory.
struct Subscribed {
    reference: Reference,
    app_only: bool,
    dir: Directory,
}

/// What one report needs besides the engine: the references, what was
/// asked, and what was read of the providers' metadata so far.
struct Session<'a> {
    engine: &'a Engine,
    args: &'a InspectArgs,
    label: &'a str,
    fetcher: &'a SharedFetcher,
    subscribed: Vec<Subscribed>,
    hidden: Vec<String>,
    exported: Exported,
    /// The causes last written to stderr (written again only when they
    /// change, so `--watch` does not repeat them every interval).
    said: Vec<String>,
}

impl Session<'_> {
    /// The verdict on `report`, with the providers' exports read for each
    /// reference that no endpoint matches.
    async fn judge(&mut self, report: &EngineReport) -> Verdict {
        let mut statuses = Vec::with_capacity(self.subscribed.len());
        let mut exports: Vec<Option<Vec<ServiceInfo>>> = Vec::with_capacity(self.subscribed.len());
        for s in &self.subscribed {
            let status = s.dir.status().await.ok();
            let mut found = None;
            if !s.app_only
                && matches!(
                    status,
                    Some(DirectoryStatus::Empty(EmptyReason::NoMatchingService))
                )
            {
                let apps: Vec<String> = if s.reference.apps.is_empty() {
                    report.apps.iter().map(|a| a.app.clone()).collect()
                } else {
                    s.reference.apps.clone()
                };
                found = self
                    .exported
                    .lookup(self.engine, self.fetcher, &apps, &s.reference.interface)
                    .await;
            }
            statuses.push(status);
            exports.push(found);
        }
        let checked: Vec<Checked<'_>> = self
            .subscribed
            .iter()
            .zip(statuses)
            .zip(&exports)
            .map(|((s, status), found)| Checked {
                reference: &s.reference,
                app_only: s.app_only,
                status,
                exported: found.as_deref(),
            })
            .collect();
        verdict::judge(report, &checked, &self.args.apps)
    }

    /// Judges and prints `report`; writes its causes to stderr when they
    /// differ from the last ones written.
    async fn report(&mut self, report: EngineReport) -> Result<Exit, Failure> {
        let verdict = self.judge(&report).await;
        print(
            &visible(report, &self.hidden),
            self.args,
            self.label,
            &verdict,
        )?;
        if verdict.reasons != self.said {
            let mut err = std::io::stderr().lock();
            for r in &verdict.reasons {
                // Nothing to do when stderr is gone: the code still says it.
                let _ = writeln!(err, "steadfast inspect: {r}");
            }
            self.said = verdict.reasons;
        }
        Ok(verdict.exit)
    }
}

/// Runs `steadfast inspect`: the exit code of the last report printed.
pub(crate) async fn inspect(args: InspectArgs) -> Result<Exit, Failure> {
    let security = source::Security {
        user: args.user.clone(),
        password: std::env::var("STEADFAST_ETCD_PASSWORD").ok(),
        ca: args.ca.clone(),
        cert: args.cert.clone(),
        key: args.key.clone(),
        nacos_user: args.nacos_user.clone(),
        nacos_password: std::env::var("STEADFAST_NACOS_PASSWORD").ok(),
    };
    let source = source::open(&args.registry, &args.prefix, &security)?;
    let engine = source
        .builder
        .start()
        .map_err(|e| Failure::failed(format!("engine: {e}")))?;
    let result = run(&engine, &args, &source.label, &source.fetcher).await;
    let _ = tokio::time::timeout(SHUTDOWN_LIMIT, engine.shutdown()).await;
    result
}

/// A failed subscribe: a reference naming no provider app is "not
/// found", anything else a failure.
fn subscribe_failure(e: EngineError) -> Failure {
    match e {
        EngineError::NoProviderApps(_) => Failure {
            exit: Exit::NotFound,
            message: e.to_string(),
        },
        e => Failure::failed(format!("subscribe: {e}")),
    }
}

async fn run(
    engine: &Engine,
    args: &InspectArgs,
    label: &str,
    fetcher: &SharedFetcher,
) -> Result<Exit, Failure> {
    let refs = references(args);
    let hidden: Vec<String> = refs
        .iter()
        .filter(|r| r.interface == APP_ONLY)
        .map(Reference::subscribe_key)
        .collect();
    let mut subscribed = Vec::with_capacity(refs.len());
    for reference in refs {
        let dir = engine
            .subscribe(reference.clone())
            .await
            .map_err(subscribe_failure)?;
        subscribed.push(Subscribed {
            app_only: reference.interface == APP_ONLY,
            reference,
            dir,
        });
    }
    let inspect = || async {
        engine
            .inspect()
            .await
            .map_err(|e| Failure::failed(format!("inspect: {e}")))
    };
    // A `--wait` past the clock's range waits a day, never panics.
    let now = Instant::now();
    let deadline = now
        .checked_add(args.wait)
        .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        .unwrap_or(now);
    let mut report = inspect().await?;
    while !settled(&report, &args.apps) && Instant::now() < deadline {
        tokio::time::sleep(SETTLE_POLL).await;
        report = inspect().await?;
    }
    let mut session = Session {
        engine,
        args,
        label,
        fetcher,
        subscribed,
        hidden,
        exported: Exported::default(),
        said: Vec::new(),
    };
    let mut exit = session.report(report).await?;
    if !args.watch {
        return Ok(exit);
    }
    let mut printed: u64 = 1;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    while !matches!(args.count, Some(n) if printed >= n) {
        tokio::select! {
            _ = &mut ctrl_c => break,
            _ = tokio::time::sleep(args.interval) => {}
        }
        let report = inspect().await?;
        if !args.json {
            let mut out = std::io::stdout().lock();
            writeln!(out, "---")
                .map_err(|e| Failure::failed(format!("writing the report: {e}")))?;
        }
        exit = session.report(report).await?;
        printed = printed.saturating_add(1);
    }
    Ok(exit)
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
