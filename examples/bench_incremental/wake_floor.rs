//! The platform's floor under every one-change figure: the CPU an idle actix
//! `System` thread spends when another thread wakes it with one message and
//! it does nothing with it, read the same way as the engine's (the thread's
//! `schedstat` time, from idle to quiet again). One change always costs at
//! least one such wake: the registry's event crosses from the writer's
//! thread to the engine's. Beside it, the same wake handed on through three
//! actors (each forwards it to the next, as a change crosses the registry
//! actor, a resolver and a directory): what the hops themselves add.

use std::time::Duration;

use actix::prelude::*;
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
    /// Median CPU of one wake handed on through three actors.
    pub three_actors: Duration,
}

/// A message handed on from actor to actor.
#[derive(Message)]
#[rtype(result = "()")]
struct Hop(u64);

/// Forwards each message to the next actor; the last one drops it.
struct Forward {
    next: Option<Recipient<Hop>>,
}

impl Actor for Forward {
    type Context = Context<Self>;
}

impl Handler<Hop> for Forward {
    type Result = ();
    fn handle(&mut self, msg: Hop, _: &mut Context<Self>) {
        match &self.next {
            Some(next) => next.do_send(Hop(msg.0.wrapping_add(1))),
            None => drop(std::hint::black_box(msg.0)),
        }
    }
}

/// Sorted samples in ns -> the value at quantile `q` (percent).
fn at(samples: &[u64], q: usize) -> Duration {
    let k = (samples.len().saturating_sub(1) * q) / 100;
    Duration::from_nanos(samples.get(k).copied().unwrap_or(0))
}

/// `rounds` wakes (each after 40 ms idle, as the engine's rounds) of a
/// thread whose first message goes to `wake`, sorted.
fn rounds(
    rounds: usize,
    start: impl FnOnce(futures::channel::mpsc::UnboundedReceiver<u64>) + Send + 'static,
) -> Result<Vec<u64>, BoxError> {
    let (tx, rx) = futures::channel::mpsc::unbounded::<u64>();
    let (cpu_tx, cpu_rx) = std::sync::mpsc::channel();
    let join = std::thread::Builder::new()
        .name("wake-floor".into())
        .spawn(move || {
            let _ = cpu_tx.send(ThreadCpu::current().map_err(|e| e.to_string()));
            start(rx);
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
    Ok(samples)
}

/// Measures `n` wakes of each kind.
pub fn measure(n: usize) -> Result<WakeFloor, BoxError> {
    let bare = rounds(n, |mut rx| {
        actix_rt::System::new().block_on(async move {
            while let Some(v) = rx.next().await {
                std::hint::black_box(v);
            }
        });
    })?;
    let chained = rounds(n, |mut rx| {
        actix_rt::System::new().block_on(async move {
            let mut next: Option<Recipient<Hop>> = None;
            for _ in 0..3 {
                next = Some(Forward { next: next.take() }.start().recipient());
            }
            let Some(first) = next else { return };
            while let Some(v) = rx.next().await {
                first.do_send(Hop(v));
            }
        });
    })?;
    Ok(WakeFloor {
        median: at(&bare, 50),
        min: at(&bare, 0),
        p90: at(&bare, 90),
        three_actors: at(&chained, 50),
    })
}
