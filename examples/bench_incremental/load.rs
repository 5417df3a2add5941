//! Sustained event rates and a burst.
//!
//! Every event restarts one ordinary instance (round robin over the app, a
//! new incarnation each time). Every 20 ms one event is a marker restart
//! instead: a probe whose sequence number shows up in the published snapshot once the
//! directory has caught up to it (events are applied in registry order, so
//! a visible probe means everything pushed before it is visible too). The
//! directory's lag is the time from a probe's registry call until a poll
//! (every ~1 ms) sees it.
//!
//! - Sustained: a ladder of offered rates, a few seconds each; a step keeps
//!   up when every probe was visible within 100 ms. The figure is the
//!   achieved rate (events the registry accepted per second) of the best
//!   step that kept up.
//! - Burst: 1000 events as fast as the registry takes them, the last one a
//!   probe; settle = last registry call returned -> probe visible.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use tokio::sync::Semaphore;

use crate::fixture::{marker, picked_marker, plain, Fixture, Writer, ETCD_CONCURRENCY};
use crate::BoxError;

/// Interval between probes.
const PROBE_EVERY: Duration = Duration::from_millis(20);
/// A step keeps up when no probe lags more than this.
pub const MAX_LAG: Duration = Duration::from_millis(100);
/// Bound on catching up after a step (more is far behind anyway).
const CATCH_UP: Duration = Duration::from_secs(10);
/// Bound on a burst settling.
const SETTLE: Duration = Duration::from_secs(30);
/// Bound on pushing one burst.
const BURST_PUSH: Duration = Duration::from_secs(15);

/// One step of the ladder.
#[derive(Clone, Debug)]
pub struct Step {
    /// Offered events/s.
    pub offered: f64,
    /// Events the registry accepted per second of pushing.
    pub achieved: f64,
    /// Worst probe lag (None: a probe was never seen within the bound).
    pub max_lag: Option<Duration>,
    /// After the last push: until the final probe was visible.
    pub catch_up: Option<Duration>,
}

impl Step {
    /// Whether the directory kept up.
    pub fn kept_up(&self) -> bool {
        self.max_lag.is_some_and(|l| l <= MAX_LAG)
    }
}

/// Burst outcome.
#[derive(Clone, Debug, Default)]
pub struct Burst {
    /// Events pushed (fewer than asked when pushing hit its bound).
    pub events: usize,
    /// Time to push them.
    pub push: Duration,
    /// Last registry call returned -> visible (None: not within bound).
    pub settle: Option<Duration>,
    /// Whether the engine was idle when the burst began.
    pub engine_was_idle: bool,
}

/// Probes issued (sequence, time of the registry call), in order.
#[derive(Default)]
struct Probes {
    issued: RefCell<Vec<(u64, Instant)>>,
    seen: Cell<usize>,
    max_lag: Cell<Duration>,
}

impl Probes {
    /// Records what one poll saw (`seq` = marker sequence picked).
    fn observe(&self, seq: Option<u64>) {
        let (issued, now) = (self.issued.borrow(), Instant::now());
        let Some(seq) = seq else { return };
        while let Some((s, t)) = issued.get(self.seen.get()) {
            if *s > seq {
                break;
            }
            self.max_lag.set(self.max_lag.get().max(now - *t));
            self.seen.set(self.seen.get() + 1);
        }
    }

    /// Age of the oldest probe not seen yet.
    fn oldest_unseen(&self) -> Option<Duration> {
        self.issued
            .borrow()
            .get(self.seen.get())
            .map(|(_, t)| t.elapsed())
    }
}

impl Fixture {
    /// Pushes `offered` events/s for `secs`, then waits for the final probe.
    pub async fn step(&mut self, offered: f64, secs: Duration) -> Result<Step, BoxError> {
        let probes = Rc::new(Probes::default());
        let done = Rc::new(Cell::new(false));
        let producer = {
            let (probes, done, writer) = (probes.clone(), done.clone(), self.writer.clone());
            let (revisions, n, marker_gen) = (self.revisions.clone(), self.n, self.marker_gen);
            let mut seq = self.seq;
            actix_rt::spawn(async move {
                let permits = Arc::new(Semaphore::new(ETCD_CONCURRENCY));
                let marker_busy = Rc::new(Cell::new(false));
                let accepted = Rc::new(Cell::new(0u64));
                let (start, mut pushed, mut last_probe) = (Instant::now(), 0u64, Instant::now());
                while start.elapsed() < secs {
                    let due = (offered * start.elapsed().as_secs_f64()) as u64;
                    while pushed < due && start.elapsed() < secs {
                        seq += 1;
                        let probe = last_probe.elapsed() >= PROBE_EVERY && !marker_busy.get();
                        let inst = if probe {
                            last_probe = Instant::now();
                            probes.issued.borrow_mut().push((seq, Instant::now()));
                            marker(&revisions, marker_gen, seq)
                        } else {
                            plain(&revisions, (seq as usize) % (n - 1), seq)
                        };
                        push(
                            &writer,
                            inst,
                            &permits,
                            &accepted,
                            probe.then_some(&marker_busy),
                        )
                        .await;
                        pushed += 1;
                        if pushed % 64 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let _ = permits.acquire_many(ETCD_CONCURRENCY as u32).await;
                let push_time = start.elapsed();
                // The final probe, after everything else was accepted.
                seq += 1;
                probes.issued.borrow_mut().push((seq, Instant::now()));
                let _ = writer.put(marker(&revisions, marker_gen, seq)).await;
                done.set(true);
                (seq, accepted.get(), push_time)
            })
        };
        let mut ended: Option<Instant> = None;
        loop {
            probes.observe(self.pick_marker_seq().await?);
            if done.get() && ended.is_none() {
                ended = Some(Instant::now());
            }
            let caught_up = probes.oldest_unseen().is_none();
            if ended.is_some() && caught_up {
                break;
            }
            if ended.is_some_and(|e| e.elapsed() > CATCH_UP) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let (seq, accepted, push_time) = producer.await?;
        self.seq = seq;
        let all_seen = probes.oldest_unseen().is_none();
        let last = probes.issued.borrow().last().map(|(_, t)| *t);
        Ok(Step {
            offered,
            achieved: accepted as f64 / push_time.as_secs_f64(),
            max_lag: all_seen.then(|| probes.max_lag.get()),
            catch_up: all_seen.then(|| last.map(|t| t.elapsed()).unwrap_or_default()),
        })
    }

    /// The marker sequence the published snapshot shows now (None: another).
    async fn pick_marker_seq(&self) -> Result<Option<u64>, BoxError> {
        picked_marker(&self.dir, &self.marker_id()).await
    }

    /// Pushes `events` events as fast as the registry takes them, the last a
    /// probe, and waits for it.
    pub async fn burst(&mut self, events: usize) -> Result<Burst, BoxError> {
        let start = Instant::now();
        let first = self.seq + 1;
        let others: Vec<_> = (0..events.saturating_sub(1) as u64)
            .map(|j| first + j)
            .collect();
        let mut pushed = 0usize;
        match &self.writer {
            Writer::Memory(_) => {
                for &s in &others {
                    if start.elapsed() > BURST_PUSH {
                        break;
                    }
                    self.writer
                        .put(plain(&self.revisions, (s as usize) % (self.n - 1), s))
                        .await?;
                    pushed += 1;
                }
            }
            Writer::Etcd(..) | Writer::Nacos(..) => {
                let (w, revs, n) = (&self.writer, &self.revisions, self.n);
                let results: Vec<_> = stream::iter(others.iter().copied())
                    .take_while(|_| futures::future::ready(start.elapsed() <= BURST_PUSH))
                    .map(|s| w.put(plain(revs, (s as usize) % (n - 1), s)))
                    .buffer_unordered(ETCD_CONCURRENCY)
                    .collect()
                    .await;
                pushed = results.len();
                results.into_iter().collect::<Result<Vec<()>, _>>()?;
            }
        }
        self.seq = first + others.len() as u64;
        let probe = self.next_seq();
        let id = self.marker_id();
        self.writer
            .put(marker(&self.revisions, self.marker_gen, probe))
            .await?;
        let last = Instant::now();
        let push = last - start;
        let settle = loop {
            if picked_marker(&self.dir, &id)
                .await?
                .is_some_and(|s| s >= probe)
            {
                break Some(last.elapsed());
            }
            if last.elapsed() > SETTLE {
                break None;
            }
            std::thread::sleep(Duration::from_micros(20));
        };
        Ok(Burst {
            events: pushed + 1,
            push,
            settle,
            engine_was_idle: true,
        })
    }
}

/// One event through `writer`: synchronous on memory; on etcd a spawned
/// put holding one of `permits` (the marker's also holds `busy`).
async fn push(
    writer: &Writer,
    inst: steadfast::ServiceInstance,
    permits: &Arc<Semaphore>,
    accepted: &Rc<Cell<u64>>,
    busy: Option<&Rc<Cell<bool>>>,
) {
    match writer {
        Writer::Memory(_) => {
            if writer.put(inst).await.is_ok() {
                accepted.set(accepted.get() + 1);
            }
        }
        Writer::Etcd(..) | Writer::Nacos(..) => {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let (w, acc, busy) = (writer.clone(), accepted.clone(), busy.cloned());
            if let Some(b) = &busy {
                b.set(true);
            }
            actix_rt::spawn(async move {
                if w.put(inst).await.is_ok() {
                    acc.set(acc.get() + 1);
                }
                if let Some(b) = busy {
                    b.set(false);
                }
                drop(permit);
            });
        }
    }
}
