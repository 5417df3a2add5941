//! [`EtcdRegistry`]: the core's [`Registry`] over etcd.
//!
//! Records live at `<prefix>/services/<app>/<instance-id>` as
//! [`ServiceInstance`] JSON, each attached to its own lease kept alive by a
//! keeper task (see `keepalive`).
//!
//! * Operations are serialised per key, never behind one global lock: a slow
//!   call for one instance delays no other instance.
//! * Every register / unregister is bounded as a whole by
//!   `operation_timeout` (waiting for another operation on the same key
//!   included) and fails with [`RegistryError::Timeout`] past it.
//! * Registering an instance this registry already keeps with a live lease
//!   updates its record in place under that lease (a closing announcement is
//!   one put, and the keeper re-registers with the new value if it ever has
//!   to).
//! * Failing keepalives and every watch share the client's one prober; when
//!   etcd answers again every lost registration comes back within
//!   `reregister_spread` plus one round.
//!
//! The registry is a cheap clone; when the last clone drops, every keeper is
//! aborted and the records expire with their leases (they are not deleted:
//! call [`Registry::unregister`] for a prompt removal). Watch streams hold
//! only the client, not the registry.

use std::future::Future;
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};
use steadfast_core::{
    Listing, RecoverPolicy, Registry, RegistryError, RevisionInterner, ServiceInstance, Version,
};

use crate::config::EtcdConfig;
use crate::epoch::Epochs;
use crate::error::GatewayError;
use crate::gateway::EtcdClient;
use crate::hub::HubHandle;
use crate::keepalive::{KeeperCtx, Registrations, Removal};
use crate::keeper_machine::KeeperPolicy;
use crate::metadata::EtcdMetadataReport;
use crate::prober::ProbeSub;
use crate::records::{check_segment, KeyLayout};
use crate::stats::{EtcdStats, EtcdStatsSnapshot};
use steadfast_core::EventStream;

/// An etcd-backed service registry. Cheap to clone; clones share the client,
/// the counters and the registrations.
#[derive(Clone, Debug)]
pub struct EtcdRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Arc<EtcdClient>,
    config: EtcdConfig,
    layout: KeyLayout,
    stats: Arc<EtcdStats>,
    registrations: Registrations,
    report: EtcdMetadataReport,
    /// The version epoch every watch and list of this registry shares.
    epochs: Epochs,
    /// The task driving every watch of this registry over shared streams
    /// (spawned by the first watch, again if its runtime went away).
    hub: std::sync::Mutex<Option<HubHandle>>,
}

/// The keeper context every registration (and metadata publication) of a
/// client shares.
pub(crate) fn keeper_ctx(
    client: Arc<EtcdClient>,
    config: &EtcdConfig,
    stats: Arc<EtcdStats>,
) -> Arc<KeeperCtx> {
    let prober = ProbeSub::new(client.clone(), config);
    let ttl_secs = config.lease_ttl_secs();
    Arc::new(KeeperCtx {
        client,
        ttl_secs,
        operation_timeout: config.operation_timeout,
        policy: KeeperPolicy::for_ttl(
            ttl_secs,
            RecoverPolicy::new(config.backoff),
            config.reregister_spread,
        ),
        stats,
        prober,
        answer_cadence: config.keepalive_probe_interval,
    })
}

impl EtcdRegistry {
    /// Writes or deletes one mapping key (see `mapping::set`).
    fn set_mapping(
        &self,
        interface: &str,
        app: &str,
        mapped: bool,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let (inner, interface, app) = (self.inner.clone(), interface.to_string(), app.to_string());
        async move {
            let (client, layout, config) = (&inner.client, &inner.layout, &inner.config);
            crate::mapping::set(client, layout, config, &interface, &app, mapped).await
        }
        .boxed()
    }

    /// A registry for `config` (validated). Does no IO.
    pub fn new(config: EtcdConfig) -> Result<Self, GatewayError> {
        let client = EtcdClient::from_config(&config)?;
        Self::with_client(Arc::new(client), config)
    }

    /// A registry over an existing client (the config's endpoints and
    /// timeouts are then ignored). The config is validated like
    /// [`Self::new`] does: a value no loop can live with (a zero probe
    /// cadence, a bad backoff) is refused here.
    pub fn with_client(client: Arc<EtcdClient>, config: EtcdConfig) -> Result<Self, GatewayError> {
        config.validate()?;
        let layout = KeyLayout::new(&config.prefix);
        let stats = Arc::new(EtcdStats::default());
        let ctx = keeper_ctx(client.clone(), &config, stats.clone());
        let report = EtcdMetadataReport::with_ctx(ctx.clone(), &config.prefix);
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                layout,
                config,
                stats,
                registrations: Registrations::new(ctx),
                report,
                epochs: Epochs::default(),
                hub: std::sync::Mutex::new(None),
            }),
        })
    }

    /// The gateway client.
    pub fn client(&self) -> &Arc<EtcdClient> {
        &self.inner.client
    }

    /// The configuration.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The key layout.
    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// The counters of every watch and keepalive of this registry (and of
    /// its metadata report), with those of the client's shared prober.
    pub fn stats(&self) -> EtcdStatsSnapshot {
        let mut s = self.inner.stats.snapshot();
        if let Some(p) = self.inner.client.prober_if_any() {
            p.add_stats(&mut s);
        }
        s
    }

    /// The remote metadata report on the same client and prefix; every call
    /// returns the same report (its publications live as long as it or this
    /// registry does).
    pub fn metadata_report(&self) -> EtcdMetadataReport {
        self.inner.report.clone()
    }

    /// The lease `instance`'s record is attached to, while this registry
    /// keeps it alive.
    pub fn lease_of(&self, instance: &ServiceInstance) -> Option<i64> {
        let key = self.inner.layout.instance_key(&instance.app, &instance.id);
        self.inner.registrations.lease_of(key.as_bytes())
    }

    /// Lists `app` now, skipping (and counting) invalid records.
    pub async fn list_now(&self, app: &str) -> Result<Vec<ServiceInstance>, RegistryError> {
        self.inner.list(app).await
    }

    /// Watches `app` as versioned events: a Reset of the initial range
    /// (done before the stream is returned: an unreachable etcd fails
    /// here), a Delta per watch message that changed something (records
    /// decoded once), a Reset after every full re-read (resync, compaction,
    /// resume after an outage, wiped store), an `Err` item while etcd is
    /// unhealthy. Versions are `(epoch, etcd revision)`; the epoch is this
    /// registry's and moves up when a read proves the store's history
    /// restarted.
    pub fn watch_events(
        &self,
        app: &str,
    ) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        let inner = self.inner.clone();
        let app = app.to_string();
        async move { inner.watch_events(&app).await }.boxed()
    }

    /// Lists `app` once, decoded, at its version (same epoch as
    /// [`Self::watch_events`]); invalid records are skipped and counted.
    pub fn list_events(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        let inner = self.inner.clone();
        let app = app.to_string();
        async move { inner.list_events(&app).await }.boxed()
    }

    /// The version epoch of this registry (0 until a read proves that the
    /// store's history restarted).
    pub fn epoch(&self) -> u64 {
        self.inner.epochs.current()
    }

    /// Registers `instance` now (see [`Registry::register`]).
    pub async fn register_now(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        self.inner.register(instance).await
    }

    /// Unregisters `instance` now (see [`Registry::unregister`]).
    pub async fn unregister_now(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        self.inner.unregister(instance).await
    }
}

impl Inner {
    async fn list(&self, app: &str) -> Result<Vec<ServiceInstance>, RegistryError> {
        check_segment("app", app)?;
        let prefix = self.layout.app_prefix(app);
        let r = self.client.range_prefix(prefix.as_bytes()).await?;
        let mut out = Vec::with_capacity(r.kvs.len());
        for kv in &r.kvs {
            match self.layout.decode_instance(app, &kv.key, &kv.value) {
                Ok(i) => out.push(i),
                Err(e) => {
                    EtcdStats::bump(&self.stats.invalid_records);
                    tracing::warn!(app, error = %e, "skipping invalid etcd record");
                }
            }
        }
        Ok(out)
    }

    async fn watch_events(&self, app: &str) -> Result<EventStream, RegistryError> {
        check_segment("app", app)?;
        // The handle is cloned out of the lock: no lock is held while the
        // request waits for room in the hub's bounded queue.
        let hub = {
            let mut hub = self
                .hub
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match hub.as_ref().filter(|h| h.is_alive()) {
                Some(h) => h.clone(),
                None => {
                    let h = HubHandle::spawn(
                        self.client.clone(),
                        &self.config,
                        self.layout.clone(),
                        self.stats.clone(),
                        self.epochs.clone(),
                    );
                    *hub = Some(h.clone());
                    h
                }
            }
        };
        let rx = hub
            .subscribe(app)
            .await
            .ok_or_else(|| RegistryError::Unavailable("etcd watch hub stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(RegistryError::Unavailable("etcd watch hub stopped".into())))
    }

    async fn list_events(&self, app: &str) -> Result<Listing, RegistryError> {
        check_segment("app", app)?;
        let prefix = self.layout.app_prefix(app);
        let ticket = self.epochs.ticket();
        let r = self.client.range_prefix(prefix.as_bytes()).await?;
        let (epoch, _) = self.epochs.answered(ticket, &r.header);
        let mut revisions = RevisionInterner::default();
        let mut instances = Vec::with_capacity(r.kvs.len());
        for kv in &r.kvs {
            match self.layout.decode_shared(app, kv, &mut revisions) {
                Ok(i) => instances.push(Arc::new(i)),
                Err(e) => {
                    EtcdStats::bump(&self.stats.invalid_records);
                    tracing::warn!(app, error = %e, "skipping invalid etcd record");
                }
            }
        }
        Ok(Listing {
            version: Version::of(epoch, u64::try_from(r.header.revision).unwrap_or(0)),
            instances,
        })
    }

    /// Runs `op` under the whole-operation deadline.
    async fn bounded<F>(&self, op: F) -> Result<(), RegistryError>
    where
        F: Future<Output = Result<(), GatewayError>>,
    {
        crate::error::registry_op(self.config.operation_timeout, op).await
    }

    async fn register(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        check_segment("app", &instance.app)?;
        check_segment("instance id", &instance.id)?;
        let value = crate::dubbo::encode(instance)
            .map_err(|e| RegistryError::Rejected(format!("cannot encode instance: {e}")))?;
        let key = self.layout.instance_key(&instance.app, &instance.id);
        self.bounded(self.registrations.upsert(key.as_bytes(), value))
            .await
    }

    async fn unregister(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        check_segment("app", &instance.app)?;
        check_segment("instance id", &instance.id)?;
        let key = self.layout.instance_key(&instance.app, &instance.id);
        self.bounded(
            self.registrations
                .remove(key.as_bytes(), Removal::DeleteKey),
        )
        .await
    }
}

impl Registry for EtcdRegistry {
    /// Kind `etcd`, with the client's endpoints (user info is refused by
    /// the config, so none can show here).
    fn describe(&self) -> steadfast_core::RegistryInfo {
        steadfast_core::RegistryInfo::new("etcd", self.client().endpoints().to_vec())
    }

    /// Every stale report (`Err` item) of an etcd watch is followed by a
    /// resume by full range diffed against the state held, and a new watch
    /// starts with one: the engine's own resume resync would read twice.
    fn rereads_on_resume(&self) -> bool {
        true
    }

    fn list(&self, app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        self.list_events(app)
    }

    fn watch(&self, app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        self.watch_events(app)
    }

    fn register(&self, instance: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        let inner = self.inner.clone();
        async move { inner.register(&instance).await }.boxed()
    }

    fn unregister(
        &self,
        instance: ServiceInstance,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        let inner = self.inner.clone();
        async move { inner.unregister(&instance).await }.boxed()
    }

    /// Puts `<prefix>/mapping/<interface>/<app>` (persistent, no lease; see
    /// `mapping.rs`), under `operation_timeout`.
    fn register_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.set_mapping(interface, app, true)
    }

    /// Deletes `<prefix>/mapping/<interface>/<app>`, under
    /// `operation_timeout`.
    fn unregister_mapping(
        &self,
        interface: &str,
        app: &str,
    ) -> BoxFuture<'static, Result<(), RegistryError>> {
        self.set_mapping(interface, app, false)
    }

    /// A mapping watch session (see `mapping.rs`): a range, then a watch
    /// from its revision + 1, probed while open; it ends after one `Err`.
    fn watch_mapping(
        &self,
        interface: &str,
    ) -> BoxFuture<'static, Result<steadfast_core::MappingStream, RegistryError>> {
        let (inner, interface) = (self.inner.clone(), interface.to_string());
        async move {
            let epoch = inner.epochs.current();
            crate::mapping::watch_mapping(
                inner.client.clone(),
                &inner.layout,
                &inner.config,
                &interface,
                epoch,
            )
            .await
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::EtcdConfigError;

    fn client() -> Arc<EtcdClient> {
        let e = vec!["http://127.0.0.1:1".to_string()];
        Arc::new(EtcdClient::new(e, Duration::from_secs(1), Duration::from_secs(1)).unwrap())
    }

    #[test]
    fn every_constructor_validates_the_config() {
        let ok = EtcdConfig::new(["http://127.0.0.1:1"]);
        assert!(EtcdRegistry::with_client(client(), ok.clone()).is_ok());
        let mut bad = ok.clone();
        bad.keepalive_probe_interval = Duration::ZERO;
        let zero = Err(GatewayError::Config(EtcdConfigError::Zero(
            "keepalive_probe_interval",
        )));
        assert_eq!(
            EtcdRegistry::with_client(client(), bad.clone()).map(|_| ()),
            zero
        );
        assert_eq!(EtcdRegistry::new(bad.clone()).map(|_| ()), zero);
        assert_eq!(EtcdMetadataReport::new(&bad).map(|_| ()), zero);
        bad.keepalive_probe_interval = ok.keepalive_probe_interval;
        bad.probe_failures = 0;
        assert!(EtcdRegistry::with_client(client(), bad).is_err());
        assert!(EtcdMetadataReport::with_client(client(), "/p").is_ok());
    }
}
