//! Steadfast core: the discovery model and the sans-IO state machines
//! (resolver with its retry scheduler, registry subscription, directory,
//! metadata cache, backoff and recover).
//! Nothing here does IO or reads a clock: time and randomness are inputs,
//! and every machine returns actions for an actor shell to perform.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod backoff;
pub mod directory;
pub mod error;
pub mod fallback;
pub mod incarnation;
pub mod keys;
pub mod metadata_cache;
pub mod model;
pub mod recover;
pub mod resolver;
pub mod revision;
pub mod subscription;
pub mod update;
pub mod url;

pub use backend::{
    check_metadata, MetadataFetcher, MetadataPublisher, Registry, Snapshot, SnapshotStream,
};
pub use backoff::{BackoffError, BackoffPolicy, MAX_BACKOFF};
pub use directory::{DirectoryMachine, DirectoryStatus, EmptyReason};
pub use error::{panic_message, ErrorClass, FetchError, PublishError, RegistryError};
pub use fallback::FallbackFetcher;
pub use incarnation::Incarnation;
pub use keys::{match_key, service_key, Reference};
pub use metadata_cache::{CacheKey, Lookup, MetadataCache};
pub use model::{MetadataInfo, ServiceInfo, ServiceInstance};
pub use recover::{Recover, RecoverMemory, RecoverPolicy, Retry};
pub use resolver::{ResolverAction, ResolverMachine, Token};
pub use subscription::{SubscriptionAction, SubscriptionConfig, SubscriptionMachine};
pub use update::{DirectoryUpdate, HeldInstances, Unresolved, UpdateState};
pub use url::{ServiceEndpoint, ServiceUrl};
