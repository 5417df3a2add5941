//! Gathering an [`EngineReport`]: the messages each actor answers with its
//! part, and the fan-out that asks them all at once, each answer bounded
//! by [`INSPECT_PART_TIMEOUT`]. A part that does not answer in time (a hung
//! or restarting actor) is named in `missing` and left out.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use futures::future::join_all;
use steadfast_core::AppInspection;
use steadfast_core::WatchInspection;
use steadfast_core::{RegistrationKey, RegistrationState};

use super::{render, EngineReport, ReferenceReport};
use crate::directory_actor::DirectoryActor;
use crate::error::EngineError;
use crate::registrar_actor::{RegistrarActor, Registrations};
use crate::registry_actor::RegistryActor;
use crate::resolver_actor::ResolverActor;

/// Bound of the whole [`Engine::inspect`](crate::Engine::inspect).
pub const DEFAULT_INSPECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Bound of each actor's answer within an inspection.
pub const INSPECT_PART_TIMEOUT: Duration = Duration::from_secs(1);

/// Engine -> coordinator: gather the report.
#[derive(Message)]
#[rtype(result = "Result<EngineReport, EngineError>")]
pub(crate) struct InspectEngine;

/// Coordinator -> resolver: the app's instances and revisions.
#[derive(Message)]
#[rtype(result = "Option<AppInspection>")]
pub(crate) struct InspectApp;

/// Coordinator -> directory: the tombstoned endpoints and the Reset asks
/// (count, since when the oldest gap waits).
#[derive(Message)]
#[rtype(result = "(Vec<String>, u64, Option<Instant>)")]
pub(crate) struct InspectTombstones;

/// Coordinator -> registry actor: watch health and the latest event time.
#[derive(Message)]
#[rtype(result = "(Vec<WatchInspection>, Option<Instant>)")]
pub(crate) struct InspectWatches;

impl Handler<InspectWatches> for RegistryActor {
    type Result = MessageResult<InspectWatches>;
    fn handle(&mut self, _: InspectWatches, _: &mut Self::Context) -> Self::Result {
        if self.terminated {
            return MessageResult((Vec::new(), None));
        }
        MessageResult((self.machine.inspect_watches(), self.machine.last_event_at()))
    }
}

/// What the coordinator hands over to gather a report: the references
/// already rendered from their snapshots (lock-free), and the addresses to
/// ask for the rest.
pub(crate) struct Parts {
    /// Each reference with its directory (asked for tombstones).
    pub references: Vec<(ReferenceReport, Addr<DirectoryActor>)>,
    /// References whose published snapshot could not be read (reported
    /// missing).
    pub unreadable: Vec<String>,
    /// Each app with its resolver.
    pub resolvers: Vec<(String, Addr<ResolverActor>)>,
    pub registry: Option<Addr<RegistryActor>>,
    /// What the registry backend says it is.
    pub backend: steadfast_core::RegistryInfo,
    pub registrar: Option<Addr<RegistrarActor>>,
    /// The clock the parts were read at.
    pub now: Instant,
}

/// `ask` bounded by the part timeout; `None` when it did not answer.
async fn bounded<T>(ask: impl std::future::Future<Output = Result<T, MailboxError>>) -> Option<T> {
    match tokio::time::timeout(INSPECT_PART_TIMEOUT, ask).await {
        Ok(Ok(v)) => Some(v),
        _ => None,
    }
}

/// Asks every part at once and assembles the report.
pub(crate) async fn gather(parts: Parts) -> EngineReport {
    let now = parts.now;
    let parts_unreadable = parts.unreadable;
    let backend = parts.backend;
    let tombs = join_all(
        parts
            .references
            .into_iter()
            .map(|(mut r, addr)| async move {
                let t = bounded(addr.send(InspectTombstones)).await;
                match t {
                    Some((t, asked, since)) => {
                        r.tombstoned = t;
                        r.resets_asked = asked;
                        r.gap_for_ms = since.map(|s| {
                            let d = now.saturating_duration_since(s);
                            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
                        });
                        (r, true)
                    }
                    None => (r, false),
                }
            }),
    );
    let apps =
        join_all(parts.resolvers.into_iter().map(|(app, addr)| async move {
            (app, bounded(addr.send(InspectApp)).await.flatten())
        }));
    let registry = async {
        match parts.registry {
            Some(a) => bounded(a.send(InspectWatches)).await,
            None => Some((Vec::new(), None)),
        }
    };
    let registrations = async {
        match parts.registrar {
            Some(a) => bounded(a.send(Registrations)).await,
            None => Some(Vec::<(RegistrationKey, RegistrationState)>::new()),
        }
    };
    let (refs, apps, registry, registrations) =
        futures::join!(tombs, apps, registry, registrations);
    let mut report = EngineReport {
        taken_at_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(render::ms)
            .unwrap_or_default(),
        ..EngineReport::default()
    };
    for key in &parts_unreadable {
        report.missing.push(format!("directory:{key}"));
    }
    for (r, answered) in refs {
        if !answered {
            report.missing.push(format!("directory:{}", r.reference));
        }
        report.references.push(r);
    }
    report
        .references
        .sort_by(|a, b| a.reference.cmp(&b.reference));
    for (app, inspection) in apps {
        match inspection {
            Some(i) => report.apps.push(render::app(i, now)),
            None => report.missing.push(format!("resolver:{app}")),
        }
    }
    report.apps.sort_by(|a, b| a.app.cmp(&b.app));
    match registry {
        Some((watches, last)) => report.registry = render::registry(watches, last, now),
        None => report.missing.push("registry".into()),
    }
    report.registry.backend = backend;
    match registrations {
        Some(list) => {
            report.registrations = list
                .iter()
                .map(|(k, s)| render::registration(k, s))
                .collect();
            report.registrations.sort_by(|a, b| a.key.cmp(&b.key));
        }
        None => report.missing.push("registrar".into()),
    }
    report
}
