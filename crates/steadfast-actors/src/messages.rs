//! Messages the actors exchange. Every cross-actor reference is weak, so
//! only the engine keeps actors alive and a shutdown really stops them.

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use steadfast_core::{
    CacheKey, Delivery, DirectoryUpdate, FetchError, MetadataInfo, ServiceInstance, Token,
};

use crate::link::Outbox;

/// What the registry actor hands one resolver through its feed (a
/// [`crate::link`] queue), in order: instance changes and the watch's
/// health.
#[derive(Clone, Debug)]
pub enum FeedItem {
    /// A change of the app's instances: all of them, or what changed, at a
    /// version (see [`steadfast_core::Delivery`]).
    Delivery(Delivery),
    /// The watch went down or came back, or opening it keeps failing.
    Health(RegistryHealth),
}

impl FeedItem {
    /// Instances the item carries.
    pub fn items(&self) -> usize {
        match self {
            FeedItem::Delivery(d) => d.feed.len(),
            FeedItem::Health(_) => 0,
        }
    }
}

/// The registry watch of the resolver's app went down (`stale_since:
/// Some`) or is back (`None`) (registry -> resolver). Sent when an outage
/// starts; every delivery carries the staleness as well.
#[derive(Clone, Debug)]
pub struct RegistryHealth {
    /// When the watch went down, while it is down.
    pub stale_since: Option<std::time::Instant>,
    /// While opening the app's watch keeps failing: since when, attempts,
    /// last error (`None`: not failing). A directory with no state yet
    /// reports it as `Pending { subscribe: Some(..) }`.
    pub subscribe: Option<steadfast_core::RegistryFailure>,
}

/// Subscribe the resolver feeding `feed` to the changes of `app`;
/// idempotent per id. The registry actor answers at once with the whole
/// state when it has one (this is how a restarted resolver, or one that
/// lost a delivery, resyncs).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WatchApp {
    /// Provider app.
    pub app: String,
    /// Subscriber id (one per resolver).
    pub id: u64,
    /// Where instance changes and health go.
    pub feed: Outbox<FeedItem>,
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

/// Resolver -> cache: the requests with these tokens are no longer wanted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AbandonMetadata {
    /// (app, revision); `None`: every key (a re-created resolver letting go
    /// of what its predecessor asked for).
    pub key: Option<CacheKey>,
    /// Requesting resolver.
    pub resolver: u64,
    /// Tokens of the requests.
    pub tokens: std::ops::Range<Token>,
}

/// Re-created resolver -> cache: every revision of `app` the cache holds,
/// with its metadata (`steadfast_core`'s `ResolverMachine::on_recalled`).
#[derive(Message)]
#[rtype(result = "Vec<(String, Arc<MetadataInfo>)>")]
pub struct RecallMetadata {
    /// The provider app.
    pub app: String,
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

/// Directory -> resolver: send updates for `key` to `directory` (through
/// its `updates` queue); idempotent per id. The resolver answers with the
/// key's whole state (a Reset), also to a directory that lost an update.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Attach {
    /// Subscribe key.
    pub key: String,
    /// Directory id.
    pub directory: u64,
    /// Where updates go.
    pub updates: Outbox<DirectoryUpdate>,
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

/// Caller or resolver -> directory: an endpoint announced closing; the
/// directory removes it at once and writes a tombstone (when it holds it).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct EndpointClosing(pub steadfast_core::Closing);

/// Stops an actor for good: everything it runs is cancelled first.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

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
