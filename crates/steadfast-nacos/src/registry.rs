//! [`NacosRegistry`]: a [`Registry`] over the Nacos 2.x gRPC protocol.
//! Registrations are ephemeral instances of the client's one connection
//! and are redone on every new connection; watches are subscriptions whose
//! pushes become versioned events (see `subscriptions`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use steadfast_core::{
    event_stream, EventQueue, EventStream, Instance, Leavers, Listing, Registry, RegistryError,
    RegistryInfo, RevisionInterner, ServiceInstance,
};
use tokio::sync::Notify;

use crate::config::NacosConfig;
use crate::connection::Connection;
use crate::error::NacosError;
use crate::protocol::{
    InstanceRequest, NacosInstance, NamingHead, ServiceInfo, ServiceInfoResponse,
    ServiceQueryRequest, SubscribeServiceRequest,
};
use crate::record;
use crate::stats::{NacosStats, NacosStatsSnapshot};
use crate::subscriptions::{ListKind, Subscriptions};

/// What the registry's handles and its driver share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: NacosConfig,
    pub(crate) stats: NacosStats,
    pub(crate) closed: Notify,
    pub(crate) changed: Notify,
    pub(crate) leavers: Arc<Leavers<u64>>,
    subs: Mutex<Subscriptions>,
    conn: tokio::sync::watch::Sender<Option<Arc<Connection>>>,
    registrations: Mutex<BTreeMap<(String, String), NacosInstanceOf>>,
    pending: Mutex<Vec<String>>,
    started: AtomicBool,
    last_push: Mutex<Option<Instant>>,
    /// The access token of a server with auth on (every call sends it; a
    /// `Secret`, so no `Debug` shows it).
    pub(crate) token: Arc<std::sync::RwLock<Option<steadfast_core::Secret>>>,
    /// The HTTP client of the login (built when auth is configured).
    pub(crate) http: Option<reqwest::Client>,
    mappings: crate::mapping::MappingsCell,
    mapping_pending: Mutex<Vec<String>>,
    /// The mappings this client wrote (re-asserted at each resync).
    mapped: Mutex<std::collections::BTreeSet<(String, String)>>,
}

/// A registration: the app, the instance's id and its record.
#[derive(Clone, Debug)]
pub(crate) struct NacosInstanceOf {
    pub(crate) app: String,
    pub(crate) key: String,
    pub(crate) record: NacosInstance,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn subs(&self) -> MutexGuard<'_, Subscriptions> {
        lock(&self.subs)
    }

    pub(crate) fn connection(&self) -> Option<Arc<Connection>> {
        self.conn.borrow().clone()
    }

    pub(crate) fn set_connection(&self, conn: Option<Arc<Connection>>) {
        self.conn.send_replace(conn);
    }

    /// The connection, waiting for one at most a call's deadline (a call
    /// made while the client connects or reconnects waits for it instead
    /// of failing at once).
    pub(crate) async fn wait_connection(&self) -> Result<Arc<Connection>, NacosError> {
        let mut rx = self.conn.subscribe();
        let waited =
            tokio::time::timeout(self.config.request_timeout, rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(conn)) => conn.clone().ok_or(NacosError::NotConnected),
            _ => Err(NacosError::NotConnected),
        }
    }

    pub(crate) fn server_label(&self) -> String {
        self.connection()
            .map_or_else(String::new, |c| c.server().to_string())
    }

    /// Logs in at `server` when auth is configured: the token every call
    /// sends from now on, and how long it lives (`None`: no auth).
    pub(crate) async fn login(
        &self,
        server: &str,
    ) -> Result<Option<std::time::Duration>, NacosError> {
        let Some(auth) = &self.config.auth else {
            return Ok(None);
        };
        let http = self.http.as_ref().ok_or_else(|| NacosError::Refused {
            call: "login",
            code: 0,
            message: "no HTTP client for the login could be built".into(),
        })?;
        let token = crate::login::login(http, server, auth, self.config.request_timeout).await?;
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = Some(token.value.into());
        Ok(Some(token.ttl))
    }

    pub(crate) fn mappings(&self) -> MutexGuard<'_, crate::mapping::Mappings> {
        lock(&self.mappings)
    }

    /// A new watcher of `interface`: the driver listens to it and reads it.
    pub(crate) fn mapping_pending(&self, interface: &str) {
        lock(&self.mapping_pending).push(interface.to_string());
        self.changed.notify_one();
    }

    pub(crate) fn mapped(&self) -> MutexGuard<'_, std::collections::BTreeSet<(String, String)>> {
        lock(&self.mapped)
    }

    pub(crate) fn take_mapping_pending(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.mapping_pending))
    }

    pub(crate) fn set_last_push(&self, at: Instant) {
        *lock(&self.last_push) = Some(at);
    }

    /// `work` within the operation deadline.
    pub(crate) async fn bounded<T>(
        &self,
        call: &'static str,
        work: impl std::future::Future<Output = Result<T, NacosError>>,
    ) -> Result<T, NacosError> {
        tokio::time::timeout(self.config.operation_timeout, work)
            .await
            .map_err(|_| NacosError::Timeout { call })?
    }

    /// Whether (app, id) is still registered.
    pub(crate) fn is_registered(&self, key: &(String, String)) -> bool {
        lock(&self.registrations).contains_key(key)
    }

    pub(crate) fn registrations(&self) -> Vec<NacosInstanceOf> {
        lock(&self.registrations).values().cloned().collect()
    }

    /// `app` is subscribed again at the next resync (once, if it is still
    /// watched then).
    pub(crate) fn retry_later(&self, app: String) {
        let mut pending = lock(&self.pending);
        if !pending.contains(&app) {
            pending.push(app);
        }
    }

    pub(crate) fn take_pending(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.pending))
    }

    fn head(&self, conn: &Connection, app: &str) -> NamingHead {
        NamingHead {
            request_id: conn.next_id(),
            module: "naming",
            namespace: self.config.namespace.clone(),
            service_name: app.to_string(),
            group_name: self.config.group.clone(),
            ..Default::default()
        }
    }

    /// Registers (`true`) or deregisters an instance on `conn`.
    pub(crate) async fn instance_call(
        &self,
        conn: &Connection,
        of: &NacosInstanceOf,
        register: bool,
    ) -> Result<(), NacosError> {
        let request = InstanceRequest {
            head: self.head(conn, &of.app),
            r#type: if register {
                "registerInstance"
            } else {
                "deregisterInstance"
            },
            instance: of.record.clone(),
        };
        conn.call::<_, crate::protocol::ResponseHead>(
            "InstanceRequest",
            &request,
            self.config.request_timeout,
        )
        .await
        .map(|_| ())
    }

    /// Subscribes (`true`; the answer's list is applied) or unsubscribes.
    pub(crate) async fn subscribe_call(
        &self,
        conn: &Connection,
        app: &str,
        subscribe: bool,
    ) -> Result<(), NacosError> {
        let request = SubscribeServiceRequest {
            head: self.head(conn, app),
            clusters: String::new(),
            subscribe,
        };
        let answer: ServiceInfoResponse = conn
            .call(
                "SubscribeServiceRequest",
                &request,
                self.config.request_timeout,
            )
            .await?;
        if subscribe {
            let info = answer.service_info.unwrap_or_default();
            self.subs().apply(app, info, ListKind::Pushed, &self.stats);
        }
        Ok(())
    }

    /// The full list of `app`.
    pub(crate) async fn query_call(
        &self,
        conn: &Connection,
        app: &str,
    ) -> Result<ServiceInfo, NacosError> {
        let request = ServiceQueryRequest {
            head: self.head(conn, app),
            cluster: String::new(),
            healthy_only: false,
            udp_port: 0,
        };
        let answer: ServiceInfoResponse = conn
            .call("ServiceQueryRequest", &request, self.config.request_timeout)
            .await?;
        Ok(answer.service_info.unwrap_or_default())
    }
}

/// Closes the client when the last handle goes.
#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.closed.notify_one();
    }
}

/// A [`Registry`] on a Nacos cluster over its 2.x gRPC protocol (rnacos,
/// Nacos 2.x and 3.x). Cheap to clone; clones share one connection. The
/// connection is made on first use (inside a tokio runtime) and closed
/// when the last clone is dropped (the server then drops its instances).
#[derive(Clone, Debug)]
pub struct NacosRegistry {
    handle: Arc<Handle>,
}

impl NacosRegistry {
    /// A client of the servers `config` names.
    pub fn new(config: NacosConfig) -> Self {
        // Never through a proxy: the servers are named directly.
        let http = config.auth.as_ref().and_then(|_| {
            reqwest::Client::builder()
                .no_proxy()
                .timeout(config.request_timeout)
                .build()
                .ok()
        });
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let shared = Arc::new(Shared {
            config,
            stats: NacosStats::default(),
            closed: Notify::new(),
            changed: Notify::new(),
            leavers: Arc::new(Leavers::default()),
            subs: Mutex::new(Subscriptions::new(epoch)),
            conn: tokio::sync::watch::Sender::new(None),
            registrations: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(Vec::new()),
            started: AtomicBool::new(false),
            last_push: Mutex::new(None),
            token: Arc::new(std::sync::RwLock::new(None)),
            http,
            mappings: Default::default(),
            mapping_pending: Mutex::new(Vec::new()),
            mapped: Mutex::new(Default::default()),
        });
        Self {
            handle: Arc::new(Handle { shared }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// Starts the driver on first use (needs a tokio runtime).
    pub(crate) fn start_driver(&self) {
        self.start();
    }

    fn start(&self) {
        let shared = self.shared();
        if !shared.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(crate::driver::run(shared.clone()));
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NacosConfig {
        &self.shared().config
    }

    /// A copy of the counters.
    pub fn stats(&self) -> NacosStatsSnapshot {
        self.shared().stats.snapshot()
    }

    /// Whether the client is connected right now.
    pub fn is_connected(&self) -> bool {
        self.shared().connection().is_some()
    }

    /// When the last pushed list reached the client (its message read off
    /// the stream, before it was decoded): where the engine's own part of
    /// "push -> visible" starts.
    pub fn last_push(&self) -> Option<Instant> {
        *lock(&self.shared().last_push)
    }

    /// The server the client is connected to, if any.
    pub fn connected_server(&self) -> Option<String> {
        self.shared().connection().map(|c| c.server().to_string())
    }
}

/// The engine's view of a Nacos failure.
fn to_registry(e: NacosError) -> RegistryError {
    match e {
        NacosError::Timeout { .. } => RegistryError::Timeout,
        NacosError::Refused { .. } => RegistryError::Rejected(e.to_string()),
        other => RegistryError::Unavailable(other.to_string()),
    }
}

impl Registry for NacosRegistry {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        let this = self.clone();
        let app = app.to_string();
        Box::pin(async move {
            this.start();
            let shared = this.shared();
            let info = shared
                .bounded("ServiceQueryRequest", async {
                    let conn = shared.wait_connection().await?;
                    shared.query_call(&conn, &app).await
                })
                .await
                .map_err(to_registry)?;
            let version = shared.subs().next_version();
            let mut revisions = RevisionInterner::default();
            let mut instances = Vec::new();
            for host in info.hosts.iter().flatten() {
                match record::decode(&app, host.get()) {
                    Ok(r) => instances.push(Arc::new(Instance::from_record(r, &mut revisions))),
                    Err(_) => NacosStats::bump(&shared.stats.invalid_records),
                }
            }
            Ok(Listing { version, instances })
        })
    }

    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        let this = self.clone();
        let app = app.to_string();
        Box::pin(async move {
            this.start();
            let shared = this.shared();
            let queue = EventQueue::new(shared.config.queue_capacity);
            // While the client has no connection (lost, or a start-up that
            // failed), the new watcher hears why at once.
            let (key, new) = shared.subs().watch(&app, queue.clone());
            if new {
                shared.retry_later(app);
                shared.changed.notify_one();
            }
            Ok(event_stream(queue, key, shared.leavers.clone()))
        })
    }

    fn register(&self, instance: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        let this = self.clone();
        Box::pin(async move {
            this.start();
            let shared = this.shared();
            let of = NacosInstanceOf {
                app: instance.app.clone(),
                key: instance.id.clone(),
                record: record::encode(&instance),
            };
            // Kept first: a registration made while disconnected is made
            // on the next connection.
            lock(&shared.registrations)
                .insert((instance.app.clone(), instance.id.clone()), of.clone());
            shared
                .bounded("InstanceRequest", async {
                    let conn = shared.wait_connection().await?;
                    shared.instance_call(&conn, &of, true).await
                })
                .await
                .map_err(to_registry)
        })
    }

    fn unregister(
        &self,
        instance: ServiceInstance,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let this = self.clone();
        Box::pin(async move {
            this.start();
            let shared = this.shared();
            let removed =
                lock(&shared.registrations).remove(&(instance.app.clone(), instance.id.clone()));
            let of = removed.unwrap_or_else(|| NacosInstanceOf {
                app: instance.app.clone(),
                key: instance.id.clone(),
                record: record::encode(&instance),
            });
            shared
                .bounded("InstanceRequest", async {
                    let conn = shared.wait_connection().await?;
                    shared.instance_call(&conn, &of, false).await
                })
                .await
                .map_err(to_registry)
        })
    }

    fn rereads_on_resume(&self) -> bool {
        true
    }

    /// Adds `app` to the item (`interface`, `mapping`), merged with the
    /// apps already there (see `mapping.rs`).
    fn register_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let (this, interface, app) = (self.clone(), interface.to_string(), app.to_string());
        Box::pin(async move {
            this.start();
            let shared = this.shared();
            shared.mapped().insert((interface.clone(), app.clone()));
            shared
                .bounded(
                    "ConfigPublishRequest",
                    shared.set_mapping(&interface, &app, true),
                )
                .await
                .map_err(to_registry)
        })
    }

    /// Removes `app` from the item (`interface`, `mapping`).
    fn unregister_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let (this, interface, app) = (self.clone(), interface.to_string(), app.to_string());
        Box::pin(async move {
            this.start();
            let shared = this.shared();
            shared.mapped().remove(&(interface.clone(), app.clone()));
            shared
                .bounded(
                    "ConfigPublishRequest",
                    shared.set_mapping(&interface, &app, false),
                )
                .await
                .map_err(to_registry)
        })
    }

    /// The apps of (`interface`, `mapping`), listened to.
    fn watch_mapping(
        &self,
        interface: &str,
    ) -> BoxFuture<'static, Result<steadfast_core::MappingStream, RegistryError>> {
        let (this, interface) = (self.clone(), interface.to_string());
        Box::pin(async move {
            this.start();
            Ok(this.shared().watch_mapping(&interface))
        })
    }

    fn describe(&self) -> RegistryInfo {
        RegistryInfo::new("nacos", self.shared().config.servers.clone())
    }
}
