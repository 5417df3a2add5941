//! Steadfast core: the discovery model and the sans-IO state machines
//! (resolver with its retry scheduler, registry subscription, directory,
//! metadata cache, backoff and recover, the fetch budget's candidate policy).
//! Nothing here does IO or reads a clock: time and randomness are inputs,
//! and every machine returns actions for an actor shell to perform. The one
//! exception is the [`FallbackFetcher`] combinator, whose per-source bounds
//! use the tokio timer of the runtime the fetch runs on.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod backoff;
pub mod balance;
pub mod call_retry;
pub mod change;
pub mod closing;
pub mod contain;
pub mod directory;
pub mod endpoint_set;
pub mod error;
pub mod event;
pub mod export;
pub mod fallback;
pub mod fetch_plan;
pub mod freshness;
pub mod incarnation;
pub mod instance;
pub mod instance_set;
pub mod jitter;
pub mod keys;
pub mod lookup;
pub mod mapping;
pub mod metadata_cache;
pub mod model;
pub mod model_builder;
pub mod pending;
pub mod pool;
pub mod probe;
pub mod recover;
pub mod registrar;
pub mod resolver;
pub mod retry_budget;
pub mod revision;
pub mod slot_index;
pub mod snapshot;
pub mod subscription;
pub mod update;
pub mod url;
pub mod url_http;

pub use backend::{
    check_metadata, EventStream, MappingEvent, MappingStream, MetadataFetcher, MetadataPublisher,
    Registry, SessionEvent, SessionStream,
};
pub use backoff::{BackoffError, BackoffPolicy, MAX_BACKOFF};
pub use balance::{
    BalanceConfig, BalanceEnv, DirectoryBalance, FailureClass, Lease, Outcome, OutlierPolicy,
    PeakEwma, PickError, Strategy,
};
pub use call_retry::{CallRetry, CallRetryPolicy, CallStep, GiveUp};
pub use change::{
    delta_budget, Change, ChangeQueue, Fit, Pushed, ResetAsk, QUEUE_MIN_ITEMS, RESET_ASK_INTERVAL,
};
pub use closing::{Closing, ClosingSource};
pub use contain::{contain_call, contain_publish_call, contain_registry_call};
pub use directory::{
    Applied, DirectoryMachine, DirectoryStatus, EmptyReason, NoEndpoint, NoEndpointReason,
    TombstoneCounts,
};
pub use endpoint_set::{
    thread_random, Closed, DirectorySnapshot, EndpointSet, EndpointSetEditor, Published, CHUNK,
    PAGE, THREAD_CACHE,
};
pub use error::{panic_message, ErrorClass, FetchError, PublishError, RegistryError};
pub use event::{Changes, InstanceMap, Listing, RegistryEvent, Version};
pub use export::{ExportAction, ExportMachine, ExportPhase, ExportToken, StopPlan};
pub use fallback::{FallbackFetcher, DEFAULT_FALLBACK_TIMEOUT, DEFAULT_PRIMARY_TIMEOUT};
pub use fetch_plan::{fetch_contained, FetchAction, FetchMemory, FetchPlan, FetchPolicy};
pub use freshness::{Freshness, Source};
pub use incarnation::{BootId, Incarnation};
pub use instance::{Instance, RevisionInterner};
pub use instance_set::InstanceSet;
pub use keys::{match_key, service_key, Reference};
pub use lookup::{InstancesAnswer, LookupAction, LookupCache, LookupConfig, LookupError, WaiterId};
pub use mapping::{MappingAction, MappingMachine, MappingToken};
pub use metadata_cache::{CacheKey, Lookup, MetadataCache};
pub use model::{MetadataInfo, ServiceInfo, ServiceInstance};
pub use model_builder::ServiceInfoBuilder;
pub use pending::{Pending, RegistryFailure};
pub use probe::ProbeThrottle;
pub use recover::{Recover, RecoverMemory, RecoverPolicy, Retry};
pub use registrar::{
    Intent, RecordKind, RegistrarAction, RegistrarConfig, RegistrarMachine, RegistrarOp,
    RegistrarToken, RegistrationKey, RegistrationState, DEFAULT_SESSION_SPREAD,
};
pub use resolver::{ResolverAction, ResolverMachine, Token};
pub use retry_budget::{RetryBudget, RetryBudgetConfig, RetryBudgetError};
pub use snapshot::{AppSnapshot, ServedFromSnapshot, SnapshotError, SnapshotOrigin};
pub use subscription::{
    Delivery, Feed, SubscriptionAction, SubscriptionConfig, SubscriptionMachine,
};
pub use update::{DirectoryUpdate, HeldInstances, NotServing, Unresolved, UpdateState, UrlChange};
pub use url::{Endpoint, ServiceEndpoint, ServiceUrl};
