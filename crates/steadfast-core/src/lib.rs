//! Steadfast core: the discovery model and the sans-IO state machines
//! (resolver with its retry scheduler, registry subscription, directory,
//! metadata cache, backoff and recover, the fetch budget's candidate policy).
//! Nothing here does IO or reads a clock: time and randomness are inputs,
//! and every machine returns actions for an actor shell to perform. The one
//! exception is the [`FallbackFetcher`] combinator, whose per-source bounds
//! use the tokio timer of the runtime the fetch runs on.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod backoff;
mod balance;
mod call_retry;
mod change;
mod closing;
mod contain;
mod counters;
mod directory;
mod dubbo_record;
mod endpoint_diff;
mod endpoint_set;
mod error;
mod event;
mod event_queue;
mod export;
mod fallback;
mod fetch_plan;
mod freshness;
mod incarnation;
mod instance;
mod instance_set;
mod jitter;
mod keys;
mod lifetimes;
mod lookup;
mod mapping;
mod metadata_cache;
mod model;
mod model_builder;
mod pending;
pub mod pool;
mod probe;
mod recover;
mod registrar;
mod resolver;
mod retry_budget;
mod revision;
mod secret;
mod slot_index;
pub mod snapshot;
mod subscription;
mod update;
mod url;
mod url_http;

pub use backend::{
    check_metadata, decode_report, EventStream, MappingEvent, MappingStream, MetadataFetcher,
    MetadataPublisher, Registry, RegistryInfo, SessionEvent, SessionStream,
};
pub use backoff::{BackoffError, BackoffPolicy, MAX_BACKOFF};
pub use balance::{
    BalanceConfig, BalanceEnv, DirectoryBalance, Ejection, EndpointStats, FailureClass,
    FailureRate, FailureStats, Lease, Outcome, OutlierPolicy, PeakEwma, PickError, Report,
    StatsView, Strategy, Trigger,
};
pub use call_retry::{CallRetry, CallRetryPolicy, CallStep, GiveUp};
pub use change::{
    delta_budget, Change, ChangeQueue, Fit, Pushed, ResetAsk, QUEUE_MIN_ITEMS, RESET_ASK_INTERVAL,
};
pub use closing::{Closing, ClosingSource};
pub use contain::{contain_call, contain_publish_call, contain_registry_call};
pub use counters::{CounterKind, CounterSpec, CounterValue};
pub use directory::{
    Applied, DirectoryMachine, DirectoryResume, DirectoryStatus, EmptyReason, NoEndpoint,
    NoEndpointReason, TombstoneCounts, RESUME_GATE,
};
pub use dubbo_record::{
    adopt_dubbo_metadata, derived_port, dubbo_endpoints, dubbo_metadata, metadata_service,
    DubboEndpoint, DubboRecordError, MetadataServiceParams, DUBBO_ENDPOINTS_KEY,
    DUBBO_METADATA_PARAMS_KEY, DUBBO_META_VERSION_KEY, DUBBO_REVISION_KEY, DUBBO_STORAGE_KEY,
    DUBBO_TIMESTAMP_KEY, META_V2,
};
pub use endpoint_diff::{endpoint_key, EndpointChange, EndpointDiff};
pub use endpoint_set::{
    wyrand, Closed, DirectorySnapshot, EndpointSet, EndpointSetEditor, Published, CHUNK, PAGE,
    THREAD_CACHE,
};
pub use error::{
    error_chain, excerpt, panic_message, ErrorClass, FetchError, PublishError, RegistryError,
};
pub use event::{same, Changes, InstanceMap, Listing, MapApplied, RegistryEvent, Version};
pub use event_queue::{event_stream, EventQueue, Leavers};
pub use export::{ExportAction, ExportMachine, ExportPhase, ExportToken, StopPlan};
pub use fallback::{FallbackFetcher, DEFAULT_FALLBACK_TIMEOUT, DEFAULT_PRIMARY_TIMEOUT};
pub use fetch_plan::{fetch_contained, FetchAction, FetchMemory, FetchPlan, FetchPolicy};
pub use freshness::{Freshness, Source};
pub use incarnation::{BootId, Incarnation, BOOT_ID_KEY, EXPORT_MS_KEY};
pub use instance::{Instance, RevisionInterner};
pub use instance_set::InstanceSet;
pub use keys::{match_key, service_key, Reference};
pub use lifetimes::{LifetimeRefused, Lifetimes, Released, SubscribeOutcome};
pub use lookup::{
    InstancesAnswer, LookupAction, LookupCache, LookupConfig, LookupError, WaiterId,
    MAX_LOOKUP_TTL_JITTER,
};
pub use mapping::{MappingAction, MappingMachine, MappingToken};
pub use metadata_cache::{CacheKey, Lookup, MetadataCache};
pub use model::{
    MetadataInfo, ServiceInfo, ServiceInstance, CLOSING_KEY, EMPTY_REVISION, METADATA_PORT_KEY,
    REVISION_KEY,
};
pub use model_builder::ServiceInfoBuilder;
pub use pending::{Pending, RegistryFailure};
pub use probe::ProbeThrottle;
pub use recover::{Recover, RecoverMemory, RecoverPolicy, Retry};
pub use registrar::{
    Intent, RecordKind, RegistrarAction, RegistrarConfig, RegistrarMachine, RegistrarOp,
    RegistrarResume, RegistrarToken, RegistrationKey, RegistrationState, DEFAULT_SESSION_SPREAD,
};
pub use resolver::{
    AppInspection, AttachUpdates, InstanceInspection, ResolverAction, ResolverMachine, ResumePoint,
    RevisionInspection, RevisionPhase, Token,
};
pub use retry_budget::{RetryBudget, RetryBudgetConfig, RetryBudgetError};
pub use revision::compute_revision;
pub use secret::{Secret, REDACTED};
pub use snapshot::serve::{ServedFromSnapshot, SnapshotOrigin};
pub use subscription::{
    Delivery, Feed, LiveState, SubscriptionAction, SubscriptionConfig, SubscriptionMachine,
    SubscriptionResume, TimerKind, To, WatchInspection, DEFAULT_PROBE_INTERVAL, RECONCILE_JITTER,
};
pub use update::{DirectoryUpdate, HeldInstances, NotServing, Unresolved, UpdateState, UrlChange};
pub use url::{Endpoint, ServiceEndpoint, ServiceUrl};
