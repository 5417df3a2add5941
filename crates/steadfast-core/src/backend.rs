//! The two edges the engine talks to: a [`Registry`] backend and a
//! [`MetadataFetcher`]. Both return boxed futures so the actors can spawn
//! them and get the result back as a message; nothing awaits them under
//! shared state.

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use crate::error::{FetchError, PublishError, RegistryError};
use crate::event::{Listing, RegistryEvent, Version};
use crate::model::{MetadataInfo, ServiceInstance};

/// A stream of versioned events of one app's instances.
///
/// Contract:
/// - the first `Ok` item after a (re)subscribe is a [`RegistryEvent::Reset`]
///   (the authoritative current state); later items are
///   [`RegistryEvent::Delta`]s (only what changed), or a `Reset` again after
///   the source re-read the app in full (resync, resume, compaction);
/// - versions grow monotonically per source, across streams: the engine
///   ignores an event not newer than the state it holds;
/// - an `Err` item says the source is unhealthy right now (unreachable,
///   frozen, leaderless): the engine marks the app's state stale and keeps
///   reading, because the stream may heal by itself (its next `Ok` item
///   clears the mark);
/// - the end of the stream means the watch must be re-established.
pub type EventStream = BoxStream<'static, Result<RegistryEvent, RegistryError>>;

/// Something happened to this client's registry session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEvent {
    /// The backend lost what this client registered and watched (a lease
    /// expired, a reconnect landed on a server that forgot the session, the
    /// backend restarted empty): every registration must be made again and
    /// every subscription re-established with a full re-read.
    Lost {
        /// What the backend saw, for logs and status.
        reason: String,
    },
}

/// A stream of [`SessionEvent`]s; it ends when the backend is dropped.
pub type SessionStream = BoxStream<'static, SessionEvent>;

/// The set of apps that serve one interface, as recorded by providers at
/// export (Dubbo's service-name mapping).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappingEvent {
    /// Version of the mapping state (grows per source, as for instances).
    pub version: Version,
    /// Every app mapped to the interface now, sorted and deduplicated.
    pub apps: Vec<String>,
}

/// A stream of an interface's mapping: the whole app set first, then again
/// after every change. `Err` items and the end follow the
/// [`EventStream`] contract (stale but kept; end = re-watch).
pub type MappingStream = BoxStream<'static, Result<MappingEvent, RegistryError>>;

fn unsupported<T: Send + 'static>(what: &str) -> BoxFuture<'static, Result<T, RegistryError>> {
    let err = RegistryError::Unsupported(what.to_string());
    Box::pin(async move { Err(err) })
}

/// Which registry an engine uses: its kind (`memory`, `etcd`, ...) and the
/// endpoints it talks to (without user info).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegistryInfo {
    /// The backend's kind, e.g. `memory` or `etcd`.
    pub kind: String,
    /// The endpoints it talks to (empty for an in-process registry).
    pub endpoints: Vec<String>,
}

impl RegistryInfo {
    /// A description of a `kind` registry reached at `endpoints`.
    pub fn new(kind: impl Into<String>, endpoints: Vec<String>) -> Self {
        Self {
            kind: kind.into(),
            endpoints,
        }
    }
}

impl std::fmt::Display for RegistryInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.kind)?;
        if !self.endpoints.is_empty() {
            write!(f, " ({})", self.endpoints.join(", "))?;
        }
        Ok(())
    }
}

/// A service registry holding one record per provider instance.
pub trait Registry: Send + Sync + 'static {
    /// Lists the current instances of `app`, with the version listed.
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>>;
    /// Watches `app`: a Reset at once, then deltas (see [`EventStream`]).
    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>>;
    /// Registers (or replaces) an instance.
    fn register(&self, instance: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>>;
    /// Removes an instance.
    fn unregister(
        &self,
        instance: ServiceInstance,
    ) -> BoxFuture<'static, Result<(), RegistryError>>;
    /// Whether every watch stream re-reads its app in full by itself each
    /// time it resumes after an outage (an `Err` item, a reconnect), so
    /// that its next `Ok` item is already a fresh full read (a Reset). If so, the
    /// engine skips its own resume resync (a second full read per app per
    /// outage); its periodic resync stays. Default: `false` (the engine
    /// re-reads on resume).
    fn rereads_on_resume(&self) -> bool {
        false
    }

    /// What this registry is and where it points (never credentials), for
    /// the engine's startup line, its inspect report, the status page and
    /// the `steadfast_registry_info` metric. Default: kind `custom`, no
    /// endpoints.
    fn describe(&self) -> RegistryInfo {
        RegistryInfo::new("custom", Vec::new())
    }

    /// Session events of this client, if the backend has sessions (`None`:
    /// it has none, or it restores its registrations by itself). Called once
    /// per engine.
    fn sessions(&self) -> Option<SessionStream> {
        None
    }

    /// Records that `app` serves `interface` (one key per app, so
    /// concurrent providers of different apps never overwrite each other).
    /// Default: unsupported.
    fn register_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let _ = (interface, app);
        unsupported("interface mappings")
    }

    /// Removes the record that `app` serves `interface`. Default:
    /// unsupported.
    fn unregister_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let _ = (interface, app);
        unsupported("interface mappings")
    }

    /// Watches the apps mapped to `interface` (see [`MappingStream`]).
    /// Default: unsupported.
    fn watch_mapping(
        &self,
        interface: &str,
    ) -> BoxFuture<'static, Result<MappingStream, RegistryError>> {
        let _ = interface;
        unsupported("interface mappings")
    }
}

/// Fetches the MetadataInfo of one revision from one provider instance.
pub trait MetadataFetcher: Send + Sync + 'static {
    /// Fetches `revision` from `instance`'s MetadataService. Implementations
    /// connect only to the host the registry record names.
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>>;
}

/// A shared fetcher is a fetcher (so a fetcher chosen at run time, an
/// `Arc<dyn MetadataFetcher>`, can be handed on as one).
impl<T: MetadataFetcher + ?Sized> MetadataFetcher for std::sync::Arc<T> {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        (**self).fetch(instance, revision)
    }
}

/// Where a provider publishes its MetadataInfo so consumers can fetch it:
/// its own MetadataService, a remote metadata report, or both.
pub trait MetadataPublisher: Send + Sync + 'static {
    /// Makes `info` available under its app and revision.
    fn publish(&self, info: MetadataInfo) -> BoxFuture<'static, Result<(), PublishError>>;
    /// Stops serving `revision` of `app`.
    fn withdraw(&self, app: &str, revision: &str) -> BoxFuture<'static, Result<(), PublishError>>;
}

/// Reads a remote metadata report's content (the MetadataInfo JSON kept
/// under `app` and `revision`), as Steadfast, Java Dubbo and dubbo-go
/// write it: fields it does not know (Go's `tag`, `lastUpdatedTime`) are
/// ignored, a group or version written as `""` (Go) is absent, and the
/// services are keyed by their match key whatever key the writer used.
/// Bad JSON is [`FetchError::Malformed`], another app or revision inside
/// [`FetchError::Mismatch`] ([`check_metadata`]).
pub fn decode_report(
    app: &str,
    revision: &str,
    content: &[u8],
) -> Result<MetadataInfo, FetchError> {
    let mut info: MetadataInfo = serde_json::from_slice(content).map_err(|e| {
        FetchError::Malformed(format!(
            "{}@{}: {e}",
            app.escape_debug(),
            revision.escape_debug()
        ))
    })?;
    let services = std::mem::take(&mut info.services);
    for (_, mut s) in services {
        s.group = s.group.filter(|g| !g.is_empty());
        s.version = s.version.filter(|v| !v.is_empty());
        info.services.insert(s.match_key(), s);
    }
    check_metadata(app, revision, &info)?;
    Ok(info)
}

/// Checks that fetched metadata is the one asked for.
pub fn check_metadata(app: &str, revision: &str, info: &MetadataInfo) -> Result<(), FetchError> {
    if info.app == app && info.revision == revision {
        Ok(())
    } else {
        Err(FetchError::Mismatch {
            expected: format!("{app}@{revision}"),
            actual: format!("{}@{}", info.app, info.revision),
        })
    }
}
