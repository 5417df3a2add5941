//! Interface -> app mappings on Nacos config, in Dubbo's layout: the item
//! (data id = the interface, group = `mapping`) holds the apps that serve
//! it, comma-separated. Writes merge: read, add or remove the app, write
//! with the read's MD5 as compare-and-swap, read back to check; a lost race
//! is tried again, a bounded number of times. rnacos does not enforce the
//! compare-and-swap, so a concurrent writer can still replace a write after
//! its check: every client asserts its own mappings again at each resync
//! (one read per item when nothing was lost), which bounds such a loss to
//! one resync interval. Readers listen to the item: the server tells the
//! client when it changes, and the client reads it again; every resync
//! reads every watched item too (a missed notification).

use std::collections::HashMap;
use std::sync::Arc;

use steadfast_core::{MappingEvent, MappingStream, RegistryError};
use tokio::sync::watch;

use crate::config_service::Item;
use crate::error::NacosError;
use crate::protocol::{ConfigBatchListenRequest, ListenContext, ResponseHead};
use crate::registry::Shared;

/// The group of every mapping item.
pub const MAPPING_GROUP: &str = "mapping";

/// Attempts of one merged write before it gives up.
const WRITE_ATTEMPTS: usize = 5;

type Latest = Option<Result<MappingEvent, RegistryError>>;

/// The watched mapping items of one client.
#[derive(Debug, Default)]
pub struct Mappings {
    watched: HashMap<String, Watched>,
}

#[derive(Debug)]
struct Watched {
    /// The latest state (a watch channel: a slow reader sees the latest,
    /// never a backlog).
    sender: watch::Sender<Latest>,
    /// The MD5 of the content last read (listened to with it).
    md5: String,
    apps: Option<Vec<String>>,
}

/// The apps of an item's content: comma-separated, trimmed, de-duplicated
/// (first occurrence kept), empty names skipped.
pub fn parse_apps(content: &str) -> Vec<String> {
    let mut apps: Vec<String> = Vec::new();
    for app in content.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if !apps.iter().any(|a| a == app) {
            apps.push(app.to_string());
        }
    }
    apps
}

impl Mappings {
    /// A stream of `interface`'s apps (and whether it is new: the driver
    /// listens to it and reads it).
    fn watch(&mut self, interface: &str) -> (MappingStream, bool) {
        let new = !self.watched.contains_key(interface);
        let entry = self
            .watched
            .entry(interface.to_string())
            .or_insert_with(|| Watched {
                sender: watch::Sender::new(None),
                md5: String::new(),
                apps: None,
            });
        let stream = tokio_stream::wrappers::WatchStream::new(entry.sender.subscribe());
        let stream = futures::StreamExt::filter_map(stream, |latest| async move { latest });
        (Box::pin(stream), new)
    }

    /// Every watched interface with the MD5 it was last read at; drops the
    /// ones nobody reads any more (returned apart, to stop listening).
    fn sweep(&mut self) -> (Vec<(String, String)>, Vec<String>) {
        let gone: Vec<String> = self
            .watched
            .iter()
            .filter(|(_, w)| w.sender.receiver_count() == 0)
            .map(|(i, _)| i.clone())
            .collect();
        for i in &gone {
            self.watched.remove(i);
        }
        let live = self
            .watched
            .iter()
            .map(|(i, w)| (i.clone(), w.md5.clone()))
            .collect();
        (live, gone)
    }
}

impl Shared {
    /// Adds (`mapped`) or removes `app` in `interface`'s item.
    pub(crate) async fn set_mapping(
        &self,
        interface: &str,
        app: &str,
        mapped: bool,
    ) -> Result<(), NacosError> {
        for _ in 0..WRITE_ATTEMPTS {
            let item = self.config_get(interface, MAPPING_GROUP).await?;
            let (mut apps, md5) = match &item {
                Some(Item { content, md5 }) => (parse_apps(content), Some(md5.clone())),
                None => (Vec::new(), None),
            };
            if apps.iter().any(|a| a == app) == mapped {
                return Ok(());
            }
            if mapped {
                apps.push(app.to_string());
            } else {
                apps.retain(|a| a != app);
            }
            let written = if apps.is_empty() {
                self.config_remove(interface, MAPPING_GROUP).await
            } else {
                self.config_put(interface, MAPPING_GROUP, apps.join(","), md5)
                    .await
            };
            match written {
                // A compare-and-swap refused (Java Nacos): the item changed
                // since the read; merge again.
                Err(NacosError::Refused { .. }) => continue,
                other => other?,
            }
            // Read back: a concurrent writer may have replaced this write.
            let now = self.config_get(interface, MAPPING_GROUP).await?;
            let has = now.is_some_and(|i| parse_apps(&i.content).iter().any(|a| a == app));
            if has == mapped {
                return Ok(());
            }
        }
        Err(NacosError::Refused {
            call: "ConfigPublishRequest",
            code: 0,
            message: format!("mapping of {interface} kept changing under {WRITE_ATTEMPTS} writes"),
        })
    }

    /// Asserts every mapping this client wrote (at each resync and after a
    /// reconnect): one read per item, and a merged write where a concurrent
    /// writer dropped the app.
    pub(crate) async fn reassert_mappings(&self) {
        let mine: Vec<(String, String)> = self.mapped().iter().cloned().collect();
        for (interface, app) in mine {
            if let Err(e) = self.set_mapping(&interface, &app, true).await {
                tracing::warn!(interface = %interface.escape_debug(), error = %e, "re-asserting a nacos mapping failed");
            }
        }
    }

    /// A stream of `interface`'s apps: the item's apps now, then again
    /// after each change.
    pub(crate) fn watch_mapping(&self, interface: &str) -> MappingStream {
        let (stream, new) = self.mappings().watch(interface);
        if new {
            self.mapping_pending(interface);
        }
        stream
    }

    /// Listens to every watched item on the current connection and reads
    /// each (after a reconnect, at a resync, and for new watchers); stops
    /// listening to the ones nobody reads any more.
    pub(crate) async fn refresh_mappings(&self, only: Option<Vec<String>>) {
        let (live, gone) = self.mappings().sweep();
        let Some(conn) = self.connection() else {
            return;
        };
        let listen = |items: Vec<(String, String)>, listen: bool| ConfigBatchListenRequest {
            headers: HashMap::new(),
            request_id: conn.next_id(),
            module: "config",
            listen,
            config_listen_contexts: items
                .into_iter()
                .map(|(data_id, md5)| ListenContext {
                    data_id,
                    group: MAPPING_GROUP.to_string(),
                    tenant: self.config.namespace.clone(),
                    md5,
                })
                .collect(),
        };
        let timeout = self.config.request_timeout;
        if !gone.is_empty() {
            let stop = listen(
                gone.into_iter().map(|i| (i, String::new())).collect(),
                false,
            );
            let _ = conn
                .call::<_, ResponseHead>("ConfigBatchListenRequest", &stop, timeout)
                .await;
        }
        let targets: Vec<(String, String)> = match only {
            Some(only) => live.into_iter().filter(|(i, _)| only.contains(i)).collect(),
            None => live,
        };
        if targets.is_empty() {
            return;
        }
        let request = listen(targets.clone(), true);
        if let Err(e) = conn
            .call::<_, ResponseHead>("ConfigBatchListenRequest", &request, timeout)
            .await
        {
            tracing::warn!(error = %e, "listening to nacos mapping items failed");
        }
        for (interface, _) in targets {
            self.read_mapping(&interface).await;
        }
    }

    /// Reads `interface`'s item and tells its watchers if the apps changed
    /// (or why the read failed).
    pub(crate) async fn read_mapping(&self, interface: &str) {
        let read = self.config_get(interface, MAPPING_GROUP).await;
        let version = self.subs().next_version();
        let mut mappings = self.mappings();
        let Some(w) = mappings.watched.get_mut(interface) else {
            return;
        };
        match read {
            Ok(item) => {
                let (content, md5) =
                    item.map_or((String::new(), String::new()), |i| (i.content, i.md5));
                let mut apps = parse_apps(&content);
                apps.sort();
                w.md5 = md5;
                if w.apps.as_ref() != Some(&apps) {
                    w.apps = Some(apps.clone());
                    w.sender
                        .send_replace(Some(Ok(MappingEvent { version, apps })));
                }
            }
            Err(e) => {
                w.sender
                    .send_replace(Some(Err(RegistryError::Unavailable(format!(
                        "reading the nacos mapping of {} failed: {e}",
                        interface.escape_debug()
                    )))));
                // Read again at the next chance: the next event must carry
                // the apps even when they did not change.
                w.apps = None;
            }
        }
    }
}

/// Shared mapping state of a client.
pub(crate) type MappingsCell = Arc<std::sync::Mutex<Mappings>>;

#[cfg(test)]
mod tests {
    use super::parse_apps;

    #[test]
    fn apps_parse_trimmed_deduplicated_and_never_empty() {
        assert_eq!(parse_apps(" a, b,,a ,c "), ["a", "b", "c"]);
        assert!(parse_apps("").is_empty());
        assert!(parse_apps(" , ").is_empty());
    }
}
