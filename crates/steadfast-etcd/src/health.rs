//! The shared "etcd answered again" prober of one registry (and its
//! metadata report).
//!
//! A failing keepalive reports down here instead of probing on its own.
//! While someone reported down, one task probes the endpoint the client
//! tries first, with a short deadline, at the `keepalive_probe_interval`
//! cadence (jittered, through [`Recover`] with a constant backoff), moving
//! to the next endpoint after each failure. Its first success makes the
//! client bump [`EtcdClient::answered`], which every keeper watches: 1000
//! registrations cost one probe per cadence, not 1000. The task ends on that
//! success and is aborted when the registry goes away.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use steadfast_core::{BackoffPolicy, ErrorClass, Recover, RecoverPolicy, Retry};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::EtcdConfig;
use crate::gateway::EtcdClient;
use crate::stats::EtcdStats;

/// The shared prober.
#[derive(Debug)]
pub(crate) struct Health {
    client: Arc<EtcdClient>,
    policy: RecoverPolicy,
    timeout: Duration,
    probe_key: Vec<u8>,
    stats: Arc<EtcdStats>,
    prober: Mutex<Option<JoinHandle<()>>>,
}

impl Health {
    /// A prober on `client` with the cadence and deadline of `config`,
    /// probing the (absent) key `probe_key`.
    pub(crate) fn new(
        client: Arc<EtcdClient>,
        config: &EtcdConfig,
        probe_key: Vec<u8>,
        stats: Arc<EtcdStats>,
    ) -> Self {
        let every = config.keepalive_probe_interval;
        let policy = RecoverPolicy::new(BackoffPolicy {
            initial: every,
            max: every,
            multiplier: 1.0,
            jitter: config.backoff.jitter,
        });
        Self {
            client,
            policy,
            timeout: config.probe_timeout,
            probe_key,
            stats,
            prober: Mutex::new(None),
        }
    }

    /// The client's "etcd answered again" signal.
    pub(crate) fn answered(&self) -> watch::Receiver<u64> {
        self.client.answered()
    }

    /// Someone could not reach etcd: make sure the prober runs.
    pub(crate) fn report_down(&self) {
        let mut prober = self.prober.lock().unwrap_or_else(PoisonError::into_inner);
        if prober.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        *prober = Some(tokio::spawn(probe_until_answered(
            self.client.clone(),
            self.policy,
            self.timeout,
            self.probe_key.clone(),
            self.stats.clone(),
        )));
    }
}

impl Drop for Health {
    fn drop(&mut self) {
        let prober = self
            .prober
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = prober.take() {
            h.abort();
        }
    }
}

/// Probes at the policy's cadence until one probe succeeds (the client then
/// signals everyone). Each failure demotes the endpoint probed.
async fn probe_until_answered(
    client: Arc<EtcdClient>,
    policy: RecoverPolicy,
    timeout: Duration,
    key: Vec<u8>,
    stats: Arc<EtcdStats>,
) {
    let mut recover = Recover::new();
    let mut rng = StdRng::from_entropy();
    loop {
        let now = tokio::time::Instant::now().into_std();
        let Retry::After(delay) = recover.on_failure(&policy, ErrorClass::Transient, now, &mut rng)
        else {
            return;
        };
        tokio::time::sleep(delay).await;
        let endpoint = client.current_index();
        match client.probe(endpoint, &key, timeout).await {
            Ok(_) => return,
            Err(e) => {
                EtcdStats::bump(&stats.health_probe_failures);
                tracing::debug!(endpoint, error = %e, "etcd health probe failed");
                client.demote(endpoint);
            }
        }
    }
}
