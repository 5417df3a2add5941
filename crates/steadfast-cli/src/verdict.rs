//! Whether a report is complete, and if not why, as an [`Exit`] code and
//! one line per cause: read from the typed directory statuses
//! (`DirectoryStatus`, `EmptyReason`) and the report's typed fields
//! (`connected`, `resolved`, `missing`), never from rendered messages.

use std::collections::{BTreeMap, BTreeSet};

use steadfast_actors::EngineReport;
use steadfast_core::{service_key, DirectoryStatus, EmptyReason, Reference, ServiceInfo};

use crate::exit::Exit;

/// One subscribed reference as the verdict reads it.
pub(crate) struct Checked<'a> {
    /// The reference.
    pub reference: &'a Reference,
    /// Whether it is the placeholder subscribed for an `--app` without
    /// `--interface` (no endpoint is expected of it).
    pub app_only: bool,
    /// Its directory's status (`None`: the directory could not be read).
    pub status: Option<DirectoryStatus>,
    /// With no matching service: what its providers export under its
    /// interface name (`None`: not known).
    pub exported: Option<&'a [ServiceInfo]>,
}

/// The verdict on one report.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// The exit code.
    pub exit: Exit,
    /// Why it is not [`Exit::Complete`], one line per cause.
    pub reasons: Vec<String>,
    /// By subscribe key: a better status text for the references no
    /// provider exports as asked (which protocols it found instead).
    pub notes: BTreeMap<String, String>,
}

impl Verdict {
    fn add(&mut self, exit: Exit, reason: String) {
        self.exit = self.exit.max(exit);
        self.reasons.push(reason);
    }
}

/// What `reference` reads as in a cause: its subscribe key, or for the
/// app-only placeholder `app <name>`.
fn name(c: &Checked<'_>) -> String {
    if c.app_only {
        format!("app {}", c.reference.apps.join(", "))
    } else {
        c.reference.subscribe_key()
    }
}

/// Why no endpoint matches `reference`, from what its providers export
/// under its interface name (`None`: not known): e.g. `demo.Greeter is
/// exported over http, not tri`.
pub(crate) fn no_match(reference: &Reference, exported: Option<&[ServiceInfo]>) -> String {
    let key = service_key(
        &reference.interface,
        reference.group.as_deref(),
        reference.version.as_deref(),
    );
    let Some(services) = exported else {
        return format!("no provider exports {key} over {}", reference.protocol);
    };
    let protocols: BTreeSet<&str> = services
        .iter()
        .filter(|s| s.service_key() == key && s.protocol != reference.protocol)
        .map(|s| s.protocol.as_str())
        .collect();
    if !protocols.is_empty() {
        let found: Vec<&str> = protocols.into_iter().collect();
        return format!(
            "{key} is exported over {}, not {}",
            found.join(", "),
            reference.protocol
        );
    }
    let others: BTreeSet<String> = services
        .iter()
        .filter(|s| s.name == reference.interface)
        .map(ServiceInfo::match_key)
        .collect();
    if !others.is_empty() {
        let found: Vec<String> = others.into_iter().collect();
        return format!(
            "{key} is not exported over {}; its providers export {}",
            reference.protocol,
            found.join(", ")
        );
    }
    format!("no provider exports {key}, over any protocol")
}

/// The verdict on `report` for the references `checked` and the apps
/// named by `--app`.
pub(crate) fn judge(report: &EngineReport, checked: &[Checked<'_>], apps: &[String]) -> Verdict {
    let mut v = Verdict::default();
    let registry = &report.registry;
    if !registry.connected {
        let mut named = false;
        for w in &registry.watches {
            if let Some(e) = &w.subscribe_error {
                v.add(
                    Exit::RegistryUnreachable,
                    format!(
                        "registry unreachable: the watch of {} is failing: {e}",
                        w.app
                    ),
                );
                named = true;
            } else if let Some(ms) = w.stale_for_ms {
                v.add(
                    Exit::RegistryUnreachable,
                    format!(
                        "registry unreachable: the watch of {} is stale for {ms} ms",
                        w.app
                    ),
                );
                named = true;
            }
        }
        if !named {
            v.add(Exit::RegistryUnreachable, "registry not connected".into());
        }
    }
    for c in checked {
        let who = name(c);
        let Some(status) = &c.status else {
            v.add(
                Exit::Failed,
                format!("{who}: its directory could not be read"),
            );
            continue;
        };
        match status {
            DirectoryStatus::Ready {
                stale_since,
                degraded,
                snapshot,
                mapping,
                ..
            } => {
                if stale_since.is_some() || mapping.is_some() || snapshot.is_some() {
                    v.add(Exit::RegistryUnreachable, format!("{who}: {status}"));
                } else if !degraded.is_empty() {
                    v.add(Exit::MetadataUnresolved, format!("{who}: {status}"));
                }
            }
            DirectoryStatus::Empty(reason) => match reason {
                // The registry's own causes are listed above: the same
                // failure once more per reference would say nothing new.
                EmptyReason::Pending(_) if !registry.connected => {
                    v.exit = v.exit.max(Exit::RegistryUnreachable);
                }
                EmptyReason::Pending(_) => {
                    v.add(Exit::RegistryUnreachable, format!("{who}: {status}"));
                }
                EmptyReason::RegistryEmpty if c.app_only => v.add(
                    Exit::NotFound,
                    format!("unknown {who}: the registry holds no instance of it"),
                ),
                EmptyReason::RegistryEmpty => v.add(
                    Exit::NotFound,
                    format!(
                        "{who}: the registry holds no instance of {}",
                        if c.reference.apps.is_empty() {
                            "its mapped provider apps".to_string()
                        } else {
                            c.reference.apps.join(", ")
                        }
                    ),
                ),
                EmptyReason::Unresolved(_) => {
                    v.add(Exit::MetadataUnresolved, format!("{who}: {status}"));
                }
                // The placeholder matches no service by design: its app
                // resolved.
                EmptyReason::NoMatchingService if c.app_only => {}
                EmptyReason::NoMatchingService => {
                    let why = no_match(c.reference, c.exported);
                    v.add(Exit::NotFound, format!("{who}: {why}"));
                    v.notes.insert(c.reference.subscribe_key(), why);
                }
                EmptyReason::NotServing(_) | EmptyReason::NoProviderApp => {
                    v.add(Exit::NotFound, format!("{who}: {status}"));
                }
            },
        }
    }
    for a in &report.apps {
        for r in a.revisions.iter().filter(|r| !r.resolved) {
            v.add(
                Exit::MetadataUnresolved,
                format!(
                    "app {}: revision {} unresolved ({}, {} attempt(s))",
                    a.app, r.revision, r.phase, r.attempts
                ),
            );
        }
    }
    for app in apps {
        if !report.apps.iter().any(|a| &a.app == app) {
            v.add(
                Exit::Incomplete,
                format!("app {app}: no resolver reported it"),
            );
        }
    }
    if !report.missing.is_empty() {
        v.add(
            Exit::Incomplete,
            format!("not answering in time: {}", report.missing.join(", ")),
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use steadfast_actors::{AppReport, RevisionReport, WatchReport};
    use steadfast_core::{Pending, Unresolved};

    use super::*;

    fn service(name: &str, protocol: &str) -> ServiceInfo {
        ServiceInfo {
            name: name.into(),
            group: None,
            version: None,
            protocol: protocol.into(),
            port: 1,
            path: name.into(),
            params: Default::default(),
        }
    }

    fn connected() -> EngineReport {
        let mut r = EngineReport::default();
        r.registry.connected = true;
        r
    }

    fn one(report: &EngineReport, reference: &Reference, status: DirectoryStatus) -> Verdict {
        judge(
            report,
            &[Checked {
                reference,
                app_only: false,
                status: Some(status),
                exported: None,
            }],
            &[],
        )
    }

    fn ready() -> DirectoryStatus {
        DirectoryStatus::Ready {
            endpoints: 1,
            stale_since: None,
            degraded: vec![],
            held: vec![],
            mapping: None,
            snapshot: None,
        }
    }

    #[test]
    fn names_the_protocols_found_instead() {
        let r = Reference::new("demo.Greeter", "tri", ["greeter"]);
        let found = [
            service("demo.Greeter", "http"),
            service("demo.Other", "tri"),
        ];
        assert_eq!(
            no_match(&r, Some(&found)),
            "demo.Greeter is exported over http, not tri"
        );
        let grouped = r.clone().with_group("g");
        assert_eq!(
            no_match(&grouped, Some(&found)),
            "g/demo.Greeter is not exported over tri; its providers export demo.Greeter:http"
        );
        assert_eq!(
            no_match(&r, Some(&found[1..])),
            "no provider exports demo.Greeter, over any protocol"
        );
        assert_eq!(
            no_match(&r, None),
            "no provider exports demo.Greeter over tri"
        );
    }

    #[test]
    fn only_a_complete_report_is_zero() {
        let r = Reference::new("demo.Greeter", "http", ["greeter"]);
        let v = one(&connected(), &r, ready());
        assert_eq!(v.exit, Exit::Complete, "{:?}", v.reasons);
        assert!(v.reasons.is_empty());

        let v = one(&EngineReport::default(), &r, ready());
        assert_eq!(v.exit, Exit::RegistryUnreachable);

        let v = one(
            &connected(),
            &r,
            DirectoryStatus::Empty(EmptyReason::Pending(Pending::waiting())),
        );
        assert_eq!(v.exit, Exit::RegistryUnreachable);

        let v = one(
            &connected(),
            &r,
            DirectoryStatus::Empty(EmptyReason::RegistryEmpty),
        );
        assert_eq!(v.exit, Exit::NotFound);

        let v = one(
            &connected(),
            &r,
            DirectoryStatus::Empty(EmptyReason::NoMatchingService),
        );
        assert_eq!(v.exit, Exit::NotFound);
        assert_eq!(
            v.notes.get("demo.Greeter:http").map(String::as_str),
            Some("no provider exports demo.Greeter over http")
        );

        let unresolved = Unresolved {
            revisions: vec!["r1".into()],
            since: Instant::now(),
            attempts: 2,
            last_error: None,
        };
        let v = one(
            &connected(),
            &r,
            DirectoryStatus::Empty(EmptyReason::Unresolved(unresolved)),
        );
        assert_eq!(v.exit, Exit::MetadataUnresolved);

        let mut missing = connected();
        missing.missing = vec!["registrar".into()];
        assert_eq!(one(&missing, &r, ready()).exit, Exit::Incomplete);
    }

    #[test]
    fn an_app_only_placeholder_is_complete_once_its_app_resolved() {
        let r = Reference::new("steadfast.inspect.app-only", "http", ["greeter"]);
        let mut report = connected();
        report.apps = vec![AppReport {
            app: "greeter".into(),
            revisions: vec![RevisionReport {
                revision: "r1".into(),
                resolved: true,
                ..Default::default()
            }],
            ..Default::default()
        }];
        let check = |report: &EngineReport, status: DirectoryStatus| {
            judge(
                report,
                &[Checked {
                    reference: &r,
                    app_only: true,
                    status: Some(status),
                    exported: None,
                }],
                &["greeter".to_string()],
            )
        };
        let v = check(
            &report,
            DirectoryStatus::Empty(EmptyReason::NoMatchingService),
        );
        assert_eq!(v.exit, Exit::Complete, "{:?}", v.reasons);

        let v = check(&report, DirectoryStatus::Empty(EmptyReason::RegistryEmpty));
        assert_eq!(v.exit, Exit::NotFound);
        assert_eq!(
            v.reasons,
            ["unknown app greeter: the registry holds no instance of it"]
        );

        report.apps[0].revisions[0].resolved = false;
        let v = check(
            &report,
            DirectoryStatus::Empty(EmptyReason::NoMatchingService),
        );
        assert_eq!(v.exit, Exit::MetadataUnresolved);

        // An unreachable registry wins over what its silence hides.
        report.registry.connected = false;
        report.registry.watches = vec![WatchReport {
            app: "greeter".into(),
            stale_for_ms: Some(3_000),
            ..Default::default()
        }];
        let v = check(&report, DirectoryStatus::Empty(EmptyReason::RegistryEmpty));
        assert_eq!(v.exit, Exit::RegistryUnreachable);
        assert_eq!(
            v.reasons[0],
            "registry unreachable: the watch of greeter is stale for 3000 ms"
        );
    }
}
