//! The running engine: an `Engine` on its own thread (its actors on one
//! arbiter), the embedded `MemoryRegistry` it watches, and one subscribed
//! directory. A round writes a whole new state with
//! `MemoryRegistry::set_instances` from the benchmark's thread and measures
//! the engine thread's CPU from idle to idle again (so the frees of
//! what the round replaced count), and the time from the write returning to
//! the new state being visible in the directory's published snapshot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use steadfast::{
    Directory, DirectorySnapshot, DirectoryStatus, Engine, MemoryRegistry, MetadataInfo, Reference,
    ServiceInstance,
};
use steadfast_testkit::ScriptedFetcher;

use crate::engine_thread::EngineThread;
use crate::fixture::{APP, SUBSCRIBED};

/// How long the engine must be quiet to count as idle (longer than the
/// frees that follow a publish and of any timer a round arms).
const QUIET: Duration = Duration::from_millis(60);
/// CPU per 2 ms slice below which the engine counts as quiet.
const NOISE: Duration = Duration::from_micros(20);
/// Bound on one round (1M instances included).
const ROUND_DEADLINE: Duration = Duration::from_secs(120);

/// The engine under test, its registry and its directory.
pub struct Running {
    engine: EngineThread,
    registry: MemoryRegistry,
    dir: Directory,
    /// Runs the bounded waits on the directory's changes on this thread.
    waits: tokio::runtime::Runtime,
}

/// Waits on `dir`'s published changes (woken by each publish, no polling)
/// until `done` holds for the current snapshot, at most [`ROUND_DEADLINE`].
fn wait_for(
    waits: &tokio::runtime::Runtime,
    dir: &Directory,
    what: &str,
    mut done: impl FnMut(&DirectorySnapshot) -> bool,
) -> Result<(), Box<dyn std::error::Error>> {
    waits.block_on(async {
        let mut changes = std::pin::pin!(dir.changes());
        let bounded = tokio::time::timeout(ROUND_DEADLINE, async {
            loop {
                if done(&*dir.snapshot()?) {
                    return Ok(());
                }
                if changes.next().await.is_none() {
                    return Err(Box::<dyn std::error::Error>::from("the directory closed"));
                }
            }
        });
        bounded
            .await
            .map_err(|_| format!("{what} not within {ROUND_DEADLINE:?}"))?
    })
}

/// What one round cost.
pub struct Round {
    /// Engine thread CPU, idle to idle, in ms.
    pub cpu_ms: f64,
    /// Write returned -> the new state visible in the snapshot, in ms.
    pub visible_ms: f64,
}

impl Running {
    /// A ready engine holding `first` (resolved: `metas` are served).
    pub fn start(
        first: Vec<ServiceInstance>,
        serving: usize,
        metas: &[Arc<MetadataInfo>],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let registry = MemoryRegistry::new();
        registry.set_instances(APP, first);
        let fetcher = ScriptedFetcher::new();
        for m in metas {
            fetcher.serve(MetadataInfo::clone(m));
        }
        let r = registry.clone();
        let engine = EngineThread::spawn(move || {
            Engine::builder()
                .registry(r)
                .fetcher(fetcher)
                .seed(7)
                .start()
        })?;
        let dir = futures::executor::block_on(engine.engine.subscribe(Reference::new(
            SUBSCRIBED,
            "tri",
            [APP],
        )))?;
        let waits = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        wait_for(&waits, &dir, "ready", |s| {
            matches!(s.status(), DirectoryStatus::Ready { endpoints, degraded, .. }
                if *endpoints == serving && degraded.is_empty())
        })?;
        Ok(Self {
            engine,
            registry,
            dir,
            waits,
        })
    }

    /// Writes `next` as the app's whole state and waits until the directory
    /// shows it (`serving` endpoints, the first one `first_id`) and the
    /// engine is idle again.
    pub fn round(
        &self,
        next: Vec<ServiceInstance>,
        serving: usize,
        first_id: &str,
    ) -> Result<Round, Box<dyn std::error::Error>> {
        let (c0, quiet) = self.engine.wait_idle(QUIET, NOISE, ROUND_DEADLINE);
        if !quiet {
            return Err("the engine never went idle before the round".into());
        }
        let before = self.dir.snapshot()?.version();
        self.registry.set_instances(APP, next);
        let written = Instant::now();
        wait_for(&self.waits, &self.dir, "the new state visible", |s| {
            let first = s.sets().first().and_then(|set| set.get(0));
            s.version() > before
                && s.len() == serving
                && first.is_some_and(|e| e.instance_id() == first_id)
        })?;
        let visible_ms = written.elapsed().as_secs_f64() * 1e3;
        let (c1, quiet) = self.engine.wait_idle(QUIET, NOISE, ROUND_DEADLINE);
        if !quiet {
            return Err("the engine never went idle after the round".into());
        }
        Ok(Round {
            cpu_ms: c1.saturating_sub(c0) as f64 / 1e6,
            visible_ms,
        })
    }

    /// What the directory publishes now.
    pub fn snapshot(&self) -> Result<Arc<DirectorySnapshot>, Box<dyn std::error::Error>> {
        Ok(self.dir.snapshot()?)
    }

    /// Shuts the engine down.
    pub fn stop(self) {
        self.engine.stop();
    }
}
