//! The snapshot actor's write ordering: a write past its deadline is
//! reported as failed, yet the app's next write waits for it to end, so the
//! newest state is the one left on disk.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use steadfast_core::snapshot::{decode, AppSnapshot};
use steadfast_core::ServiceInstance;

use super::{io, SnapshotActor, StoreSnapshot};
use crate::snapshot_config::SnapshotConfig;
use crate::stats::EngineStats;

/// Writes held back, by app: the first write of a held app blocks (on the
/// blocking pool) until the test releases it, at most 10 s.
static HELD: Mutex<Option<HashMap<String, Receiver<()>>>> = Mutex::new(None);

/// Called by a write before it touches the disk.
pub(super) fn hold(app: &str) {
    let gate = HELD
        .lock()
        .ok()
        .and_then(|mut h| h.as_mut().and_then(|m| m.remove(app)));
    if let Some(rx) = gate {
        let _ = rx.recv_timeout(Duration::from_secs(10));
    }
}

fn hold_first_write(app: &str) -> Sender<()> {
    let (tx, rx) = channel();
    let mut held = HELD.lock().unwrap();
    held.get_or_insert_with(HashMap::new)
        .insert(app.to_string(), rx);
    tx
}

fn state(app: &str, port: u16) -> AppSnapshot {
    AppSnapshot {
        app: app.into(),
        written_at_ms: 1_700_000_000_000,
        instances: vec![ServiceInstance::new(app, "127.0.0.1", port)],
        metadata: BTreeMap::new(),
    }
}

async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached in 5 s");
}

#[actix_rt::test]
async fn a_write_past_its_deadline_holds_the_next_one_back() {
    let app = "held-app";
    let dir = std::env::temp_dir().join(format!("steadfast-snap-order-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = SnapshotConfig {
        dir: Some(dir.clone()),
        io_deadline: Duration::from_millis(50),
        ..SnapshotConfig::default()
    };
    let stats = Arc::new(EngineStats::default());
    let release = hold_first_write(app);
    let actor = SnapshotActor::new(dir.clone(), config, stats.clone()).start();

    actor.do_send(StoreSnapshot(state(app, 1)));
    until(|| stats.snapshot().snapshot_write_failures == 1).await;
    // The deadline passed while the first write is still under way; the
    // newer state must wait for it.
    actor.do_send(StoreSnapshot(state(app, 2)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(stats.snapshot().snapshot_written, 0, "the next write waits");
    assert!(!io::path_of(&dir, app).exists());

    release.send(()).unwrap();
    until(|| stats.snapshot().snapshot_written == 1).await;
    let bytes = std::fs::read(io::path_of(&dir, app)).unwrap();
    let on_disk = decode(&bytes, app, usize::MAX).unwrap();
    assert_eq!(on_disk.instances[0].port, 2, "the newest state is on disk");
    assert_eq!(stats.snapshot().snapshot_write_failures, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
