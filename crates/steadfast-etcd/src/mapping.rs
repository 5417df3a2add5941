//! Interface -> app mappings in etcd (Dubbo's service-name mapping).
//!
//! Keys: `<prefix>/mapping/<interface>/<app>`, one key per app, so
//! providers of different apps never overwrite each other (no
//! read-modify-write of a shared set). Both segments are percent-encoded
//! ([`encode_segment`]): every byte outside `A-Z a-z 0-9 . _ - :` becomes
//! `%XX`, so an interface name with `/` cannot reach another interface's
//! keys, and any UTF-8 name round-trips. The value is the app name (for
//! people reading the store; the key is what counts).
//!
//! The keys are **persistent** (no lease), as Dubbo's mapping is: a mapping
//! says which app *can* serve an interface, not which instance is alive
//! (the instance records, leased, say that). A per-instance lease on a key
//! shared by every instance of an app would need a cross-process count;
//! a stale mapping costs a consumer only an idle app watch whose status
//! says the registry holds no instance.
//!
//! The watch ([`watch_mapping`]) is a small dedicated one, not the hub: the
//! hub's machines are keyed by app and decode instance records under
//! `<prefix>/services/`, and a mapping needs neither. One stream is one
//! session: a range of `<prefix>/mapping/<interface>/` (the whole set,
//! first item), then a watch from the range's revision + 1 (nothing
//! between the two is lost); each message that changes the set yields the
//! whole set again. A compaction cancel is handled in the session: a fresh
//! range, then a watch from its revision + 1. While the watch is open the
//! endpoint is probed every `liveness_probe_interval` (a frozen etcd keeps
//! its TCP connections); `probe_failures` failed probes in a row, a broken
//! or ended watch, or a failed resync yield one `Err` item and end the
//! stream: the engine's `MappingMachine` re-watches on its
//! `RecoverPolicy`, and every re-watch starts with a fresh range, so a
//! change made during an outage is never missed. Every call runs under a
//! deadline.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use steadfast_core::{MappingEvent, MappingStream, RegistryError, Version};

use crate::config::EtcdConfig;
use crate::error::registry_op;
use crate::gateway::EtcdClient;
use crate::records::KeyLayout;
use crate::wire::{EventType, RangeResponse, WatchResponse};
use crate::WatchStream;

/// Percent-encodes `name` for one key segment: bytes outside
/// `A-Z a-z 0-9 . _ - :` become `%XX` (upper-case hex).
pub fn encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a segment made by [`encode_segment`]; `None` when it is not one
/// (a bad escape, a raw byte that would have been escaped, not UTF-8).
pub fn decode_segment(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = segment.get(i.checked_add(1)?..i.checked_add(3)?)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i = i.checked_add(3)?;
        } else if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':') {
            out.push(b);
            i = i.checked_add(1)?;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

impl KeyLayout {
    /// `<prefix>/mapping/<interface>/`: the range and watch prefix of one
    /// interface's mapping (interface percent-encoded).
    pub fn mapping_prefix(&self, interface: &str) -> String {
        format!("{}/mapping/{}/", self.prefix(), encode_segment(interface))
    }

    /// `<prefix>/mapping/<interface>/<app>` (both percent-encoded).
    pub fn mapping_key(&self, interface: &str, app: &str) -> String {
        format!("{}{}", self.mapping_prefix(interface), encode_segment(app))
    }

    /// The app named by a key under `interface`'s mapping prefix, if the
    /// key is one this layout writes.
    pub fn mapped_app(&self, interface: &str, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        let app = key.strip_prefix(&self.mapping_prefix(interface))?;
        decode_segment(app).filter(|a| !a.is_empty())
    }
}

/// Checks that a mapping names an interface and an app.
pub fn check_mapping(interface: &str, app: &str) -> Result<(), RegistryError> {
    if interface.is_empty() || app.is_empty() {
        return Err(RegistryError::Rejected(
            "an interface mapping needs a non-empty interface and app".into(),
        ));
    }
    Ok(())
}

/// What a watch message did to the mapping held (sans-IO).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingStep {
    /// The set changed: yield it.
    Changed,
    /// Nothing changed (a progress message, a put of an app held).
    Unchanged,
    /// The watch was cancelled (compaction or otherwise): read again.
    Resync,
}

/// One interface's mapping as held by a watch session (sans-IO): the apps
/// and the revision read up to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappingView {
    interface: String,
    layout: KeyLayout,
    apps: BTreeSet<String>,
    revision: i64,
    epoch: u64,
}

impl MappingView {
    /// An empty view of `interface` under `layout`, versions in `epoch`.
    pub fn new(layout: KeyLayout, interface: &str, epoch: u64) -> Self {
        Self {
            interface: interface.to_string(),
            layout,
            apps: BTreeSet::new(),
            revision: 0,
            epoch,
        }
    }

    /// Replaces the set with a range's; whether it changed.
    pub fn apply_range(&mut self, range: &RangeResponse) -> bool {
        let apps: BTreeSet<String> = range
            .kvs
            .iter()
            .filter_map(|kv| self.layout.mapped_app(&self.interface, &kv.key))
            .collect();
        self.revision = range.header.revision.max(0);
        let changed = apps != self.apps;
        self.apps = apps;
        changed
    }

    /// Applies one watch message.
    pub fn apply(&mut self, msg: &WatchResponse) -> MappingStep {
        if msg.canceled {
            return MappingStep::Resync;
        }
        let mut changed = false;
        for e in &msg.events {
            self.revision = self.revision.max(e.kv.mod_revision);
            let Some(app) = self.layout.mapped_app(&self.interface, &e.kv.key) else {
                continue;
            };
            changed |= match e.kind {
                EventType::Put => self.apps.insert(app),
                EventType::Delete => self.apps.remove(&app),
            };
        }
        if changed {
            MappingStep::Changed
        } else {
            MappingStep::Unchanged
        }
    }

    /// The revision to watch from: one past what was read.
    pub fn resume_from(&self) -> i64 {
        self.revision.saturating_add(1)
    }

    /// The whole set now.
    pub fn event(&self) -> MappingEvent {
        MappingEvent {
            version: Version::of(self.epoch, u64::try_from(self.revision).unwrap_or(0)),
            apps: self.apps.iter().cloned().collect(),
        }
    }
}

/// Writes (`mapped`) or deletes the key that maps `app` to `interface`
/// (persistent: no lease), under `operation_timeout`.
pub(crate) async fn set(
    client: &EtcdClient,
    layout: &KeyLayout,
    config: &EtcdConfig,
    interface: &str,
    app: &str,
    mapped: bool,
) -> Result<(), RegistryError> {
    check_mapping(interface, app)?;
    let key = layout.mapping_key(interface, app);
    let limit = config.operation_timeout;
    if mapped {
        let put = client.put(key.as_bytes(), app.as_bytes(), 0);
        registry_op(limit, put).await.map(drop)
    } else {
        registry_op(limit, client.delete(key.as_bytes()))
            .await
            .map(drop)
    }
}

/// One watch session's IO state.
struct Session {
    client: Arc<EtcdClient>,
    config: EtcdConfig,
    prefix: String,
    view: MappingView,
    watch: WatchStream,
    endpoint: usize,
    /// The first item (the range's set) is still to be yielded.
    first: bool,
    probe_failures: u32,
    done: bool,
}

impl Session {
    /// Reads the whole set (under the request deadline), then opens the
    /// watch from one past the range's revision.
    async fn resync(&mut self) -> Result<bool, RegistryError> {
        let range = registry_op(
            self.config.request_timeout,
            self.client.range_prefix(self.prefix.as_bytes()),
        )
        .await?;
        let changed = self.view.apply_range(&range);
        let limit = self
            .config
            .watch_open_timeout
            .saturating_add(Duration::from_millis(100));
        let (watch, endpoint) = registry_op(
            limit,
            self.client
                .open_watch(self.prefix.as_bytes(), self.view.resume_from(), false),
        )
        .await?;
        self.watch = watch;
        self.endpoint = endpoint;
        Ok(changed)
    }

    /// The next item of the stream, or its end.
    async fn next(&mut self) -> Option<Result<MappingEvent, RegistryError>> {
        if self.done {
            return None;
        }
        if std::mem::take(&mut self.first) {
            return Some(Ok(self.view.event()));
        }
        let probe_every = self.config.liveness_probe_interval;
        // Bounded by the session: every turn waits for a message or a probe.
        loop {
            let wait = match probe_every {
                Some(p) if self.probe_failures > 0 => p / 4,
                Some(p) => p,
                None => Duration::from_secs(3600),
            };
            let msg = tokio::select! {
                m = self.watch.next() => m,
                _ = tokio::time::sleep(wait), if probe_every.is_some() => {
                    if self.probe().await {
                        continue;
                    }
                    return self.fail(RegistryError::Unavailable(
                        "etcd does not answer the liveness probe".into(),
                    ));
                }
            };
            let msg = match msg {
                Some(Ok(m)) => m,
                Some(Err(e)) => return self.fail(RegistryError::Unavailable(e.to_string())),
                None => {
                    return self.fail(RegistryError::WatchEnded(
                        "etcd ended the mapping watch".into(),
                    ))
                }
            };
            match self.view.apply(&msg) {
                MappingStep::Changed => return Some(Ok(self.view.event())),
                MappingStep::Unchanged => {}
                MappingStep::Resync => match self.resync().await {
                    Ok(true) => return Some(Ok(self.view.event())),
                    Ok(false) => {}
                    Err(e) => return self.fail(e),
                },
            }
        }
    }

    /// Whether the endpoint still counts as alive after one probe.
    async fn probe(&mut self) -> bool {
        let key = self.prefix.as_bytes().to_vec();
        let ok = self
            .client
            .probe(self.endpoint, &key, self.config.probe_timeout)
            .await
            .is_ok();
        self.probe_failures = if ok {
            0
        } else {
            self.probe_failures.saturating_add(1)
        };
        self.probe_failures < self.config.probe_failures.max(1)
    }

    fn fail(&mut self, e: RegistryError) -> Option<Result<MappingEvent, RegistryError>> {
        self.done = true;
        Some(Err(e))
    }
}

/// Opens a mapping watch session of `interface` (see the module docs):
/// fails if the first range or the watch cannot be had within their
/// deadlines.
pub(crate) async fn watch_mapping(
    client: Arc<EtcdClient>,
    layout: &KeyLayout,
    config: &EtcdConfig,
    interface: &str,
    epoch: u64,
) -> Result<MappingStream, RegistryError> {
    if interface.is_empty() {
        return Err(RegistryError::Rejected(
            "an interface mapping needs a non-empty interface".into(),
        ));
    }
    let prefix = layout.mapping_prefix(interface);
    let mut session = Session {
        client,
        config: config.clone(),
        prefix,
        view: MappingView::new(layout.clone(), interface, epoch),
        watch: stream::empty().boxed(),
        endpoint: 0,
        first: true,
        probe_failures: 0,
        done: false,
    };
    session.resync().await?;
    Ok(stream::unfold(session, |mut s| async move {
        let item = s.next().await?;
        Some((item, s))
    })
    .boxed())
}

#[cfg(test)]
mod tests;
