//! Cold start during a registry outage, served from the disk snapshot.
//!
//! 1. A first engine, on an embedded registry with three provider
//!    instances, resolves them and writes the app's snapshot (atomically)
//!    to a temp dir.
//! 2. A consumer engine starts against a registry that is down. Its
//!    directory serves the snapshot's endpoints at once, marked stale with
//!    source snapshot and the snapshot's age; callers pick endpoints.
//! 3. The registry comes back (meanwhile one provider left and another
//!    joined): the first live state replaces the snapshot entirely.
//!
//! The last line is `served <n> endpoint(s) from the snapshot while the
//! registry was down; live after <ms> ms` (time from the registry being
//! back to the directory serving live data). Exits non-zero if a step did
//! not happen. Real time, a few seconds; the temp dir is removed.
//!
//! Run: `cargo run --example registry_outage`

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use steadfast::{
    Directory, DirectoryStatus, DirectoryView, Engine, FetchError, MemoryRegistry, MetadataFetcher,
    MetadataInfo, Reference, ServiceInfo, ServiceInstance,
};
use steadfast_core::ServedFromSnapshot;

const APP: &str = "greeter-app";
const IFACE: &str = "demo.Greeter";

/// The providers' MetadataService, in process.
#[derive(Clone, Default)]
struct Metadata(Arc<Mutex<HashMap<String, MetadataInfo>>>);

impl MetadataFetcher for Metadata {
    fn fetch(
        &self,
        _instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let found = self.0.lock().expect("demo lock").get(revision).cloned();
        Box::pin(async move { found.ok_or(FetchError::UnknownRevision("unknown".into())) })
    }
}

fn provider_metadata() -> MetadataInfo {
    MetadataInfo::new(
        APP,
        [ServiceInfo {
            name: IFACE.into(),
            group: None,
            version: None,
            protocol: "tri".into(),
            port: 20000,
            path: IFACE.into(),
            params: Default::default(),
        }],
    )
}

fn provider(info: &MetadataInfo, last_octet: u8) -> ServiceInstance {
    let mut i = ServiceInstance::new(APP, format!("10.0.0.{last_octet}"), 20000);
    i.set_revision(info.revision.clone());
    i
}

fn served(v: &DirectoryView) -> Option<&ServedFromSnapshot> {
    match &v.status {
        DirectoryStatus::Ready { snapshot, .. } => snapshot.as_ref(),
        DirectoryStatus::Empty(_) => None,
    }
}

fn hosts(v: &DirectoryView) -> Vec<String> {
    let mut h: Vec<String> = v
        .endpoints
        .iter()
        .map(|u| u.instance.host().to_string())
        .collect();
    h.sort();
    h
}

/// Polls `f` every 10 ms for at most `limit` (real time).
async fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(t) = f() {
            return Some(t);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

async fn view_until(
    dir: &Directory,
    limit: Duration,
    pred: impl Fn(&DirectoryView) -> bool,
) -> Option<DirectoryView> {
    let end = Instant::now() + limit;
    loop {
        let v = dir.view().await.ok()?;
        if pred(&v) {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Removes the temp dir however the demo ends.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fail(step: &str) -> ExitCode {
    eprintln!("FAILED: {step}");
    ExitCode::FAILURE
}

#[actix_rt::main]
async fn main() -> ExitCode {
    // Logs on stderr, filtered by RUST_LOG (default: warnings).
    steadfast_metrics::init_logging();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = TempDir(std::env::temp_dir().join(format!(
        "steadfast-registry-outage-{}-{nanos}",
        std::process::id()
    )));
    let info = provider_metadata();
    let metadata = Metadata::default();
    metadata
        .0
        .lock()
        .expect("demo lock")
        .insert(info.revision.clone(), info.clone());
    let reference = Reference::new(IFACE, "tri", [APP]);

    // 1. A first run writes the snapshot.
    let registry = MemoryRegistry::new();
    for octet in [1, 2, 3] {
        registry.put(provider(&info, octet));
    }
    let Ok(first) = Engine::builder()
        .registry(registry.clone())
        .fetcher(metadata.clone())
        .snapshot_dir(&dir.0)
        .start()
    else {
        return fail("first engine start");
    };
    let Ok(d1) = first.subscribe(reference.clone()).await else {
        return fail("first subscribe");
    };
    if view_until(&d1, Duration::from_secs(3), |v| v.endpoints.len() == 3)
        .await
        .is_none()
    {
        return fail("first engine ready");
    }
    if poll(Duration::from_secs(3), || {
        (first.stats().snapshot_written > 0).then_some(())
    })
    .await
    .is_none()
    {
        return fail("snapshot written");
    }
    println!(
        "run 1: {} endpoint(s) live, snapshot written to {}",
        d1.view().await.map(|v| v.endpoints.len()).unwrap_or(0),
        dir.0.display()
    );
    drop(d1);
    first.shutdown().await;

    // 2. A cold start while the registry is down. Meanwhile 10.0.0.3 left
    //    and 10.0.0.4 joined.
    registry.remove(APP, &provider(&info, 3).id);
    registry.put(provider(&info, 4));
    registry.set_down(true);
    let Ok(consumer) = Engine::builder()
        .registry(registry.clone())
        .fetcher(metadata.clone())
        .snapshot_dir(&dir.0)
        .registry_probe_interval(Some(Duration::from_millis(250)))
        .start()
    else {
        return fail("consumer start");
    };
    let Ok(d2) = consumer.subscribe(reference).await else {
        return fail("consumer subscribe");
    };
    let Some(v) = view_until(&d2, Duration::from_secs(3), |v| served(v).is_some()).await else {
        return fail("served from the snapshot");
    };
    let n = v.endpoints.len();
    println!("run 2, registry down: {}", v.status);
    println!("  endpoints from the snapshot: {:?}", hosts(&v));
    for _ in 0..3 {
        match d2.select() {
            Ok(lease) => {
                println!("  picked {}", *lease);
                lease.success();
            }
            Err(no) => return fail(&format!("pick from the snapshot: {no}")),
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    if d2.view().await.ok().as_ref().and_then(served).is_none() {
        return fail("still served from the snapshot while down");
    }

    // 3. The registry is back.
    let back = Instant::now();
    registry.set_down(false);
    let Some(live) = view_until(&d2, Duration::from_secs(5), |v| served(v).is_none()).await else {
        return fail("live after the registry came back");
    };
    let ms = back.elapsed().as_millis();
    println!("registry back: {}", live.status);
    println!("  live endpoints: {:?}", hosts(&live));
    if hosts(&live).iter().any(|h| h == "10.0.0.3") {
        return fail("a snapshot-only endpoint survived the live state");
    }
    let stats = consumer.stats();
    println!(
        "  snapshot_loaded={} snapshot_rejected={} metadata fetches={}",
        stats.snapshot_loaded, stats.snapshot_rejected, stats.fetch_attempts
    );
    drop(d2);
    consumer.shutdown().await;
    drop(dir);
    println!(
        "served {n} endpoint(s) from the snapshot while the registry was down; live after {ms} ms"
    );
    ExitCode::SUCCESS
}
