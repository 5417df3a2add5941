//! The platform's floor under every one-change figure: the CPU an idle actix
//! `System` thread spends when another thread wakes it with one message and
//! it does nothing with it, read the same way as the engine's (the thread's
//! `schedstat` time, from idle to quiet again). One change always costs at
//! least one such wake: the registry's event reaches the engine thread from
//! the writer's.

use std::time::Duration;

use futures::StreamExt;

use crate::engine_thread::ThreadCpu;
use crate::BoxError;

/// The wake floor: median, min and p90 of `rounds` wakes.
#[derive(Clone, Copy, Debug)]
pub struct WakeFloor {
    /// Median CPU of one wake.
    pub median: Duration,
    /// Smallest.
    pub min: Duration,
    /// 90th percentile.
    pub p90: Duration,
}

/// Measures `rounds` wakes (each after 40 ms idle, as the engine's rounds).
pub fn measure(rounds: usize) -> Result<WakeFloor, BoxError> {
    let (tx, mut rx) = futures::channel::mpsc::unbounded::<u64>();
    let (cpu_tx, cpu_rx) = std::sync::mpsc::channel();
    let join = std::thread::Builder::new()
        .name("wake-floor".into())
        .spawn(move || {
            let _ = cpu_tx.send(ThreadCpu::current().map_err(|e| e.to_string()));
            actix_rt::System::new().block_on(async move {
                while let Some(v) = rx.next().await {
                    std::hint::black_box(v);
                }
            });
        })?;
    let cpu = cpu_rx.recv_timeout(Duration::from_secs(10))??;
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        std::thread::sleep(Duration::from_millis(40));
        let c0 = cpu.nanos();
        tx.unbounded_send(i as u64)?;
        std::thread::sleep(Duration::from_millis(5));
        samples.push(cpu.nanos().saturating_sub(c0));
    }
    drop(tx);
    join.join().map_err(|_| "wake-floor thread panicked")?;
    samples.sort_unstable();
    let at = |q: usize| {
        let k = (samples.len().saturating_sub(1) * q) / 100;
        Duration::from_nanos(samples.get(k).copied().unwrap_or(0))
    };
    Ok(WakeFloor {
        median: at(50),
        min: at(0),
        p90: at(90),
    })
}
