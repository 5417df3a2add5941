//! [`EtcdRegistry`]: the core's [`Registry`] over etcd.
//!
//! Records live at `<prefix>/services/<app>/<instance-id>` as
//! [`ServiceInstance`] JSON, each attached to its own lease kept alive by a
//! task (see `keepalive`). The registry is a cheap clone; when the
//! last clone drops, every keepalive task is aborted and the records expire
//! with their leases (they are not deleted: call
//! [`Registry::unregister`] for a prompt removal). Watch streams hold only
//! the client, not the registry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::{BoxFuture, FutureExt};
use steadfast_core::{Registry, RegistryError, ServiceInstance, SnapshotStream};

use crate::config::EtcdConfig;
use crate::error::GatewayError;
use crate::gateway::EtcdClient;
use crate::keepalive::{establish, Registration};
use crate::metadata::EtcdMetadataReport;
use crate::records::{check_segment, KeyLayout};
use crate::stats::{EtcdStats, StatsSnapshot};
use crate::watch_stream;

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
    /// Live registrations by key; dropping one aborts its keepalive task.
    registrations: Mutex<HashMap<String, Registration>>,
    /// Serialises register/unregister so two calls for one key cannot
    /// interleave their lease and put.
    ops: tokio::sync::Mutex<()>,
}

impl EtcdRegistry {
    /// A registry for `config`. Does no IO.
    pub fn new(config: EtcdConfig) -> Result<Self, GatewayError> {
        let client = EtcdClient::new(
            config.endpoints.clone(),
            config.request_timeout,
            config.watch_open_timeout,
        )?;
        Ok(Self::with_client(Arc::new(client), config))
    }

    /// A registry over an existing client (the config's endpoints and
    /// timeouts are then ignored).
    pub fn with_client(client: Arc<EtcdClient>, config: EtcdConfig) -> Self {
        let layout = KeyLayout::new(&config.prefix);
        Self {
            inner: Arc::new(Inner {
                client,
                layout,
                config,
                stats: Arc::new(EtcdStats::default()),
                registrations: Mutex::new(HashMap::new()),
                ops: tokio::sync::Mutex::new(()),
            }),
        }
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

    /// The counters of every watch and keepalive of this registry.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// A remote metadata report on the same client and prefix.
    pub fn metadata_report(&self) -> EtcdMetadataReport {
        EtcdMetadataReport::with_client(self.inner.client.clone(), &self.inner.config.prefix)
    }

    /// The lease `instance`'s record is attached to, while this registry
    /// keeps it alive.
    pub fn lease_of(&self, instance: &ServiceInstance) -> Option<i64> {
        let key = self.inner.layout.instance_key(&instance.app, &instance.id);
        self.inner
            .registrations()
            .get(&key)
            .map(Registration::lease)
    }

    /// Lists `app` now, skipping (and counting) invalid records.
    pub async fn list_now(&self, app: &str) -> Result<Vec<ServiceInstance>, RegistryError> {
        self.inner.list(app).await
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
    fn registrations(&self) -> std::sync::MutexGuard<'_, HashMap<String, Registration>> {
        self.registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

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

    async fn register(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        check_segment("app", &instance.app)?;
        check_segment("instance id", &instance.id)?;
        let value = serde_json::to_vec(instance)
            .map_err(|e| RegistryError::Rejected(format!("cannot encode instance: {e}")))?;
        let key = self.layout.instance_key(&instance.app, &instance.id);
        let ttl = self.config.lease_ttl_secs();
        let _serial = self.ops.lock().await;
        // Stop the old keepalive first so it cannot put the old record back.
        let old = self.registrations().remove(&key);
        let old_lease = match old {
            Some(reg) => Some(reg.stop().await),
            None => None,
        };
        let lease = establish(&self.client, key.as_bytes(), &value, ttl).await?;
        let reg = Registration::spawn(
            self.client.clone(),
            key.clone().into_bytes(),
            value,
            ttl,
            lease,
            self.stats.clone(),
        );
        self.registrations().insert(key, reg);
        if let Some(old) = old_lease.filter(|&l| l != lease) {
            if let Err(e) = self.client.lease_revoke(old).await {
                tracing::debug!(lease = old, error = %e, "revoking the replaced lease failed");
            }
        }
        Ok(())
    }

    async fn unregister(&self, instance: &ServiceInstance) -> Result<(), RegistryError> {
        check_segment("app", &instance.app)?;
        check_segment("instance id", &instance.id)?;
        let key = self.layout.instance_key(&instance.app, &instance.id);
        let _serial = self.ops.lock().await;
        let reg = self.registrations().remove(&key);
        // Let a re-register in progress land before the delete, not after.
        let lease = match reg {
            Some(reg) => Some(reg.stop().await),
            None => None,
        };
        self.client.delete(key.as_bytes()).await?;
        if let Some(lease) = lease {
            if let Err(e) = self.client.lease_revoke(lease).await {
                tracing::warn!(lease, error = %e, "revoking the lease failed; it will expire");
            }
        }
        Ok(())
    }
}

impl Registry for EtcdRegistry {
    fn list(&self, app: &str) -> BoxFuture<'static, Result<Vec<ServiceInstance>, RegistryError>> {
        let inner = self.inner.clone();
        let app = app.to_string();
        async move { inner.list(&app).await }.boxed()
    }

    fn watch(&self, app: &str) -> BoxFuture<'static, Result<SnapshotStream, RegistryError>> {
        let client = self.inner.client.clone();
        let config = self.inner.config.clone();
        let layout = self.inner.layout.clone();
        let stats = self.inner.stats.clone();
        let app = app.to_string();
        async move {
            check_segment("app", &app)?;
            watch_stream::open(client, &config, layout, &app, stats).await
        }
        .boxed()
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
}
