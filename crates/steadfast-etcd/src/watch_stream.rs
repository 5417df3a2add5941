//! The IO driver of one app's watch: runs a [`WatchMachine`] against an
//! [`EtcdClient`] and exposes it as the core's [`SnapshotStream`].
//!
//! The stream is a `futures::stream::unfold` over the driver: it runs only
//! while polled, spawns nothing, and dropping it drops the open HTTP stream
//! and any pending sleep, so nothing leaks.
//!
//! Contract with the engine: the first item is the snapshot of the initial
//! range (done before the stream is returned, so a `watch()` on an
//! unreachable etcd fails at once). Resumable failures are handled inside
//! with backoff and never surface. After `unavailable_after` consecutive
//! failed attempts the stream yields one `Err(RegistryError::Unavailable)`
//! and then ends; the engine re-subscribes with its own backoff.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{BackoffPolicy, ErrorClass, RegistryError, ServiceInstance, SnapshotStream};

use crate::config::EtcdConfig;
use crate::gateway::{EtcdClient, WatchStream};
use crate::records::KeyLayout;
use crate::stats::EtcdStats;
use crate::watch_machine::{Interruption, Next, Step, WatchMachine};

type Item = Result<Vec<ServiceInstance>, RegistryError>;

struct Driver {
    client: Arc<EtcdClient>,
    machine: WatchMachine,
    next: Next,
    stream: Option<WatchStream>,
    first: Option<Vec<ServiceInstance>>,
    backoff: BackoffPolicy,
    progress_notify: bool,
    idle_timeout: Option<Duration>,
    rng: StdRng,
    stats: Arc<EtcdStats>,
    done: bool,
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
    let mut machine = WatchMachine::new(layout, app, config.unavailable_after, stats.clone());
    let range = client
        .range_prefix(machine.key_prefix().as_bytes())
        .await
        .map_err(RegistryError::from)?;
    let step = machine.on_range(&range);
    let driver = Driver {
        client,
        machine,
        next: step.next,
        stream: None,
        first: step.snapshot,
        backoff: config.backoff,
        progress_notify: config.progress_notify,
        idle_timeout: config.watch_idle_timeout.filter(|_| config.progress_notify),
        rng: StdRng::from_entropy(),
        stats,
        done: false,
    };
    Ok(stream::unfold(driver, |mut d| async move {
        let item = d.next_item().await?;
        Some((item.map(std::sync::Arc::new), d))
    })
    .boxed())
}

impl Driver {
    async fn next_item(&mut self) -> Option<Item> {
        if let Some(first) = self.first.take() {
            return Some(Ok(first));
        }
        loop {
            if self.done {
                return None;
            }
            let step = self.advance().await;
            self.next = step.next;
            if let Some(e) = step.give_up {
                self.done = true;
                self.stream = None;
                EtcdStats::bump(&self.stats.unavailable_reports);
                tracing::warn!(app = %self.machine.app(), error = %e, "etcd watch giving up");
                return Some(Err(e));
            }
            if let Some(snapshot) = step.snapshot {
                return Some(Ok(snapshot));
            }
        }
    }

    /// Performs `self.next` and feeds the outcome to the machine.
    async fn advance(&mut self) -> Step {
        match self.next {
            Next::Continue => self.read().await,
            Next::Range => {
                self.stream = None;
                let prefix = self.machine.key_prefix();
                match self.client.range_prefix(prefix.as_bytes()).await {
                    Ok(r) => self.machine.on_range(&r),
                    Err(e) => self.machine.on_range_failed(&e),
                }
            }
            Next::Watch { from } => {
                self.stream = None;
                let prefix = self.machine.key_prefix();
                match self
                    .client
                    .watch(prefix.as_bytes(), from, self.progress_notify)
                    .await
                {
                    Ok(s) => {
                        self.stream = Some(s);
                        Step {
                            next: Next::Continue,
                            snapshot: None,
                            give_up: None,
                        }
                    }
                    Err(e) => self.machine.on_interrupted(&Interruption::Open(e)),
                }
            }
            Next::Backoff { attempt, then } => {
                self.stream = None;
                let delay = self
                    .backoff
                    .delay(attempt, ErrorClass::Transient, &mut self.rng);
                tracing::debug!(app = %self.machine.app(), ?delay, attempt, "etcd watch backing off");
                tokio::time::sleep(delay).await;
                Step {
                    next: then.into(),
                    snapshot: None,
                    give_up: None,
                }
            }
        }
    }

    /// Reads one message of the open stream.
    async fn read(&mut self) -> Step {
        let Some(stream) = self.stream.as_mut() else {
            return self.machine.on_interrupted(&Interruption::Ended);
        };
        let item = match self.idle_timeout {
            Some(limit) => match tokio::time::timeout(limit, stream.next()).await {
                Ok(item) => item,
                Err(_) => return self.machine.on_interrupted(&Interruption::Idle),
            },
            None => stream.next().await,
        };
        match item {
            Some(Ok(msg)) => self.machine.on_message(&msg),
            Some(Err(e)) => self.machine.on_interrupted(&Interruption::Stream(e)),
            None => self.machine.on_interrupted(&Interruption::Ended),
        }
    }
}
