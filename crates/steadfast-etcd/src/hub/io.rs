//! The hub's IO starts and answers: range batches (one txn each) and the
//! opening of shared streams, each create from its app's own revision.

use std::time::Instant;

use futures::FutureExt;
use steadfast_core::RegistryError;

use super::{Hub, Ranged, SlotIo, SubIo};
use crate::gateway::WatchCreate;
use crate::mux::{MuxAction, Slot, SubKey};
use crate::stats::EtcdStats;

impl Hub {
    pub(super) fn on_ranged(&mut self, (keys, r): Ranged, t: Instant) {
        self.ranges.done();
        match r {
            Ok(ranges) => {
                for (k, range) in keys.into_iter().zip(ranges) {
                    if self.subs.get(&k).is_some_and(|s| s.io == SubIo::Ranging) {
                        self.with(k, t, |m| m.on_range(&range, t));
                    }
                }
            }
            Err(e) => {
                for k in keys {
                    let Some(s) = self.subs.get_mut(&k) else {
                        continue;
                    };
                    if s.io != SubIo::Ranging {
                        continue;
                    }
                    if s.feed.is_none() {
                        // A first range that fails fails the subscription.
                        if let Some(reply) = s.reply.take() {
                            let _ = reply.send(Err(RegistryError::from(e.clone())));
                        }
                        self.remove(k);
                    } else {
                        self.with(k, t, |m| m.on_range_failed(&e, t));
                    }
                }
            }
        }
    }

    /// Starts the range batches and stream opens now due, and tells the
    /// prober what the apps need.
    pub(super) fn drive(&mut self, t: Instant) {
        while let Some(batch) = self.ranges.take() {
            let prefixes: Vec<String> = batch
                .iter()
                .filter_map(|k| self.subs.get(k).map(|s| s.prefix.clone()))
                .collect();
            let client = self.client.clone();
            EtcdStats::bump(&self.stats.range_batches);
            self.range_io.push(
                async move {
                    let r = client.range_prefixes(&prefixes).await;
                    (batch, r)
                }
                .boxed(),
            );
        }
        for action in self.mux.poll(t, self.ranges.busy()) {
            self.wants_dirty = true;
            match action {
                MuxAction::Close(slot) => self.streams[slot.index()] = SlotIo::Idle,
                MuxAction::Open { slot, watches } => self.open(slot, watches),
            }
        }
        if self.wants_dirty {
            self.wants_dirty = false;
            self.update_wants();
        }
    }

    fn open(&mut self, slot: Slot, watches: Vec<(SubKey, i64)>) {
        let creates: Vec<WatchCreate> = watches
            .iter()
            .filter_map(|(k, id)| {
                let s = self.subs.get(k)?;
                Some(WatchCreate {
                    watch_id: *id,
                    prefix: s.prefix.clone(),
                    start_revision: s.machine.last_revision().saturating_add(1),
                })
            })
            .collect();
        let client = self.client.clone();
        let notify = self.config.progress_notify;
        tracing::debug!(
            ?slot,
            watches = creates.len(),
            "opening shared etcd watch stream"
        );
        EtcdStats::bump(&self.stats.stream_opens);
        self.streams[slot.index()] =
            SlotIo::Opening(async move { client.open_watches(&creates, notify).await }.boxed());
    }
}
