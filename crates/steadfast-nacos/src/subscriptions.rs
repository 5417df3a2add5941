//! The subscribed services: for each, the instances last delivered, its
//! version, and the queues of its watchers. A full list (a push, a
//! subscribe answer, a periodic resync) is diffed against what is held and
//! delivered as one versioned Reset or Delta, so one changed instance in a
//! 1000-instance service is one small delta downstream.
//!
//! Versions: `epoch` = the client's start (ms since the Unix epoch),
//! `revision` = a client-wide sequence. They grow strictly per client and
//! across clients of later starts (as long as the local clock does not
//! step back between them), whatever the server's clock says; a
//! push's `lastRefTime` is a server wall clock that can repeat, or go back
//! after a failover to another member, so it is not used.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};
use serde_json::value::RawValue;
use steadfast_core::{
    same, EventQueue, Instance, RegistryError, RegistryEvent, RevisionInterner, Version,
};

use crate::protocol::ServiceInfo;
use crate::record;
use crate::stats::NacosStats;

/// Why a full list was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Pushed by the server, or the answer to a subscribe.
    Pushed,
    /// The periodic full list: a difference is a missed push.
    Resync,
}

/// The raw text of a host record and what it decoded to: a record whose
/// text did not change since the last list is not decoded again.
type Decoded = (Box<RawValue>, Arc<Instance>);

/// One subscribed service.
#[derive(Debug, Default)]
struct Sub {
    queues: Vec<(u64, Arc<EventQueue>)>,
    held: FxHashMap<Arc<str>, Arc<Instance>>,
    /// The last list's records by a hash of their text.
    texts: FxHashMap<u64, Decoded>,
    version: Option<Version>,
    /// The next list is delivered as a Reset (new, or after an outage).
    fresh: bool,
    /// The server time of the list last applied (`lastRefTime`, ms): a
    /// list older than it (a push queued behind a fresher resync answer)
    /// is dropped. Reset with the connection (another server's clock).
    last_ref: i64,
}

impl Sub {
    fn reset(&self) -> Option<RegistryEvent> {
        self.version.map(|version| RegistryEvent::Reset {
            version,
            items: self.held.values().cloned().collect(),
        })
    }
}

/// Every subscribed service of one client.
#[derive(Debug)]
pub struct Subscriptions {
    subs: HashMap<String, Sub>,
    owner: HashMap<u64, String>,
    next_key: u64,
    epoch: u64,
    sequence: AtomicU64,
    revisions: RevisionInterner,
    /// Why the client has no connection now (`None` while connected): a
    /// new watcher hears it at once.
    stale: Option<String>,
}

impl Subscriptions {
    /// No subscription; versions in `epoch`.
    pub fn new(epoch: u64) -> Self {
        Self {
            subs: HashMap::new(),
            owner: HashMap::new(),
            next_key: 1,
            epoch,
            sequence: AtomicU64::new(0),
            revisions: RevisionInterner::default(),
            stale: None,
        }
    }

    /// The next version of this client.
    pub fn next_version(&self) -> Version {
        Version::of(
            self.epoch,
            self.sequence.fetch_add(1, Ordering::Relaxed) + 1,
        )
    }

    /// Adds a watcher of `app` with its queue; returns its key and whether
    /// the service is new (the driver must subscribe it). A watcher of a
    /// service already held starts from a Reset of what is held.
    pub fn watch(&mut self, app: &str, queue: Arc<EventQueue>) -> (u64, bool) {
        let key = self.next_key;
        self.next_key += 1;
        self.owner.insert(key, app.to_string());
        let new = !self.subs.contains_key(app);
        let sub = self.subs.entry(app.to_string()).or_insert_with(|| Sub {
            fresh: true,
            ..Sub::default()
        });
        if let Some(reset) = sub.reset() {
            queue.push(Ok(reset), || None);
        }
        if let Some(why) = &self.stale {
            queue.push(Err(RegistryError::Unavailable(why.clone())), || None);
        }
        sub.queues.push((key, queue));
        (key, new)
    }

    /// Drops the watchers that left; returns the services nobody watches
    /// any more (the driver unsubscribes them).
    pub fn leave(&mut self, keys: Vec<u64>) -> Vec<String> {
        let mut gone = Vec::new();
        for key in keys {
            let Some(app) = self.owner.remove(&key) else {
                continue;
            };
            if let Some(sub) = self.subs.get_mut(&app) {
                sub.queues.retain(|(k, _)| *k != key);
                if sub.queues.is_empty() {
                    self.subs.remove(&app);
                    gone.push(app);
                }
            }
        }
        gone
    }

    /// Whether `app` has watchers.
    pub fn is_subscribed(&self, app: &str) -> bool {
        self.subs.contains_key(app)
    }

    /// The client is connected again.
    pub fn clear_stale(&mut self) {
        self.stale = None;
    }

    /// Every subscribed service.
    pub fn apps(&self) -> Vec<String> {
        self.subs.keys().cloned().collect()
    }

    /// The connection is gone: every watcher is told its state is stale,
    /// and every service's next list is a Reset.
    pub fn report_stale(&mut self, why: &str, stats: &NacosStats) {
        self.stale = Some(why.to_string());
        for sub in self.subs.values_mut() {
            sub.fresh = true;
            sub.last_ref = 0;
            for (_, queue) in &sub.queues {
                NacosStats::bump(&stats.unavailable_reports);
                let reset = sub.version.map(|version| RegistryEvent::Reset {
                    version,
                    items: sub.held.values().cloned().collect(),
                });
                queue.push(Err(RegistryError::Unavailable(why.to_string())), || reset);
            }
        }
    }

    /// A call for `app` failed (a subscribe the server refused, a list
    /// that timed out): its watchers hear why; what they hold stays.
    pub fn report_error(&mut self, app: &str, why: &str, stats: &NacosStats) {
        let Some(sub) = self.subs.get(app) else {
            return;
        };
        for (_, queue) in &sub.queues {
            NacosStats::bump(&stats.unavailable_reports);
            let reset = || sub.reset();
            queue.push(Err(RegistryError::Unavailable(why.to_string())), reset);
        }
    }

    /// Applies a full list of `app` (skipping invalid records, counted)
    /// and delivers what changed.
    pub fn apply(&mut self, app: &str, info: ServiceInfo, kind: ListKind, stats: &NacosStats) {
        let version = self.next_version();
        let Some(sub) = self.subs.get_mut(app) else {
            return;
        };
        if !sub.fresh && info.last_ref_time > 0 && info.last_ref_time < sub.last_ref {
            return;
        }
        sub.last_ref = sub.last_ref.max(info.last_ref_time);
        let hosts = info.hosts.unwrap_or_default();
        // A record whose text did not change keeps its instance (the same
        // `Arc`, so comparing it with what is held is a pointer check);
        // only new texts are decoded. A repeated id: the later one wins.
        let mut texts: FxHashMap<u64, Decoded> = FxHashMap::default();
        texts.reserve(hosts.len());
        let mut now: FxHashMap<Arc<str>, Arc<Instance>> = FxHashMap::default();
        now.reserve(hosts.len());
        for host in hosts {
            let text = host.get();
            let key = text_hash(text);
            let known = sub.texts.remove(&key).filter(|(raw, _)| raw.get() == text);
            let instance = match known {
                Some((_, instance)) => instance,
                None => match texts.get(&key).filter(|(raw, _)| raw.get() == text) {
                    Some((_, instance)) => instance.clone(),
                    None => match record::decode(app, text) {
                        Ok(record) => Arc::new(Instance::from_record(record, &mut self.revisions)),
                        Err(e) => {
                            NacosStats::bump(&stats.invalid_records);
                            tracing::warn!(app = %app.escape_debug(), error = %e, "skipped an invalid nacos instance record");
                            continue;
                        }
                    },
                },
            };
            now.insert(instance.id_arc().clone(), instance.clone());
            texts.insert(key, (host, instance));
        }
        sub.texts = texts;
        let event = match sub.version {
            Some(base) if !sub.fresh => {
                let removals: Vec<Arc<str>> = sub
                    .held
                    .keys()
                    .filter(|id| !now.contains_key(*id))
                    .cloned()
                    .collect();
                let upserts: Vec<Arc<Instance>> = now
                    .values()
                    .filter(|i| sub.held.get(i.id_arc()).is_none_or(|h| !same(h, i)))
                    .cloned()
                    .collect();
                if removals.is_empty() && upserts.is_empty() {
                    return;
                }
                if kind == ListKind::Resync {
                    NacosStats::add(&stats.missed_notifications, removals.len() + upserts.len());
                }
                RegistryEvent::Delta {
                    base,
                    version,
                    upserts,
                    removals,
                }
            }
            _ => RegistryEvent::Reset {
                version,
                items: now.values().cloned().collect(),
            },
        };
        sub.held = now;
        sub.version = Some(version);
        sub.fresh = false;
        for (_, queue) in &sub.queues {
            let reset = || sub.reset();
            queue.push(Ok(event.clone()), reset);
        }
    }

    /// Ends every watcher's stream (the client is closing).
    pub fn close(&mut self) {
        for sub in self.subs.values() {
            for (_, queue) in &sub.queues {
                queue.close();
            }
        }
    }
}

/// A fast hash of a record's text (a hit is confirmed by comparing texts).
fn text_hash(text: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = FxHasher::default();
    h.write(text.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests;
