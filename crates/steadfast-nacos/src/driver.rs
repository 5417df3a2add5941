//! The client's one driver task: it owns the [`LinkMachine`] and performs
//! its actions (connect, redo, health checks, resyncs, stale reports),
//! routes pushes into the subscriptions, and subscribes and unsubscribes
//! services as watchers come and go. Every call runs as a future under a
//! deadline; no lock is held across one.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::connection::{Connection, Inbound};
use crate::link::{LinkAction, LinkMachine};
use crate::registry::Shared;
use crate::stats::NacosStats;
use crate::subscriptions::ListKind;

/// How many calls of a redo or resync run at once.
const CONCURRENCY: usize = 32;

/// Runs until the registry's last handle is dropped.
pub(crate) async fn run(shared: Arc<Shared>) {
    let config = shared.config.clone();
    let mut link = LinkMachine::new(&config, Instant::now().into_std());
    let mut rng = StdRng::from_entropy();
    let (inbound_tx, mut inbound) = mpsc::channel::<(u64, Inbound)>(256);
    let (health_tx, mut health) = mpsc::channel::<(u64, bool)>(4);
    let mut generation = 0u64;
    let far = Duration::from_secs(3600);
    loop {
        let wake = link
            .poll_timeout()
            .map_or_else(|| Instant::now() + far, Instant::from_std);
        let actions = tokio::select! {
            _ = shared.closed.notified() => break,
            _ = tokio::time::sleep_until(wake) => link.handle_timeout(Instant::now().into_std()),
            Some((g, message)) = inbound.recv() => {
                if g != generation {
                    continue;
                }
                match message {
                    Inbound::Push(info, received) => {
                        NacosStats::bump(&shared.stats.pushes);
                        shared.set_last_push(received);
                        let app = service_name(info.name.as_deref().unwrap_or_default());
                        shared.subs().apply(&app, info, ListKind::Pushed, &shared.stats);
                        continue;
                    }
                    Inbound::ConfigChanged(data_id, group) => {
                        // Its own task: the driver never waits on a call.
                        if group == crate::mapping::MAPPING_GROUP {
                            let shared = shared.clone();
                            tokio::spawn(async move { shared.read_mapping(&data_id).await });
                        }
                        continue;
                    }
                    Inbound::Reset | Inbound::Closed(_) => {
                        if let Inbound::Closed(why) = &message {
                            tracing::warn!(server = %shared.server_label(), why = %why, "nacos connection lost");
                        }
                        NacosStats::bump(&shared.stats.connection_losses);
                        // Whatever the lost connection still sends is dropped.
                        generation += 1;
                        link.on_lost(Instant::now().into_std(), &mut rng)
                    }
                }
            }
            Some((g, ok)) = health.recv() => {
                if g != generation {
                    continue;
                }
                if !ok {
                    NacosStats::bump(&shared.stats.health_check_failures);
                }
                let actions = link.on_health(ok, Instant::now().into_std(), &mut rng);
                if !actions.is_empty() {
                    NacosStats::bump(&shared.stats.connection_losses);
                    generation += 1;
                }
                actions
            }
            _ = shared.changed.notified() => {
                sync_watchers(&shared).await;
                let new = shared.take_mapping_pending();
                if !new.is_empty() {
                    let shared = shared.clone();
                    tokio::spawn(async move { shared.refresh_mappings(Some(new)).await });
                }
                continue;
            }
            _ = shared.leavers.wait() => {
                let gone = shared.subs().leave(shared.leavers.take());
                // Unsubscribing is best effort (the connection's end drops
                // it anyway): its own task, concurrent, each call bounded.
                if let Some(conn) = shared.connection() {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        stream::iter(gone)
                            .for_each_concurrent(CONCURRENCY, |app| {
                                let (shared, conn) = (shared.clone(), conn.clone());
                                async move {
                                    let _ = shared.subscribe_call(&conn, &app, false).await;
                                }
                            })
                            .await;
                    });
                }
                continue;
            }
        };
        for action in actions {
            match action {
                LinkAction::Connect(server) => {
                    generation += 1;
                    // A server with auth on: the token comes first (every
                    // call of the handshake's health check needs it).
                    let opened = match shared.login(&server).await {
                        Ok(ttl) => Connection::open(
                            &server,
                            &config,
                            shared.token.clone(),
                            inbound_tx.clone(),
                            generation,
                        )
                        .await
                        .map(|conn| (conn, ttl)),
                        Err(e) => Err(e),
                    };
                    let now = Instant::now().into_std();
                    let next = match opened {
                        Ok((conn, ttl)) => {
                            NacosStats::bump(&shared.stats.connects);
                            tracing::info!(server = %server, connection = %conn.connection_id, "connected to nacos");
                            shared.set_connection(Some(conn));
                            shared.subs().clear_stale();
                            if let Some(ttl) = ttl {
                                link.on_logged_in(now, ttl);
                            }
                            link.on_connected(now)
                        }
                        Err(e) => {
                            NacosStats::bump(&shared.stats.connect_failures);
                            tracing::warn!(server = %server, error = %e, "connecting to nacos failed");
                            link.on_connect_failed(now, &mut rng)
                        }
                    };
                    for a in next {
                        perform(&shared, a).await;
                    }
                }
                LinkAction::CheckHealth => {
                    if let Some(conn) = shared.connection() {
                        let tx = health_tx.clone();
                        let timeout = config.request_timeout.min(config.health_interval);
                        let g = generation;
                        tokio::spawn(async move {
                            let ok = conn.health(timeout).await.is_ok();
                            let _ = tx.send((g, ok)).await;
                        });
                    }
                }
                LinkAction::Login => {
                    let server = shared.connection().map(|c| c.server().to_string());
                    let now = Instant::now().into_std();
                    match server {
                        Some(server) => match shared.login(&server).await {
                            Ok(Some(ttl)) => link.on_logged_in(now, ttl),
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(server = %server, error = %e, "renewing the nacos token failed");
                                link.on_login_failed(now);
                            }
                        },
                        None => link.on_login_failed(now),
                    }
                }
                other => perform(&shared, other).await,
            }
        }
    }
    shared.set_connection(None);
    shared.subs().close();
    // Ends every mapping stream (their senders go).
    *shared.mappings() = Default::default();
}

/// Performs a redo, a resync or a stale report.
async fn perform(shared: &Arc<Shared>, action: LinkAction) {
    match action {
        LinkAction::ReportStale => {
            shared.set_connection(None);
            shared
                .subs()
                .report_stale("nacos connection lost", &shared.stats);
        }
        LinkAction::Redo | LinkAction::Resync => {
            if action == LinkAction::Redo {
                redo(shared).await;
            } else {
                resync(shared).await;
            }
            // Mappings in their own task: config calls never hold up the
            // driver (each call has its deadline).
            let shared = shared.clone();
            tokio::spawn(async move {
                shared.reassert_mappings().await;
                shared.refresh_mappings(None).await;
            });
        }
        LinkAction::Connect(_) | LinkAction::CheckHealth | LinkAction::Login => {}
    }
}

/// Registers and subscribes everything again on a new connection.
async fn redo(shared: &Arc<Shared>) {
    let Some(conn) = shared.connection() else {
        return;
    };
    let registrations = shared.registrations();
    let first = shared
        .stats
        .connects
        .load(std::sync::atomic::Ordering::Relaxed)
        <= 1;
    stream::iter(registrations)
        .for_each_concurrent(CONCURRENCY, |record| {
            let conn = conn.clone();
            async move {
                let key = (record.app.clone(), record.key.clone());
                if shared.instance_call(&conn, &record, true).await.is_ok() {
                    // Unregistered while this redo ran: take it back out.
                    if !shared.is_registered(&key) {
                        let _ = shared.instance_call(&conn, &record, false).await;
                    } else if !first {
                        NacosStats::bump(&shared.stats.redone_registrations);
                    }
                }
            }
        })
        .await;
    let apps = shared.subs().apps();
    stream::iter(apps)
        .for_each_concurrent(CONCURRENCY, |app| {
            let conn = conn.clone();
            async move {
                if subscribe(shared, &conn, app).await && !first {
                    NacosStats::bump(&shared.stats.redone_subscriptions);
                }
            }
        })
        .await;
}

/// Subscribes `app`; a failure is told to its watchers and the subscribe
/// is tried again at the next resync.
async fn subscribe(shared: &Arc<Shared>, conn: &Arc<Connection>, app: String) -> bool {
    match shared.subscribe_call(conn, &app, true).await {
        Ok(()) => true,
        Err(e) => {
            let why = format!("nacos subscribe failed: {e}");
            shared.subs().report_error(&app, &why, &shared.stats);
            shared.retry_later(app);
            false
        }
    }
}

/// Subscribes what failed to subscribe, then lists every subscribed
/// service in full.
async fn resync(shared: &Arc<Shared>) {
    sync_watchers(shared).await;
    let Some(conn) = shared.connection() else {
        return;
    };
    let apps = shared.subs().apps();
    stream::iter(apps)
        .for_each_concurrent(CONCURRENCY, |app| {
            let conn = conn.clone();
            async move {
                match shared.query_call(&conn, &app).await {
                    Ok(info) => {
                        NacosStats::bump(&shared.stats.resyncs);
                        shared
                            .subs()
                            .apply(&app, info, ListKind::Resync, &shared.stats);
                    }
                    Err(e) => {
                        let why = format!("nacos list failed: {e}");
                        shared.subs().report_error(&app, &why, &shared.stats);
                    }
                }
            }
        })
        .await;
}

/// Subscribes the services new watchers asked for.
async fn sync_watchers(shared: &Arc<Shared>) {
    let Some(conn) = shared.connection() else {
        // Kept: the redo of the next connection subscribes every service.
        return;
    };
    let pending: Vec<String> = {
        let subs = shared.subs();
        let mut apps = shared.take_pending();
        apps.retain(|a| subs.is_subscribed(a));
        apps
    };
    stream::iter(pending)
        .for_each_concurrent(CONCURRENCY, |app| {
            let conn = conn.clone();
            async move {
                subscribe(shared, &conn, app).await;
            }
        })
        .await;
}

/// The service name of a pushed list (`group@@name` on some servers).
fn service_name(name: &str) -> String {
    name.rsplit_once("@@").map_or(name, |(_, n)| n).to_string()
}
