//! The watch hub: one task per [`crate::EtcdRegistry`] that drives the
//! [`WatchMachine`] of every watched app over the registry's shared watch
//! streams and batched ranges.
//!
//! The hub decides nothing. Each machine stays the sans-IO watch of one app
//! (resume revision, resync, epochs, liveness, reports); the [`Mux`]
//! plans the shared streams and the [`RangeBatcher`] the ranges. The hub
//! waits for whichever comes first (a subscribe or an unsubscribe, a range
//! batch answered, a shared stream opened or its next message, a new
//! verdict of the client's prober, the next machine or planner wake-up),
//! feeds it to the machines concerned with the time, and performs what
//! they ask:
//!
//! * `Range`: the app queues for the next batch (one txn of up to
//!   `range_batch_size` prefix ranges, at most `range_batches_in_flight`
//!   at once), and its watch leaves the shared stream;
//! * `Watch`: the app asks the planner for a watch; when a stream is
//!   opened, each app's create starts from its own `last revision + 1`;
//! * `Wait`: the app leaves the shared stream (what its watch still sends
//!   is ignored) until its timer fires;
//! * a message is routed by `watch_id` to its app; a stream that breaks,
//!   ends or fails to open interrupts every app on it, each of which then
//!   resumes on its own schedule (a broken stream owes each a re-read);
//! * verdicts of the prober go to the apps on the endpoint concerned; the
//!   hub tells the prober what the apps need, one subscription per stream
//!   plus one for "answered again".
//!
//! Events go to each subscriber through a bounded [`EventQueue`]. The hub ends
//! when its registry is gone and every subscriber left; if it is dropped
//! (its runtime shut down), every feed is closed, ending the streams.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{EventStream, RegistryError};
use tokio::sync::{mpsc, oneshot};

use crate::config::EtcdConfig;
use crate::epoch::Epochs;
use crate::error::GatewayError;
use crate::gateway::{EtcdClient, WatchError, WatchStream};
use crate::mux::{Mux, MuxPolicy, RangeBatcher, Slot, SubKey};
use crate::prober::{ProbeSub, Want};
use crate::prober_machine::Verdicts;
use crate::records::KeyLayout;
use crate::stats::EtcdStats;
use crate::watch_machine::{Interruption, Next, ProbeNeed, Step, WatchMachine, WatchTiming};
use crate::wire::{RangeResponse, WatchResponse};
use steadfast_core::{event_stream, EventQueue, Leavers};

type Opened = Result<(WatchStream, usize), GatewayError>;
type Ranged = (Vec<SubKey>, Result<Vec<RangeResponse>, GatewayError>);
type Reply = oneshot::Sender<Result<EventStream, RegistryError>>;

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A request to the hub.
pub(crate) struct Subscribe {
    app: String,
    reply: Reply,
}

/// Subscribe requests queued for the hub at most: a caller past it waits
/// (its own call deadline bounds the wait).
const SUBSCRIBE_QUEUE: usize = 256;

/// The registry's handle on its hub.
#[derive(Debug, Clone)]
pub(crate) struct HubHandle {
    cmd: mpsc::Sender<Subscribe>,
}

impl HubHandle {
    /// Spawns a hub on the current runtime.
    pub(crate) fn spawn(
        client: Arc<EtcdClient>,
        config: &EtcdConfig,
        layout: KeyLayout,
        stats: Arc<EtcdStats>,
        epochs: Epochs,
    ) -> Self {
        let (cmd, cmd_rx) = mpsc::channel(SUBSCRIBE_QUEUE);
        let hub = Hub::new(client, config, layout, stats, epochs);
        tokio::spawn(hub.run(cmd_rx));
        Self { cmd }
    }

    /// Whether the hub still takes subscriptions.
    pub(crate) fn is_alive(&self) -> bool {
        !self.cmd.is_closed()
    }

    /// Subscribes to `app`: resolves once its first range answered (with
    /// the stream, whose first item is that Reset) or failed. `None` when
    /// the hub is gone.
    pub(crate) async fn subscribe(
        &self,
        app: &str,
    ) -> Option<oneshot::Receiver<Result<EventStream, RegistryError>>> {
        let (reply, rx) = oneshot::channel();
        let s = Subscribe {
            app: app.to_string(),
            reply,
        };
        self.cmd.send(s).await.ok().map(|()| rx)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SubIo {
    Idle,
    Ranging,
    Watch,
}

struct Sub {
    machine: WatchMachine,
    prefix: String,
    feed: Option<Arc<EventQueue>>,
    reply: Option<Reply>,
    io: SubIo,
    wake: Option<Instant>,
    need: ProbeNeed,
}

enum SlotIo {
    Idle,
    Opening(BoxFuture<'static, Opened>),
    Open(WatchStream),
}

enum Event {
    Subscribe(Option<Subscribe>),
    Leave,
    Ranged(Ranged),
    Opened(Slot, Opened),
    Message(Slot, Option<Result<WatchResponse, WatchError>>),
    Verdicts,
    Timer,
}

struct Hub {
    client: Arc<EtcdClient>,
    config: EtcdConfig,
    layout: KeyLayout,
    stats: Arc<EtcdStats>,
    epochs: Epochs,
    subs: HashMap<SubKey, Sub>,
    next_key: SubKey,
    mux: Mux,
    ranges: RangeBatcher,
    range_io: FuturesUnordered<BoxFuture<'static, Ranged>>,
    streams: [SlotIo; 2],
    endpoint: [usize; 2],
    timers: BTreeSet<(Instant, SubKey)>,
    /// Prober subscriptions: one per stream, one for "answered again".
    probes: [ProbeSub; 3],
    wants: [Want; 3],
    wants_dirty: bool,
    verdicts: tokio::sync::watch::Receiver<Verdicts>,
    seen: Verdicts,
    /// Subscribers whose stream was dropped (bounded by the subscriptions).
    leavers: Arc<Leavers<SubKey>>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        for s in self.subs.values() {
            if let Some(f) = &s.feed {
                f.close();
            }
        }
    }
}

async fn next_slot(io: &mut SlotIo) -> Result<Opened, Option<Result<WatchResponse, WatchError>>> {
    match io {
        SlotIo::Idle => std::future::pending().await,
        SlotIo::Opening(f) => Ok(f.as_mut().await),
        SlotIo::Open(s) => Err(s.next().await),
    }
}

async fn next_range(io: &mut FuturesUnordered<BoxFuture<'static, Ranged>>) -> Ranged {
    match io.next().await {
        Some(r) => r,
        None => std::future::pending().await,
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        None => std::future::pending().await,
        Some(w) => tokio::time::sleep_until(tokio::time::Instant::from_std(w)).await,
    }
}

async fn next_verdicts(rx: &mut tokio::sync::watch::Receiver<Verdicts>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Hub {
    fn new(
        client: Arc<EtcdClient>,
        config: &EtcdConfig,
        layout: KeyLayout,
        stats: Arc<EtcdStats>,
        epochs: Epochs,
    ) -> Self {
        let probes = [0, 1, 2].map(|_| ProbeSub::new(client.clone(), config));
        let mut verdicts = probes[0].verdicts();
        let seen = verdicts.borrow_and_update().clone();
        Self {
            leavers: Arc::default(),
            mux: Mux::new(MuxPolicy {
                debounce: config.watch_rebuild_debounce,
                max_delay: config.watch_rebuild_max_delay,
                side_limit: config.side_stream_limit,
            }),
            ranges: RangeBatcher::new(config.range_batch_size, config.range_batches_in_flight),
            client,
            config: config.clone(),
            layout,
            stats,
            epochs,
            subs: HashMap::new(),
            next_key: 0,
            range_io: FuturesUnordered::new(),
            streams: [SlotIo::Idle, SlotIo::Idle],
            endpoint: [0, 0],
            timers: BTreeSet::new(),
            probes,
            wants: [Want::Nothing; 3],
            wants_dirty: false,
            verdicts,
            seen,
        }
    }

    async fn run(mut self, mut cmd: mpsc::Receiver<Subscribe>) {
        let leavers = self.leavers.clone();
        let mut registry_gone = false;
        loop {
            if registry_gone && self.subs.is_empty() {
                return;
            }
            let wake = [
                self.timers.first().map(|(t, _)| *t),
                self.mux.next_wake(self.ranges.busy()),
            ]
            .into_iter()
            .flatten()
            .min();
            let [main, side] = &mut self.streams;
            let event = tokio::select! {
                c = cmd.recv(), if !registry_gone => Event::Subscribe(c),
                () = leavers.wait() => Event::Leave,
                r = next_range(&mut self.range_io) => Event::Ranged(r),
                r = next_slot(main) => match r {
                    Ok(o) => Event::Opened(Slot::Main, o),
                    Err(m) => Event::Message(Slot::Main, m),
                },
                r = next_slot(side) => match r {
                    Ok(o) => Event::Opened(Slot::Side, o),
                    Err(m) => Event::Message(Slot::Side, m),
                },
                () = next_verdicts(&mut self.verdicts) => Event::Verdicts,
                () = sleep_until(wake) => Event::Timer,
            };
            let t = now();
            match event {
                Event::Subscribe(None) => registry_gone = true,
                Event::Subscribe(Some(s)) => {
                    self.subscribe(s, t);
                    while let Ok(s) = cmd.try_recv() {
                        self.subscribe(s, t);
                    }
                }
                Event::Leave => {
                    for k in leavers.take() {
                        self.remove(k);
                    }
                }
                Event::Ranged(r) => self.on_ranged(r, t),
                Event::Opened(slot, o) => self.on_opened(slot, o, t),
                Event::Message(slot, m) => self.on_message(slot, m, t),
                Event::Verdicts => self.on_verdicts(t),
                Event::Timer => self.on_timer(t),
            }
            self.drive(t);
        }
    }

    fn subscribe(&mut self, s: Subscribe, t: Instant) {
        let k = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        let timing = WatchTiming::from_config(&self.config);
        let mut machine = WatchMachine::new(
            self.layout.clone(),
            &s.app,
            timing,
            self.stats.clone(),
            StdRng::from_entropy(),
        )
        .with_epochs(self.epochs.clone());
        let step = machine.start();
        let sub = Sub {
            prefix: machine.key_prefix(),
            machine,
            feed: None,
            reply: Some(s.reply),
            io: SubIo::Idle,
            wake: None,
            need: ProbeNeed::Nothing,
        };
        self.subs.insert(k, sub);
        self.perform(k, step, t);
    }

    fn remove(&mut self, k: SubKey) {
        if let Some(s) = self.subs.remove(&k) {
            self.mux.leave(k);
            self.ranges.remove(k);
            if let Some(w) = s.wake {
                self.timers.remove(&(w, k));
            }
            if let Some(f) = s.feed {
                f.close();
            }
            self.wants_dirty = true;
        }
    }

    /// Feeds one input to `k`'s machine and performs the step.
    fn with(&mut self, k: SubKey, t: Instant, f: impl FnOnce(&mut WatchMachine) -> Step) {
        if let Some(s) = self.subs.get_mut(&k) {
            let step = f(&mut s.machine);
            self.perform(k, step, t);
        }
    }

    fn perform(&mut self, k: SubKey, step: Step, t: Instant) {
        let Some(s) = self.subs.get_mut(&k) else {
            return;
        };
        match step.next {
            Next::Continue => {}
            Next::Wait => {
                s.io = SubIo::Idle;
                self.mux.leave(k);
                self.ranges.remove(k);
            }
            Next::Range => {
                s.io = SubIo::Ranging;
                self.mux.leave(k);
                self.ranges.push(k);
            }
            Next::Watch { .. } => {
                s.io = SubIo::Watch;
                self.ranges.remove(k);
                self.mux.want(k, t);
            }
        }
        if let Some(e) = step.report {
            EtcdStats::bump(&self.stats.unavailable_reports);
            // The engine warns once per registry state change (and says
            // when it answers again); per app and per report: debug.
            tracing::debug!(app = %s.machine.app(), error = %e, "etcd watch unhealthy");
            if let Some(f) = &s.feed {
                let m = &s.machine;
                f.push(Err(e), || m.reset());
            }
        }
        if let Some(event) = step.event {
            match &s.feed {
                Some(f) => {
                    let m = &s.machine;
                    f.push(Ok(event), || m.reset());
                }
                None => {
                    // The first Reset: the subscription is answered.
                    let feed = EventQueue::new(self.config.watch_queue_capacity);
                    feed.push(Ok(event), || None);
                    if let Some(reply) = s.reply.take() {
                        let stream = event_stream(feed.clone(), k, self.leavers.clone());
                        s.feed = Some(feed);
                        if reply.send(Ok(stream)).is_err() {
                            // Nobody waits any more; dropping the stream
                            // told us to leave.
                        }
                    }
                }
            }
        }
        let wake = s.machine.next_wake();
        if wake != s.wake {
            if let Some(w) = s.wake {
                self.timers.remove(&(w, k));
            }
            if let Some(w) = wake {
                self.timers.insert((w, k));
            }
            s.wake = wake;
        }
        let need = s.machine.probe_need();
        if need != s.need {
            s.need = need;
            self.wants_dirty = true;
        }
    }

    fn on_opened(&mut self, slot: Slot, o: Opened, t: Instant) {
        self.wants_dirty = true;
        match o {
            Ok((stream, endpoint)) => {
                self.streams[slot.index()] = SlotIo::Open(stream);
                self.endpoint[slot.index()] = endpoint;
                self.mux.opened(slot);
                for k in self.mux.member_keys(slot) {
                    self.with(k, t, |m| m.on_opened(t));
                }
            }
            Err(e) => {
                self.streams[slot.index()] = SlotIo::Idle;
                let why = Interruption::Open(e);
                for k in self.mux.broken(slot) {
                    self.with(k, t, |m| m.on_interrupted(&why, t));
                }
            }
        }
    }

    fn on_message(&mut self, slot: Slot, m: Option<Result<WatchResponse, WatchError>>, t: Instant) {
        let why = match m {
            Some(Ok(msg)) => {
                if let Some(k) = self.mux.route(slot, msg.watch_id) {
                    self.with(k, t, |m| m.on_message(&msg, t));
                }
                return;
            }
            Some(Err(e)) => Interruption::Stream(e),
            None => Interruption::Ended,
        };
        self.wants_dirty = true;
        self.streams[slot.index()] = SlotIo::Idle;
        for k in self.mux.broken(slot) {
            self.with(k, t, |m| m.on_interrupted(&why, t));
        }
    }

    fn on_timer(&mut self, t: Instant) {
        while let Some(&(w, k)) = self.timers.first() {
            if w > t {
                break;
            }
            self.timers.remove(&(w, k));
            if let Some(s) = self.subs.get_mut(&k) {
                s.wake = None;
            }
            self.with(k, t, |m| m.on_timer(t));
        }
    }
}

mod io;

mod probes;
