//! Messages the actors exchange. Every cross-actor reference is weak, so
//! only the engine keeps actors alive and a shutdown really stops them.

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use steadfast_core::{
    CacheKey, DirectoryUpdate, Feed, FetchError, HeldInstances, MetadataInfo, ServiceInstance,
    Token,
};

/// A change of one app's instances (registry -> resolver): all of them, or
/// what changed on top of the previous generation.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct InstancesChanged {
    /// Provider app.
    pub app: String,
    /// Monotonic per app, across watch re-subscribes and actor restarts.
    pub generation: u64,
    /// The instances (held ones included): a Reset or a delta.
    pub feed: Feed,
    /// Set while instances of a mass expiry right after a registry recovery
    /// are held (they are part of the state).
    pub held: Option<HeldInstances>,
    /// Since when the app's registry state is stale, as of this change
    /// (`None`: fresh). The receiver takes staleness from here: a change
    /// sent during an outage (a hold ending, a restart) is not fresh.
    pub stale_since: Option<std::time::Instant>,
}

/// The registry watch of `app` went down (`stale_since: Some`) or is back
/// (`None`) (registry -> resolver). Sent when an outage starts; every
/// [`InstancesChanged`] carries the staleness as well.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct RegistryHealth {
    /// Provider app.
    pub app: String,
    /// When the watch went down, while it is down.
    pub stale_since: Option<std::time::Instant>,
    /// While opening the app's watch keeps failing: since when, attempts,
    /// last error (`None`: not failing). A directory with no state yet
    /// reports it as `Pending { subscribe: Some(..) }`.
    pub subscribe: Option<steadfast_core::RegistryFailure>,
}

/// Subscribe `subscriber` to the instance changes of `app`; idempotent per
/// id. The registry actor answers at once with the whole state when it has
/// one
/// (this is how a restarted resolver resyncs).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WatchApp {
    /// Provider app.
    pub app: String,
    /// Subscriber id (one per resolver).
    pub id: u64,
    /// Where instance changes go.
    pub subscriber: WeakRecipient<InstancesChanged>,
    /// Where watch health changes go.
    pub health: WeakRecipient<RegistryHealth>,
}

/// Remove subscriber `id` from `app`; the watch ends with its last subscriber.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnwatchApp {
    /// Provider app.
    pub app: String,
    /// Subscriber id.
    pub id: u64,
}

/// Resolver -> cache: resolve `key`, trying `candidates` in order.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FetchMetadata {
    /// (app, revision).
    pub key: CacheKey,
    /// Instances advertising the revision.
    pub candidates: Vec<ServiceInstance>,
    /// Requesting resolver.
    pub resolver: u64,
    /// Token to answer with.
    pub token: Token,
    /// Where the answer goes.
    pub reply: WeakRecipient<MetadataFetched>,
}

/// Resolver -> cache: the request with `token` is no longer wanted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AbandonMetadata {
    /// (app, revision).
    pub key: CacheKey,
    /// Requesting resolver.
    pub resolver: u64,
    /// Token of the request.
    pub token: Token,
}

/// Cache -> resolver: the outcome of a metadata request.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct MetadataFetched {
    /// Revision asked for.
    pub revision: String,
    /// Token of the request.
    pub token: Token,
    /// Metadata, or why it could not be had.
    pub result: Result<Arc<MetadataInfo>, FetchError>,
}

/// Directory -> resolver: send updates for `key` to `directory`; idempotent per id.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Attach {
    /// Subscribe key.
    pub key: String,
    /// Directory id.
    pub directory: u64,
    /// Where updates go.
    pub recipient: WeakRecipient<ApplyUpdate>,
}

/// Directory -> resolver: stop sending updates to `directory`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Detach {
    /// Subscribe key.
    pub key: String,
    /// Directory id.
    pub directory: u64,
}

/// Resolver -> directory: a full update for one app.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ApplyUpdate(pub DirectoryUpdate);

/// Caller or resolver -> directory: an endpoint announced closing; the
/// directory removes it at once and writes a tombstone (when it holds it).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct EndpointClosing(pub steadfast_core::Closing);

/// Stops an actor for good: everything it runs is cancelled first.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Makes a supervised actor stop so its supervisor restarts it (for tests
/// and chaos drills).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ForceRestart;

/// Handle -> directory: callers are waiting on an empty directory whose
/// metadata is unresolved; ask the resolvers to retry now. The handles
/// throttle it to one per `min_probe_interval` per directory.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct DemandProbe;

/// Directory -> resolver: fire the pending retries of unresolved revisions
/// now (see [`steadfast_core::ResolverMachine::retry_now`]).
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct RetryNow;

/// Metadata of one revision known from a disk snapshot (resolver -> cache
/// actor): cached unless the cache holds the key already.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SeedMetadata {
    /// (app, revision).
    pub key: CacheKey,
    /// Its metadata (checked to be the app's and the revision's when the
    /// snapshot was decoded).
    pub info: Arc<MetadataInfo>,
}

/// The registry lost this client's session (registrar -> registry actor,
/// and to the registrar itself): register everything again and
/// re-establish every subscription, spread.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct SessionLost {
    /// What the backend said.
    pub reason: String,
}
