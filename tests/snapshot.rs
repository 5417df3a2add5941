//! Disk snapshots for cold starts (issue 9, section 3): a good state is
//! written atomically and at most once per interval; at a cold start with
//! the registry down the directory serves the snapshot, marked stale with
//! source snapshot and its age; the first live state replaces it entirely;
//! too old, corrupt, truncated, foreign and oversized files are refused,
//! counted, and the engine heals from the registry. Virtual time, real
//! files in a unique temp dir.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use steadfast::{DirectoryStatus, DirectoryView, EmptyReason, MetadataInfo, RegistryError};
use steadfast_core::snapshot::{decode, encode, file_name, AppSnapshot, DEFAULT_MAX_BYTES};
use steadfast_core::{Freshness, ServedFromSnapshot, Source};
use tokio::time::sleep;

/// A unique directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!(
            "steadfast-snapshot-test-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }

    fn file(&self) -> PathBuf {
        self.0.join(file_name(APP))
    }

    /// Writes `snapshot` as the app's file, encoded as the engine would.
    fn write(&self, snapshot: &AppSnapshot) {
        let bytes = encode(snapshot, DEFAULT_MAX_BYTES).unwrap();
        std::fs::write(self.file(), bytes).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A snapshot of `APP` on `m` at `ports`, written `age` ago.
fn snapshot_of(m: &MetadataInfo, ports: &[u16], age: Duration) -> AppSnapshot {
    AppSnapshot {
        app: APP.into(),
        written_at_ms: now_ms().saturating_sub(age.as_millis() as u64),
        instances: ports.iter().map(|p| instance(m, *p)).collect(),
        metadata: BTreeMap::from([(m.revision.clone(), m.clone())]),
    }
}

/// Instance ports of the endpoints in a view, sorted.
fn iports(v: &DirectoryView) -> Vec<u16> {
    let mut p: Vec<u16> = v.endpoints.iter().map(|u| u.instance.port()).collect();
    p.sort_unstable();
    p
}

fn read(path: &Path) -> AppSnapshot {
    let bytes = std::fs::read(path).expect("snapshot file");
    decode(&bytes, APP, DEFAULT_MAX_BYTES).expect("decodes")
}

fn served(v: &DirectoryView) -> Option<&ServedFromSnapshot> {
    match &v.status {
        DirectoryStatus::Ready { snapshot, .. } => snapshot.as_ref(),
        DirectoryStatus::Empty(_) => None,
    }
}

/// Waits (virtual time, bounded) until `pred` holds on the engine's stats.
async fn until(fx: &Fixture, what: &str, pred: impl Fn(&steadfast::EngineStatsSnapshot) -> bool) {
    for _ in 0..1000 {
        if pred(&fx.engine.stats()) {
            return;
        }
        sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}: {:?}", fx.engine.stats());
}

#[actix_rt::test]
async fn a_good_state_is_written_atomically_with_its_instances_and_metadata() {
    let dir = TempDir::new("write");
    let fx = Fixture::start_with(|b| b.snapshot_dir(&dir.0));
    let (m1, _m2, _d) = fx.ready_on_r1().await;
    until(&fx, "a write", |s| s.snapshot_written == 1).await;
    let s = read(&dir.file());
    assert_eq!(s.app, APP);
    assert_eq!(s.instances, vec![instance(&m1, 8001)]);
    assert_eq!(s.metadata.get(&m1.revision), Some(&m1));
    assert!(s.written_at_ms <= now_ms() && s.written_at_ms + 60_000 > now_ms());
    let names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![file_name(APP)], "no temp file left behind");
    assert_eq!(fx.engine.stats().snapshot_write_failures, 0);
}

#[actix_rt::test]
async fn a_burst_of_changes_writes_once_per_interval() {
    let dir = TempDir::new("burst");
    let fx = Fixture::start_with(|b| {
        b.snapshot_dir(&dir.0)
            .snapshot_write_interval(Duration::from_secs(10))
    });
    let (m1, _m2, d) = fx.ready_on_r1().await;
    until(&fx, "the first write", |s| s.snapshot_written == 1).await;
    for port in 9000..9020 {
        fx.registry.put(instance(&m1, port));
        settle().await;
    }
    wait_for(&d, "21 endpoints", Duration::from_secs(1), |v| {
        v.endpoints.len() == 21
    })
    .await;
    advance(Duration::from_secs(5)).await;
    assert_eq!(fx.engine.stats().snapshot_written, 1, "coalesced");
    advance(Duration::from_secs(6)).await;
    until(&fx, "the coalesced write", |s| s.snapshot_written == 2).await;
    assert_eq!(read(&dir.file()).instances.len(), 21, "the latest state");
    advance(Duration::from_secs(60)).await;
    assert_eq!(
        fx.engine.stats().snapshot_written,
        2,
        "nothing changed since"
    );
}

#[actix_rt::test]
async fn at_a_cold_start_with_the_registry_down_the_snapshot_is_served_stale_with_its_age() {
    let dir = TempDir::new("cold");
    let m1 = metadata(APP, 20000, "t1");
    dir.write(&snapshot_of(&m1, &[8001, 8002], Duration::from_secs(60)));
    let fx = Fixture::start_with(|b| b.snapshot_dir(&dir.0));
    fx.registry.set_down(true);
    let d = fx.subscribe().await;
    let v = wait_for(
        &d,
        "served from the snapshot",
        Duration::from_secs(2),
        |v| v.status.is_ready(),
    )
    .await;
    assert_eq!(iports(&v), vec![8001, 8002]);
    let s = served(&v).expect("marked as served from a snapshot");
    assert_eq!(s.source, Source::Snapshot);
    assert_eq!(s.apps, vec![APP.to_string()]);
    match s.freshness {
        Freshness::Stale { age } => assert!(
            age >= Duration::from_secs(60) && age < Duration::from_secs(120),
            "{age:?}"
        ),
        Freshness::Fresh => panic!("a snapshot is never fresh"),
    }
    let text = v.status.to_string();
    assert!(
        text.contains("snapshot") && text.contains("stale"),
        "{text}"
    );
    assert!(d.select().is_ok(), "callers get endpoints");
    let st = fx.engine.stats();
    assert_eq!((st.snapshot_loaded, st.snapshot_rejected), (1, 0));
    assert_eq!(
        st.fetch_attempts, 0,
        "no metadata fetch for snapshot revisions"
    );
    assert_eq!(
        st.snapshot_written, 0,
        "a snapshot's state is never written back"
    );
}

#[actix_rt::test]
async fn live_data_replaces_the_snapshot_entirely() {
    let dir = TempDir::new("live");
    let m1 = metadata(APP, 20000, "t1");
    dir.write(&snapshot_of(&m1, &[8001, 8002], Duration::from_secs(5)));
    let fx = Fixture::start_with(|b| b.snapshot_dir(&dir.0));
    fx.fetcher.serve(m1.clone());
    // The registry holds 8001 and 8003; 8002 is only in the snapshot.
    fx.registry.put(instance(&m1, 8001));
    fx.registry.put(instance(&m1, 8003));
    fx.registry.set_down(true);
    let d = fx.subscribe().await;
    let v = wait_for(&d, "snapshot", Duration::from_secs(2), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(iports(&v), vec![8001, 8002]);
    advance(Duration::from_secs(3)).await;
    assert!(
        served(&d.view().await.unwrap()).is_some(),
        "still the snapshot"
    );
    fx.registry.set_down(false);
    let v = wait_for(&d, "live", Duration::from_secs(5), |v| served(v).is_none()).await;
    assert_eq!(
        iports(&v),
        vec![8001, 8003],
        "8002 vanished with the snapshot"
    );
    assert!(matches!(
        &v.status,
        DirectoryStatus::Ready {
            stale_since: None,
            snapshot: None,
            ..
        }
    ));
    // Live and good: written over the old snapshot.
    until(&fx, "the live state written", |s| s.snapshot_written == 1).await;
    let ports_on_disk: Vec<u16> = read(&dir.file()).instances.iter().map(|i| i.port).collect();
    assert_eq!(ports_on_disk, vec![8001, 8003]);
}

/// The subscribe failure a ready directory served from a snapshot names.
fn subscribe_failure(v: &DirectoryView) -> Option<&steadfast_core::RegistryFailure> {
    served(v).and_then(|s| s.subscribe.as_ref())
}

#[actix_rt::test]
async fn a_snapshot_served_while_the_subscribe_fails_names_the_failure_until_live() {
    let dir = TempDir::new("subscribe-failing");
    let m1 = metadata(APP, 20000, "t1");
    dir.write(&snapshot_of(&m1, &[8001, 8002], Duration::from_secs(5)));
    let fx = Fixture::start_with(|b| b.snapshot_dir(&dir.0));
    fx.fetcher.serve(m1.clone());
    fx.registry.put(instance(&m1, 8003));
    fx.registry.set_down(true);
    let d = fx.subscribe().await;
    let v = wait_for(
        &d,
        "served from the snapshot, subscribe failing",
        Duration::from_secs(3),
        |v| subscribe_failure(v).is_some(),
    )
    .await;
    assert!(v.status.is_ready(), "{}", v.status);
    assert_eq!(iports(&v), vec![8001, 8002]);
    let first = subscribe_failure(&v).expect("named").attempts;
    assert!(first >= 1);
    assert!(
        matches!(
            subscribe_failure(&v).map(|f| &f.last_error),
            Some(RegistryError::Unavailable(_))
        ),
        "{}",
        v.status
    );
    let text = v.status.to_string();
    assert!(
        text.contains("snapshot") && text.contains("subscribe failing after"),
        "{text}"
    );
    // Still failing: the attempts grow, still served from the snapshot.
    let v = wait_for(&d, "more attempts", Duration::from_secs(30), |v| {
        subscribe_failure(v).is_some_and(|f| f.attempts > first)
    })
    .await;
    assert!(v.status.is_ready() && served(&v).is_some());
    // Live replaces the snapshot, and the failure is gone with it.
    fx.registry.set_down(false);
    let v = wait_for(&d, "live", Duration::from_secs(60), |v| {
        v.status.is_ready() && served(v).is_none()
    })
    .await;
    assert_eq!(iports(&v), vec![8003]);
    let text = v.status.to_string();
    assert!(!text.contains("subscribe failing"), "{text}");
}

#[actix_rt::test]
async fn no_snapshot_dir_writes_nothing_and_loads_nothing() {
    let fx = Fixture::start();
    let (_m1, _m2, _d) = fx.ready_on_r1().await;
    advance(Duration::from_secs(30)).await;
    let st = fx.engine.stats();
    assert_eq!(
        (
            st.snapshot_written,
            st.snapshot_loaded,
            st.snapshot_rejected
        ),
        (0, 0, 0)
    );
}

/// Puts `bytes` where `APP`'s snapshot goes, starts an engine whose
/// registry holds :8001 but is down: the file is refused and counted,
/// nothing is served; once the registry is back the directory is live.
async fn refused_then_live(name: &str, bytes: Vec<u8>, max_bytes: usize) {
    let dir = TempDir::new(name);
    std::fs::write(dir.file(), bytes).unwrap();
    let fx = Fixture::start_with(|b| b.snapshot_dir(&dir.0).snapshot_max_bytes(max_bytes));
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    fx.registry.put(instance(&m1, 8001));
    fx.registry.set_down(true);
    let d = fx.subscribe().await;
    until(&fx, "the refusal", |s| s.snapshot_rejected == 1).await;
    advance(Duration::from_secs(2)).await;
    let v = d.view().await.unwrap();
    assert!(
        matches!(v.status, DirectoryStatus::Empty(EmptyReason::Pending(_))),
        "{name}: nothing served from a refused file: {:?}",
        v.status
    );
    assert_eq!(fx.engine.stats().snapshot_loaded, 0);
    fx.registry.set_down(false);
    let v = wait_for(&d, "live", Duration::from_secs(5), |v| v.status.is_ready()).await;
    assert_eq!(iports(&v), vec![8001], "{name}");
    assert!(served(&v).is_none());
}

fn good_bytes() -> Vec<u8> {
    let m = metadata(APP, 20000, "t1");
    encode(
        &snapshot_of(&m, &[7001, 7002], Duration::ZERO),
        DEFAULT_MAX_BYTES,
    )
    .unwrap()
}

#[actix_rt::test]
async fn a_corrupt_file_is_refused_counted_and_the_engine_heals() {
    let mut bytes = good_bytes();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    refused_then_live("corrupt", bytes, DEFAULT_MAX_BYTES).await;
}

#[actix_rt::test]
async fn a_truncated_file_is_refused_counted_and_the_engine_heals() {
    let mut bytes = good_bytes();
    bytes.truncate(bytes.len() - 10);
    refused_then_live("truncated", bytes, DEFAULT_MAX_BYTES).await;
}

#[actix_rt::test]
async fn a_foreign_file_is_refused_counted_and_the_engine_heals() {
    let m = metadata("billing", 20000, "t1");
    let mut other = snapshot_of(&m, &[7001], Duration::ZERO);
    other.app = "billing".into();
    for i in &mut other.instances {
        i.app = "billing".into();
    }
    let bytes = encode(&other, DEFAULT_MAX_BYTES).unwrap();
    refused_then_live("foreign", bytes, DEFAULT_MAX_BYTES).await;
}

#[actix_rt::test]
async fn a_file_not_in_our_format_is_refused_counted_and_the_engine_heals() {
    let json = b"{\"app\":\"greeter\",\"instances\":[]}".to_vec();
    refused_then_live("not-ours", json, DEFAULT_MAX_BYTES).await;
}

#[actix_rt::test]
async fn an_oversized_file_is_refused_counted_and_the_engine_heals() {
    let m = metadata(APP, 20000, "t1");
    let ports: Vec<u16> = (7000..7100).collect();
    let bytes = encode(&snapshot_of(&m, &ports, Duration::ZERO), DEFAULT_MAX_BYTES).unwrap();
    assert!(bytes.len() > 4096);
    refused_then_live("oversized", bytes, 4096).await;
}

#[actix_rt::test]
async fn a_too_old_snapshot_is_refused() {
    let m = metadata(APP, 20000, "t1");
    let old = snapshot_of(&m, &[7001], Duration::from_secs(25 * 3600));
    refused_then_live(
        "old",
        encode(&old, DEFAULT_MAX_BYTES).unwrap(),
        DEFAULT_MAX_BYTES,
    )
    .await;
}

/// A file dated at the end of time would be "0 ms old" for ever and
/// bypass `snapshot_max_age`: it is refused (`from_the_future`), counted,
/// and the engine heals from the registry.
#[actix_rt::test]
async fn a_snapshot_dated_in_the_future_is_refused() {
    let m = metadata(APP, 20000, "t1");
    let mut future = snapshot_of(&m, &[7001], Duration::ZERO);
    future.written_at_ms = u64::MAX;
    refused_then_live(
        "future",
        encode(&future, DEFAULT_MAX_BYTES).unwrap(),
        DEFAULT_MAX_BYTES,
    )
    .await;
}
