//! Turns what the machines and snapshots tell into the report's plain,
//! serializable types: instants become milliseconds before or after the
//! report's `now`, errors become their rendered text.

use std::time::{Duration, Instant};

use steadfast_core::AppInspection;
use steadfast_core::PeakEwma;
use steadfast_core::WatchInspection;
use steadfast_core::{
    DirectorySnapshot, RecordKind, Reference, RegistrationKey, RegistrationState,
};

use super::{
    state_label, AppReport, EndpointReport, ReferenceReport, RegistrationReport, RegistryReport,
    RevisionReport, WatchReport,
};

/// Whole milliseconds of `d`, saturating.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds from `then` to `now` (zero when `then` is later).
fn ago(now: Instant, then: Instant) -> u64 {
    ms(now.saturating_duration_since(then))
}

/// The report of one reference from its directory's published snapshot.
pub(crate) fn reference(
    reference: &Reference,
    snapshot: &DirectorySnapshot,
    now: Instant,
    ewma: &PeakEwma,
) -> ReferenceReport {
    let status = snapshot.status();
    let endpoints = snapshot
        .iter()
        .map(|e| {
            let stats = e.stats();
            EndpointReport {
                url: e.to_http_url(),
                address: e.address(),
                instance_id: e.instance_id().to_string(),
                ejected: stats.is_ejected(now),
                in_flight: u64::from(stats.in_flight()),
                latency_ms: stats
                    .has_estimate()
                    .then(|| stats.latency_ns(now, ewma) / 1e6)
                    .filter(|l| l.is_finite()),
            }
        })
        .collect();
    ReferenceReport {
        reference: reference.subscribe_key(),
        apps: reference.apps.clone(),
        state: state_label(status).to_string(),
        status: status.to_string(),
        endpoints,
        tombstoned: Vec::new(),
        resets_asked: 0,
        gap_for_ms: None,
    }
}

/// The report of one app from its resolver's inspection.
pub(crate) fn app(inspection: AppInspection, now: Instant) -> AppReport {
    AppReport {
        version: inspection.version.to_string(),
        resets_asked: inspection.resets_asked,
        gap_for_ms: inspection.gap_since.map(|t| ago(now, t)),
        app: inspection.app,
        instances: inspection.instances,
        revisions: inspection
            .revisions
            .into_iter()
            .map(|r| RevisionReport {
                resolved: r.phase == steadfast_core::RevisionPhase::Resolved,
                phase: r.phase.label().to_string(),
                revision: r.revision,
                attempts: r.attempts,
                last_error: r.last_error,
                next_retry_in_ms: r.next_retry_in.map(ms),
                unresolved_for_ms: r.unresolved_for.map(ms),
                instances: r.instances,
            })
            .collect(),
    }
}

/// The registry report from the watches and the latest event time.
pub(crate) fn registry(
    watches: Vec<WatchInspection>,
    last_event: Option<Instant>,
    now: Instant,
) -> RegistryReport {
    let connected = watches
        .iter()
        .all(|w| w.stale_since.is_none() && w.subscribe_failure.is_none());
    let stale_for_ms = watches
        .iter()
        .filter_map(|w| w.stale_since)
        .min()
        .map(|t| ago(now, t));
    RegistryReport {
        backend: Default::default(),
        connected,
        stale_for_ms,
        last_event_ago_ms: last_event.map(|t| ago(now, t)),
        watches: watches
            .into_iter()
            .map(|w| WatchReport {
                stale_for_ms: w.stale_since.map(|t| ago(now, t)),
                subscribe_error: w.subscribe_failure.map(|f| f.to_string()),
                version: w.version.map(|v| v.to_string()),
                resets_asked: w.resets_asked,
                gap_for_ms: w.gap_since.map(|t| ago(now, t)),
                app: w.app,
            })
            .collect(),
    }
}

/// The report of one registration.
pub(crate) fn registration(key: &RegistrationKey, state: &RegistrationState) -> RegistrationReport {
    let key = match key.kind {
        RecordKind::Instance => format!("{}/{}", key.app, key.id),
        RecordKind::Mapping => format!("{}/{} (mapping)", key.app, key.id),
    };
    let intent = |registering: bool| {
        if registering {
            "register"
        } else {
            "unregister"
        }
    };
    match state {
        RegistrationState::Registered => RegistrationReport {
            key,
            intent: "register".into(),
            pending: false,
            attempts: 0,
            last_error: None,
        },
        RegistrationState::Pending {
            registering,
            attempts,
            last_error,
        } => RegistrationReport {
            key,
            intent: intent(*registering).into(),
            pending: true,
            attempts: *attempts,
            last_error: last_error.as_ref().map(|e| e.to_string()),
        },
        RegistrationState::GaveUp { registering, error } => RegistrationReport {
            key,
            intent: intent(*registering).into(),
            pending: false,
            attempts: 0,
            last_error: Some(error.to_string()),
        },
    }
}
