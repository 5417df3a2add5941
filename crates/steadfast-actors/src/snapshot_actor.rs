//! The snapshot actor (one per engine, only with a snapshot directory):
//! performs the file IO of disk snapshots off the actors' thread, on
//! tokio's blocking pool and under a deadline. Resolvers send it the state
//! to write ([`StoreSnapshot`], when their write schedule says so) and ask
//! it for their app's snapshot at start-up ([`LoadSnapshot`], answered with
//! [`SnapshotLoaded`] only when the file is usable). A refused file is
//! logged with its typed error, counted (`snapshot_rejected`) and never
//! served. Writes of one app run one at a time, the latest state winning; a
//! write past its deadline is reported as failed but still holds the app's
//! next write back until the blocking task ended, so an older state never
//! lands after a newer one.

mod io;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use actix::WeakRecipient;
use steadfast_core::snapshot::{check_age, decode, encode, AppSnapshot, SnapshotError};

use crate::contain::Contain;
use crate::messages::Shutdown;
use crate::snapshot_config::SnapshotConfig;
use crate::stats::{EngineStats, Live, LiveGuard};

/// Write `0` as its app's snapshot (resolver -> snapshot actor).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StoreSnapshot(pub AppSnapshot);

/// Ask for `app`'s snapshot (resolver -> snapshot actor); answered only
/// when there is a usable one.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LoadSnapshot {
    /// The provider app.
    pub app: String,
    /// Where the snapshot goes.
    pub reply: WeakRecipient<SnapshotLoaded>,
}

/// A usable snapshot (snapshot actor -> resolver): it decoded, is the
/// app's, and is at most the max age old.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SnapshotLoaded {
    /// The snapshot.
    pub snapshot: AppSnapshot,
    /// Its age when it was read.
    pub age: Duration,
}

/// Milliseconds since the Unix epoch now (0 before it).
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Performs the snapshot file IO of one engine.
pub struct SnapshotActor {
    dir: PathBuf,
    config: SnapshotConfig,
    /// Apps with a write under way, each with the next state to write.
    writing: HashMap<String, Option<AppSnapshot>>,
    stats: Arc<EngineStats>,
    terminated: bool,
    containment: crate::contain::Containment,
    _alive: LiveGuard,
}

impl SnapshotActor {
    /// An actor keeping snapshots in `dir` with `config`'s bounds.
    pub fn new(dir: PathBuf, config: SnapshotConfig, stats: Arc<EngineStats>) -> Self {
        Self {
            dir,
            config,
            writing: HashMap::new(),
            terminated: false,
            containment: Default::default(),
            _alive: LiveGuard::new(&stats, Live::Actor),
            stats,
        }
    }

    fn start_write(&mut self, snapshot: AppSnapshot, ctx: &mut Context<Self>) {
        let app = snapshot.app.clone();
        self.writing.insert(app.clone(), None);
        let (dir, max, deadline) = (
            self.dir.clone(),
            self.config.max_bytes,
            self.config.io_deadline,
        );
        let name = app.clone();
        let work = tokio::task::spawn_blocking(move || {
            let bytes = encode(&snapshot, max)?;
            #[cfg(test)]
            tests::hold(&name);
            io::write_atomic(&dir, &name, &bytes).map(|p| (p, bytes.len()))
        });
        let path = io::path_of(&self.dir, &app).display().to_string();
        // Detached from the actor's context so that a restart does not lose
        // the end of a write: the app stays marked writing until the
        // blocking task really ended, whatever the deadline said.
        let addr = ctx.address();
        actix::spawn(async move {
            let mut work = work;
            let late = match tokio::time::timeout(deadline, &mut work).await {
                Ok(joined) => {
                    let result = joined_result(joined, path);
                    addr.do_send(WriteSettled {
                        app,
                        result,
                        late: false,
                    });
                    return;
                }
                Err(_) => {
                    let result = Err(SnapshotError::Deadline {
                        path: path.clone(),
                        deadline,
                    });
                    addr.do_send(WriteSettled {
                        app: app.clone(),
                        result,
                        late: false,
                    });
                    // The blocking write cannot be cancelled: wait for it
                    // before the next write of the app may start, so an
                    // older state's rename never lands after a newer one.
                    joined_result(work.await, path)
                }
            };
            addr.do_send(WriteSettled {
                app,
                result: late,
                late: true,
            });
        });
    }
}

/// The end of a write of `app` (the write task -> the snapshot actor).
/// `late`: the write ended after its deadline, which was reported as a
/// failure already; only a write's end (deadline or not, `late` or on
/// time) lets the app's next write start.
#[derive(Message)]
#[rtype(result = "()")]
struct WriteSettled {
    app: String,
    result: Result<(PathBuf, usize), SnapshotError>,
    late: bool,
}

impl Handler<WriteSettled> for SnapshotActor {
    type Result = ();
    fn handle(&mut self, msg: WriteSettled, ctx: &mut Self::Context) {
        self.contained(ctx, |act, ctx| {
            let WriteSettled { app, result, late } = msg;
            let deadline_passed = matches!(result, Err(SnapshotError::Deadline { .. }));
            match (result, late) {
                (Ok((path, size)), false) => {
                    EngineStats::bump(&act.stats.snapshot_written);
                    tracing::debug!(app, path = %path.display(), size, "snapshot written");
                }
                (Err(error), false) => {
                    EngineStats::bump(&act.stats.snapshot_write_failures);
                    tracing::warn!(app, %error, kind = error.label(), "snapshot not written");
                }
                (Ok((path, size)), true) => {
                    tracing::debug!(app, path = %path.display(), size,
                        "snapshot write past its deadline ended");
                }
                (Err(error), true) => {
                    tracing::debug!(app, %error, "snapshot write past its deadline failed");
                }
            }
            if deadline_passed && !late {
                // Still under way on the blocking pool: the app stays
                // marked writing until the late end arrives.
                return;
            }
            match act.writing.remove(&app).flatten() {
                Some(next) if !act.terminated => act.start_write(next, ctx),
                _ => {}
            }
        });
    }
}

/// A blocking task's end as a snapshot result (a panic is an io error).
fn joined_result<T>(
    joined: Result<Result<T, SnapshotError>, tokio::task::JoinError>,
    path: String,
) -> Result<T, SnapshotError> {
    match joined {
        Ok(result) => result,
        Err(join) => Err(SnapshotError::Io {
            path,
            source: std::io::Error::other(join.to_string()),
        }),
    }
}

/// `work` under `deadline`; a panic or a missed deadline is an error.
async fn bounded<T: Send + 'static>(
    work: tokio::task::JoinHandle<Result<T, SnapshotError>>,
    deadline: Duration,
    path: String,
) -> Result<T, SnapshotError> {
    match tokio::time::timeout(deadline, work).await {
        Ok(joined) => joined_result(joined, path),
        Err(_) => Err(SnapshotError::Deadline { path, deadline }),
    }
}

impl Actor for SnapshotActor {
    type Context = Context<Self>;
}

impl Supervised for SnapshotActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        EngineStats::bump(&self.stats.restarts);
        // The writes under way keep their mark: their ends arrive as
        // messages (the write tasks are not the context's), and only then
        // may the app's next write start.
    }
}

impl Handler<StoreSnapshot> for SnapshotActor {
    type Result = ();
    fn handle(&mut self, msg: StoreSnapshot, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        self.contained(ctx, |act, ctx| {
            act.containment.drill_point();
            match act.writing.get_mut(&msg.0.app) {
                Some(next) => *next = Some(msg.0),
                None => act.start_write(msg.0, ctx),
            }
        });
    }
}

impl Handler<LoadSnapshot> for SnapshotActor {
    type Result = ();
    fn handle(&mut self, msg: LoadSnapshot, ctx: &mut Self::Context) {
        if self.terminated {
            return;
        }
        let (dir, max, max_age, deadline) = (
            self.dir.clone(),
            self.config.max_bytes,
            self.config.max_age,
            self.config.io_deadline,
        );
        let app = msg.app.clone();
        let work = tokio::task::spawn_blocking(move || {
            let Some(bytes) = io::read_bounded(&dir, &app, max)? else {
                return Ok(None);
            };
            let snapshot = decode(&bytes, &app, max)?;
            let age = check_age(snapshot.written_at_ms, unix_ms(), max_age)?;
            Ok(Some((snapshot, age)))
        });
        let path = io::path_of(&self.dir, &msg.app).display().to_string();
        let fut = bounded(work, deadline, path.clone());
        ctx.spawn(
            fut.into_actor(self)
                .map(move |result, act, _| match result {
                    Ok(Some((snapshot, age))) => {
                        if let Some(r) = msg.reply.upgrade() {
                            r.do_send(SnapshotLoaded { snapshot, age });
                        }
                    }
                    Ok(None) => tracing::debug!(app = msg.app, path, "no snapshot"),
                    Err(error) => {
                        EngineStats::bump(&act.stats.snapshot_rejected);
                        tracing::warn!(
                            app = msg.app,
                            path,
                            %error,
                            kind = error.label(),
                            "snapshot refused; waiting for the registry"
                        );
                    }
                }),
        );
    }
}

impl Handler<Shutdown> for SnapshotActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        // Writes under way finish on the blocking pool (each is atomic).
        self.terminated = true;
        ctx.stop();
    }
}

crate::contain::contained_actor!(SnapshotActor, "snapshot");
