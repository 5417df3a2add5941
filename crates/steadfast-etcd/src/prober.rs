//! The IO shell of the one liveness prober an [`EtcdClient`] shares between
//! all its watches and keepers (the decisions are
//! [`crate::prober_machine`]'s).
//!
//! Each watch driver and each registry's keepers hold a [`ProbeSub`] and
//! say what they need ([`Want`]); the verdicts come back on a
//! `tokio::sync::watch` channel every subscriber reads. While anyone wants
//! something, one task performs the machine's orders: it starts the probes
//! it asks for (bounded by `probe_timeout`), feeds their outcomes back,
//! demotes the endpoints it names, and publishes the verdicts. When nothing
//! is wanted and nothing is in flight, the task ends; the next want starts
//! a new one. The task holds the client only while it runs, so dropping
//! every registry and stream of a client lets it go.
//!
//! The prober is created by the first registry or report built on the
//! client, with that one's config (cadences, deadline, probe key).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::config::EtcdConfig;
use crate::error::GatewayError;
use crate::gateway::EtcdClient;
pub use crate::prober_machine::Want;
use crate::prober_machine::{ProbeTarget, ProberMachine, ProberPolicy, SubId, Verdicts};
use crate::records::KeyLayout;
use crate::stats::{EtcdStats, EtcdStatsSnapshot};
use crate::wire::ResponseHeader;

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[derive(Debug)]
struct State {
    machine: ProberMachine,
    task: Option<JoinHandle<()>>,
}

/// The shared prober of one client.
#[derive(Debug)]
pub(crate) struct Prober {
    state: Mutex<State>,
    verdicts: watch::Sender<Verdicts>,
    wake: Notify,
    key: Vec<u8>,
    timeout: Duration,
    stats: EtcdStats,
}

impl Prober {
    /// A prober for a client of `endpoints` endpoints, as `config` says.
    pub(crate) fn new(endpoints: usize, config: &EtcdConfig) -> Self {
        let machine = ProberMachine::new(
            endpoints,
            ProberPolicy::from_config(config),
            StdRng::from_entropy(),
        );
        let verdicts = watch::channel(machine.verdicts().clone()).0;
        Self {
            state: Mutex::new(State {
                machine,
                task: None,
            }),
            verdicts,
            wake: Notify::new(),
            key: KeyLayout::new(&config.prefix).prefix().as_bytes().to_vec(),
            timeout: config.probe_timeout,
            stats: EtcdStats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, st: &State) {
        let fresh = st.machine.verdicts();
        self.verdicts.send_if_modified(|v| {
            let changed = v != fresh;
            if changed {
                *v = fresh.clone();
            }
            changed
        });
    }

    /// Adds the prober's counters (probes sent, failed waits for an
    /// answer) to `s`.
    pub(crate) fn add_stats(&self, s: &mut EtcdStatsSnapshot) {
        let mine = self.stats.snapshot();
        s.probes_sent = s.probes_sent.saturating_add(mine.probes_sent);
        s.health_probe_failures = s
            .health_probe_failures
            .saturating_add(mine.health_probe_failures);
    }
}

/// One subscriber of a client's prober; dropping it withdraws its wants.
#[derive(Debug)]
pub(crate) struct ProbeSub {
    client: Arc<EtcdClient>,
    prober: Arc<Prober>,
    id: SubId,
}

impl ProbeSub {
    /// Subscribes to `client`'s prober (created with `config` if the client
    /// has none yet).
    pub(crate) fn new(client: Arc<EtcdClient>, config: &EtcdConfig) -> Self {
        let prober = client.prober(config);
        let id = prober.lock().machine.subscribe();
        Self { client, prober, id }
    }

    /// The verdicts every subscriber follows.
    pub(crate) fn verdicts(&self) -> watch::Receiver<Verdicts> {
        self.prober.verdicts.subscribe()
    }

    /// From now on this subscriber needs `want`.
    pub(crate) fn want(&self, want: Want) {
        let mut st = self.prober.lock();
        st.machine.set_want(self.id, want, now());
        self.prober.publish(&st);
        let running = st.task.as_ref().is_some_and(|h| !h.is_finished());
        if !st.machine.idle() && !running {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let task = drive(self.client.clone(), self.prober.clone());
                st.task = Some(rt.spawn(task));
            }
        }
        drop(st);
        self.prober.wake.notify_one();
    }
}

impl Drop for ProbeSub {
    fn drop(&mut self) {
        let mut st = self.prober.lock();
        st.machine.unsubscribe(self.id, now());
        drop(st);
        self.prober.wake.notify_one();
    }
}

type Flight = BoxFuture<'static, (u64, usize, Instant, Result<ResponseHeader, GatewayError>)>;

/// Performs the machine's orders until nothing is wanted or in flight.
async fn drive(client: Arc<EtcdClient>, prober: Arc<Prober>) {
    let mut flights: FuturesUnordered<Flight> = FuturesUnordered::new();
    loop {
        let wake = {
            let mut st = prober.lock();
            if st.machine.idle() {
                st.task = None;
                return;
            }
            let t = now();
            for order in st.machine.on_timer(t) {
                let endpoint = match order.target {
                    ProbeTarget::Endpoint(e) => e,
                    ProbeTarget::Current => client.current_index(),
                };
                EtcdStats::bump(&prober.stats.probes_sent);
                let (c, key, timeout) = (client.clone(), prober.key.clone(), prober.timeout);
                flights.push(
                    async move {
                        (
                            order.seq,
                            endpoint,
                            t,
                            c.probe(endpoint, &key, timeout).await,
                        )
                    }
                    .boxed(),
                );
            }
            st.machine.next_wake()
        };
        let sleep = async {
            match wake {
                Some(w) => tokio::time::sleep_until(tokio::time::Instant::from_std(w)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some((seq, endpoint, sent, r)) = flights.next(), if !flights.is_empty() => {
                if let Err(e) = &r {
                    tracing::debug!(endpoint, error = %e, "etcd probe failed");
                }
                let mut st = prober.lock();
                let out = st.machine.on_result(seq, endpoint, r.as_ref().ok(), sent, now());
                if let Some(dead) = out.demote {
                    client.demote(dead);
                }
                if out.answer_failed {
                    EtcdStats::bump(&prober.stats.health_probe_failures);
                }
                if out.declared_dead {
                    tracing::warn!(endpoint, "etcd endpoint declared dead by the liveness probe");
                }
                prober.publish(&st);
            }
            () = prober.wake.notified() => {}
            () = sleep => {}
        }
    }
}
