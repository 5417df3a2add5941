//! The IO driver of one app's watch: runs a [`WatchMachine`] against an
//! [`EtcdClient`] and exposes it as a stream of versioned [`RegistryEvent`]s.
//!
//! The driver decides nothing. It waits for whichever comes first (the IO
//! in progress: a range, a watch open or the next stream message; a new
//! verdict of the client's shared prober; the machine's next wake-up),
//! feeds it to the machine with the time, and performs the [`Step`] it gets
//! back: start a range, open a watch, drop the stream, yield an event or
//! an error. After each step it tells the prober what the machine needs
//! ([`ProbeNeed`]): its live endpoint watched, or an answer while down.
//! Probing itself is the prober's: one probe per endpoint and cadence for
//! every watch of the client together.
//!
//! The stream is a `futures::stream::unfold` over the driver: it runs only
//! while polled, spawns nothing, and dropping it drops the open HTTP
//! stream, its prober subscription and any pending sleep, so nothing
//! leaks.
//!
//! Contract with the engine: the first item is the Reset of the initial
//! range (done before the stream is returned, so a `watch()` on an
//! unreachable etcd fails at once), then one Delta per watch message that
//! changed something, and a Reset after every full re-read. An `Err` item
//! means etcd is unhealthy now (a frozen or leaderless member, or a watch
//! that could not resume within `stale_after`); the stream keeps going and
//! its next `Ok` item is a Reset. The stream never ends by itself.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{RegistryError, RegistryEvent};

use crate::config::EtcdConfig;
use crate::epoch::Epochs;
use crate::error::GatewayError;
use crate::gateway::{EtcdClient, WatchError, WatchStream};
use crate::prober::{ProbeSub, Want};
use crate::prober_machine::Verdicts;
use crate::records::KeyLayout;
use crate::stats::EtcdStats;
use crate::watch_machine::{Interruption, Next, Phase, ProbeNeed, Step, WatchMachine, WatchTiming};
use crate::wire::{RangeResponse, WatchResponse};

type Item = Result<RegistryEvent, RegistryError>;

pub use steadfast_core::EventStream;
type Opened = Result<(WatchStream, usize), GatewayError>;

/// The IO in progress.
enum Io {
    Idle,
    Range(BoxFuture<'static, Result<RangeResponse, GatewayError>>),
    Open(BoxFuture<'static, Opened>),
    Stream(WatchStream),
}

enum Event {
    Range(Result<RangeResponse, GatewayError>),
    Opened(Opened),
    Message(Option<Result<WatchResponse, WatchError>>),
    Verdicts,
    Timer,
}

struct Driver {
    client: Arc<EtcdClient>,
    config: EtcdConfig,
    machine: WatchMachine,
    io: Io,
    /// The endpoint the open watch lives on.
    watch_endpoint: usize,
    queue: VecDeque<Item>,
    stats: Arc<EtcdStats>,
    sub: ProbeSub,
    verdicts: tokio::sync::watch::Receiver<Verdicts>,
    /// The verdicts already acted on.
    seen: Verdicts,
    /// What the prober was last told.
    want: Want,
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Ranges `app` once and returns the event stream that continues from
/// there. Fails with the range's error.
pub(crate) async fn open(
    client: Arc<EtcdClient>,
    config: &EtcdConfig,
    layout: KeyLayout,
    app: &str,
    stats: Arc<EtcdStats>,
    epochs: Epochs,
) -> Result<EventStream, RegistryError> {
    let timing = WatchTiming::from_config(config);
    let mut machine = WatchMachine::new(layout, app, timing, stats.clone(), StdRng::from_entropy())
        .with_epochs(epochs);
    machine.start();
    let range = client
        .range_prefix(machine.key_prefix().as_bytes())
        .await
        .map_err(RegistryError::from)?;
    let step = machine.on_range(&range, now());
    let sub = ProbeSub::new(client.clone(), config);
    let mut verdicts = sub.verdicts();
    let seen = verdicts.borrow_and_update().clone();
    let mut driver = Driver {
        client,
        config: config.clone(),
        machine,
        io: Io::Idle,
        watch_endpoint: 0,
        queue: VecDeque::new(),
        stats,
        sub,
        verdicts,
        seen,
        want: Want::Nothing,
    };
    driver.perform(step);
    Ok(stream::unfold(driver, |mut d| async move {
        let item = d.next_item().await;
        Some((item, d))
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

async fn next_verdicts(rx: &mut tokio::sync::watch::Receiver<Verdicts>) -> Event {
    if rx.changed().await.is_err() {
        // The prober lives as long as the client this driver holds.
        std::future::pending::<()>().await;
    }
    Event::Verdicts
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
                e = next_verdicts(&mut self.verdicts) => e,
                e = sleep_until(wake) => e,
            };
            let t = now();
            let step = match event {
                Event::Range(r) => {
                    self.io = Io::Idle;
                    match r {
                        Ok(r) => self.machine.on_range(&r, t),
                        Err(e) => self.machine.on_range_failed(&e, t),
                    }
                }
                Event::Opened(r) => match r {
                    Ok((stream, endpoint)) => {
                        self.io = Io::Stream(stream);
                        self.watch_endpoint = endpoint;
                        self.machine.on_opened(t)
                    }
                    Err(e) => {
                        self.io = Io::Idle;
                        self.machine.on_interrupted(&Interruption::Open(e), t)
                    }
                },
                Event::Message(m) => match m {
                    Some(Ok(msg)) => self.machine.on_message(&msg, t),
                    Some(Err(e)) => self.machine.on_interrupted(&Interruption::Stream(e), t),
                    None => self.machine.on_interrupted(&Interruption::Ended, t),
                },
                Event::Verdicts => {
                    for step in self.on_verdicts(t) {
                        self.perform(step);
                    }
                    continue;
                }
                Event::Timer => self.machine.on_timer(t),
            };
            self.perform(step);
        }
    }

    /// Feeds what changed in the prober's verdicts to the machine: the
    /// death of the live endpoint, a fresh probe of it, etcd answering.
    fn on_verdicts(&mut self, t: Instant) -> Vec<Step> {
        let v = self.verdicts.borrow_and_update().clone();
        let e = self.watch_endpoint;
        let live = self.machine.phase() == Phase::Live;
        let mut steps = Vec::new();
        if live && v.dead_count(e) != self.seen.dead_count(e) {
            steps.push(self.machine.on_endpoint_dead(v.dead_since(e), t));
        } else {
            let fresh = v
                .last_ok(e)
                .filter(|ok| live && self.seen.last_ok(e).map(|p| p.seq) != Some(ok.seq));
            if let Some(ok) = fresh {
                steps.push(self.machine.on_probe_header(&ok.header, ok.sent, t));
            }
            if v.answered != self.seen.answered {
                steps.push(self.machine.on_answered(t));
            }
        }
        self.seen = v;
        steps
    }

    /// Performs `step`, then tells the prober what the machine needs.
    fn perform(&mut self, step: Step) {
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
        if let Some(e) = step.report {
            EtcdStats::bump(&self.stats.unavailable_reports);
            tracing::warn!(app = %self.machine.app(), error = %e, "etcd watch unhealthy");
            self.queue.push_back(Err(e));
        }
        if let Some(event) = step.event {
            self.queue.push_back(Ok(event));
        }
        let want = match self.machine.probe_need() {
            ProbeNeed::Nothing => Want::Nothing,
            ProbeNeed::Liveness => Want::Live(self.watch_endpoint),
            ProbeNeed::Answer => Want::Answer(self.config.recover_probe_interval),
        };
        if want != self.want {
            self.want = want;
            self.sub.want(want);
        }
    }
}
