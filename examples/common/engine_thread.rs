//! The engine under test runs in its own actix `System` on a dedicated OS
//! thread, so its CPU time can be read apart from the benchmark's (which
//! drives the registry and polls directories from the main thread).
//!
//! CPU time is the thread's `sum_exec_runtime` from
//! `/proc/self/task/<tid>/schedstat` (nanoseconds, the same clock as
//! `CLOCK_THREAD_CPUTIME_ID`), readable from any thread without `unsafe`.
//! The engine starts no other thread (every actor lives on this System's
//! one arbiter), so this thread is all of the engine's CPU.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use steadfast::{Engine, EngineError};
use tokio::sync::oneshot;

/// A running engine on its own thread.
pub struct EngineThread {
    /// Handle on the engine (usable from any thread).
    pub engine: Engine,
    cpu: ThreadCpu,
    stop: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<()>>,
}

/// Reads one thread's CPU time.
#[derive(Clone, Debug)]
pub struct ThreadCpu {
    path: String,
}

impl ThreadCpu {
    /// The calling thread's CPU clock.
    pub fn current() -> std::io::Result<Self> {
        let link = std::fs::read_link("/proc/thread-self")?;
        let tid = link
            .to_string_lossy()
            .rsplit('/')
            .next()
            .and_then(|t| t.parse::<u32>().ok())
            .ok_or_else(|| std::io::Error::other("no tid in /proc/thread-self"))?;
        let path = format!("/proc/self/task/{tid}/schedstat");
        std::fs::read_to_string(&path)?;
        Ok(Self { path })
    }

    /// CPU time consumed so far, in nanoseconds (0 if unreadable).
    pub fn nanos(&self) -> u64 {
        std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }
}

impl EngineThread {
    /// Starts a System on a new thread and the engine `build` returns in it.
    pub fn spawn<F>(build: F) -> Result<Self, Box<dyn std::error::Error>>
    where
        F: FnOnce() -> Result<Engine, EngineError> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let join = std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let cpu = ThreadCpu::current();
                let system = actix_rt::System::new();
                system.block_on(async move {
                    let engine = match (cpu, build()) {
                        (Ok(cpu), Ok(engine)) => {
                            let _ = tx.send(Ok((engine.clone(), cpu)));
                            engine
                        }
                        (Err(e), _) => return drop(tx.send(Err(e.to_string()))),
                        (_, Err(e)) => return drop(tx.send(Err(e.to_string()))),
                    };
                    let _ = stopped.await;
                    engine.shutdown().await;
                });
            })?;
        let (engine, cpu) = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|e| format!("engine thread did not start: {e}"))??;
        Ok(Self {
            engine,
            cpu,
            stop: Some(stop),
            join: Some(join),
        })
    }

    /// The engine thread's CPU clock.
    pub fn cpu(&self) -> &ThreadCpu {
        &self.cpu
    }

    /// Waits (bounded by `deadline`) until the engine thread has used less
    /// than `noise` CPU in each 2 ms slice for `quiet`; returns its CPU time
    /// then and whether it went quiet before the deadline.
    pub fn wait_idle(&self, quiet: Duration, noise: Duration, deadline: Duration) -> (u64, bool) {
        let start = Instant::now();
        let noise = u64::try_from(noise.as_nanos()).unwrap_or(u64::MAX);
        let (mut last, mut quiet_since) = (self.cpu.nanos(), Instant::now());
        loop {
            std::thread::sleep(Duration::from_millis(2));
            let now_cpu = self.cpu.nanos();
            if now_cpu.saturating_sub(last) > noise {
                quiet_since = Instant::now();
            }
            last = now_cpu;
            if quiet_since.elapsed() >= quiet {
                return (now_cpu, true);
            }
            if start.elapsed() > deadline {
                return (now_cpu, false);
            }
        }
    }

    /// Shuts the engine down and joins its thread.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        self.stop_now();
    }
}
