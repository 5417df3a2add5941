//! The IO driver of one app's watch: runs a [`WatchMachine`] against an
//! [`EtcdClient`] and exposes it as the core's [`SnapshotStream`].
//!
//! The driver decides nothing. It waits for whichever comes first (the IO
//! in progress: a range, a watch open or the next stream message; the probe
//! in flight; the machine's next wake-up), feeds it to the machine with the
//! time, and performs the [`Step`] it gets back: start a range, open a
//! watch, drop the stream, start a probe, demote an endpoint, yield a
//! snapshot or an error.
//!
//! The stream is a `futures::stream::unfold` over the driver: it runs only
//! while polled, spawns nothing, and dropping it drops the open HTTP
//! stream, the probe and any pending sleep, so nothing leaks.
//!
//! Contract with the engine: the first item is the snapshot of the initial
//! range (done before the stream is returned, so a `watch()` on an
//! unreachable etcd fails at once). Afterwards an `Err` item means etcd is
//! unhealthy now (a frozen or leaderless member, or a watch that could not
//! resume within `stale_after`); the stream keeps going and its next `Ok`
//! item is a fresh, authoritative snapshot. The stream never ends by itself.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{RegistryError, ServiceInstance, SnapshotStream};

use crate::config::EtcdConfig;
use crate::error::GatewayError;
use crate::gateway::{EtcdClient, WatchError, WatchStream};
use crate::records::KeyLayout;
use crate::stats::EtcdStats;
use crate::watch_machine::{Interruption, Next, ProbeTarget, Step, WatchMachine, WatchTiming};
use crate::wire::{RangeResponse, ResponseHeader, WatchResponse};

type Item = Result<Vec<ServiceInstance>, RegistryError>;
type Opened = Result<(WatchStream, usize), GatewayError>;

/// The IO in progress.
enum Io {
    Idle,
    Range(BoxFuture<'static, Result<RangeResponse, GatewayError>>),
    Open(BoxFuture<'static, Opened>),
    Stream(WatchStream),
}

/// A probe in flight.
struct Flight {
    seq: u64,
    endpoint: usize,
    fut: BoxFuture<'static, Result<ResponseHeader, GatewayError>>,
}

enum Event {
    Range(Result<RangeResponse, GatewayError>),
    Opened(Opened),
    Message(Option<Result<WatchResponse, WatchError>>),
    Probe(u64, usize, Result<ResponseHeader, GatewayError>),
    Timer,
}

struct Driver {
    client: Arc<EtcdClient>,
    config: EtcdConfig,
    machine: WatchMachine,
    io: Io,
    probe: Option<Flight>,
    /// The endpoint the open watch lives on.
    watch_endpoint: usize,
    queue: VecDeque<Item>,
    stats: Arc<EtcdStats>,
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Ranges `app` once and returns the snapshot stream that continues from
/// there. Fails with the range's error.
pub(crate) async fn open(
    client: Arc<EtcdClient>,
    config: &EtcdConfig,
    layout: KeyLayout,
    app: &str,
    stats: Arc<EtcdStats>,
) -> Result<SnapshotStream, RegistryError> {
    let timing = WatchTiming::from_config(config);
    let mut machine = WatchMachine::new(layout, app, timing, stats.clone(), StdRng::from_entropy());
    machine.start();
    let range = client
        .range_prefix(machine.key_prefix().as_bytes())
        .await
        .map_err(RegistryError::from)?;
    let step = machine.on_range(&range, now());
    let mut driver = Driver {
        client,
        config: config.clone(),
        machine,
        io: Io::Idle,
        probe: None,
        watch_endpoint: 0,
        queue: VecDeque::new(),
        stats,
    };
    driver.perform(step, None);
    Ok(stream::unfold(driver, |mut d| async move {
        let item = d.next_item().await;
        Some((item.map(Arc::new), d))
    })
    .boxed())
}

async fn next_io(io: &mut Io) -> Event {
    match io {
        Io::Idle => std::future::pending().await,
        Io::Range(f) => Event::Range(f.as_mut().await),
        Io::Open(f) => Event::Opened(f.as_mut().await),
        Io::Stream(s) => Event::Message(s.next().await),
    }
}

async fn next_probe(probe: &mut Option<Flight>) -> Event {
    match probe {
        None => std::future::pending().await,
        Some(f) => Event::Probe(f.seq, f.endpoint, f.fut.as_mut().await),
    }
}

async fn sleep_until(wake: Option<Instant>) -> Event {
    match wake {
        None => std::future::pending().await,
        Some(w) => {
            tokio::time::sleep_until(tokio::time::Instant::from_std(w)).await;
            Event::Timer
        }
    }
}

impl Driver {
    async fn next_item(&mut self) -> Item {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return item;
            }
            let wake = self.machine.next_wake();
            let event = tokio::select! {
                e = next_io(&mut self.io) => e,
                e = next_probe(&mut self.probe) => e,
                e = sleep_until(wake) => e,
            };
            let t = now();
            let (step, probed) = match event {
                Event::Range(r) => {
                    self.io = Io::Idle;
                    match r {
                        Ok(r) => (self.machine.on_range(&r, t), None),
                        Err(e) => (self.machine.on_range_failed(&e, t), None),
                    }
                }
                Event::Opened(r) => match r {
                    Ok((stream, endpoint)) => {
                        self.io = Io::Stream(stream);
                        self.watch_endpoint = endpoint;
                        (self.machine.on_opened(t), None)
                    }
                    Err(e) => {
                        self.io = Io::Idle;
                        (self.machine.on_interrupted(&Interruption::Open(e), t), None)
                    }
                },
                Event::Message(m) => {
                    let step = match m {
                        Some(Ok(msg)) => self.machine.on_message(&msg, t),
                        Some(Err(e)) => self.machine.on_interrupted(&Interruption::Stream(e), t),
                        None => self.machine.on_interrupted(&Interruption::Ended, t),
                    };
                    (step, None)
                }
                Event::Probe(seq, endpoint, r) => {
                    self.probe = None;
                    (self.machine.on_probe(seq, r.as_ref(), t), Some(endpoint))
                }
                Event::Timer => (self.machine.on_timer(t), None),
            };
            self.perform(step, probed);
        }
    }

    /// Performs `step`; `probed` is the endpoint of the probe whose outcome
    /// produced it, if one did.
    fn perform(&mut self, step: Step, probed: Option<usize>) {
        if step.demote {
            let dead = probed.unwrap_or(self.watch_endpoint);
            tracing::debug!(app = %self.machine.app(), endpoint = dead, "demoting etcd endpoint");
            self.client.demote(dead);
        }
        match step.next {
            Next::Continue => {}
            Next::Wait => self.io = Io::Idle,
            Next::Range => {
                let client = self.client.clone();
                let prefix = self.machine.key_prefix();
                self.io =
                    Io::Range(async move { client.range_prefix(prefix.as_bytes()).await }.boxed());
            }
            Next::Watch { from } => {
                let client = self.client.clone();
                let prefix = self.machine.key_prefix();
                let notify = self.config.progress_notify;
                self.io = Io::Open(
                    async move { client.open_watch(prefix.as_bytes(), from, notify).await }.boxed(),
                );
            }
        }
        if let Some(p) = step.probe {
            let endpoint = match p.target {
                ProbeTarget::WatchEndpoint => self.watch_endpoint,
                ProbeTarget::Current => self.client.current_index(),
            };
            let client = self.client.clone();
            let key = self.machine.key_prefix();
            let timeout = self.config.probe_timeout;
            self.probe = Some(Flight {
                seq: p.seq,
                endpoint,
                fut: async move { client.probe(endpoint, key.as_bytes(), timeout).await }.boxed(),
            });
        }
        if let Some(e) = step.report {
            EtcdStats::bump(&self.stats.unavailable_reports);
            tracing::warn!(app = %self.machine.app(), error = %e, "etcd watch unhealthy");
            self.queue.push_back(Err(e));
        }
        if let Some(snapshot) = step.snapshot {
            self.queue.push_back(Ok(snapshot));
        }
    }
}
