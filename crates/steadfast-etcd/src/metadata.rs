//! Remote metadata report in etcd.
//!
//! A provider publishes each revision's [`MetadataInfo`] at
//! `<prefix>/metadata/<app>/<revision>`, under a lease its process keeps
//! alive (the same keeper machinery as registrations): a provider that dies
//! leaves no key behind once its lease expired.
//!
//! Several providers may publish the same revision (revisions are stable
//! across boots). Each keeps its own publication: the key lives under the
//! lease of whoever put it last, and a keeper that finds the key gone while
//! its provider still publishes it puts it back under its own lease, so the
//! death of one provider removes the key for at most one keepalive period.
//! [`EtcdMetadataReport::withdraw`] stops the keeper and revokes the lease,
//! which deletes the key if it is still this provider's.
//!
//! Consumers fetch from here when the provider's own MetadataService cannot
//! be reached; core's `FallbackFetcher` combines both.

use std::future::Future;
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};
use steadfast_core::{
    decode_report, FetchError, MetadataFetcher, MetadataInfo, MetadataPublisher, PublishError,
    ServiceInstance,
};

use crate::config::EtcdConfig;
use crate::error::GatewayError;
use crate::gateway::EtcdClient;
use crate::keepalive::{KeeperCtx, Registrations, Removal};
use crate::records::{check_segment, KeyLayout};
use crate::registry::keeper_ctx;
use crate::stats::EtcdStatsSnapshot;

/// MetadataInfo stored in etcd, keyed by app and revision, each publication
/// kept alive under a lease. Cheap to clone; clones share the publications,
/// which stop (and expire) when the last clone drops.
#[derive(Clone, Debug)]
pub struct EtcdMetadataReport {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ctx: Arc<KeeperCtx>,
    layout: KeyLayout,
    publications: Registrations,
}

impl EtcdMetadataReport {
    /// A report for `config` (validated: its endpoints, timeouts, prefix,
    /// lease TTL).
    pub fn new(config: &EtcdConfig) -> Result<Self, GatewayError> {
        let client = EtcdClient::from_config(config)?;
        let ctx = keeper_ctx(Arc::new(client), config, Arc::default());
        Ok(Self::with_ctx(ctx, &config.prefix))
    }

    /// A report over an existing client, under `prefix`, with the default
    /// lease TTL and deadlines of [`EtcdConfig::new`] (validated like
    /// [`Self::new`]).
    pub fn with_client(client: Arc<EtcdClient>, prefix: &str) -> Result<Self, GatewayError> {
        let config = EtcdConfig::new(client.endpoints().to_vec()).with_prefix(prefix);
        config.validate()?;
        let ctx = keeper_ctx(client, &config, Arc::default());
        Ok(Self::with_ctx(ctx, prefix))
    }

    pub(crate) fn with_ctx(ctx: Arc<KeeperCtx>, prefix: &str) -> Self {
        Self {
            inner: Arc::new(Inner {
                publications: Registrations::new(ctx.clone()),
                ctx,
                layout: KeyLayout::new(prefix),
            }),
        }
    }

    fn client(&self) -> &EtcdClient {
        &self.inner.ctx.client
    }

    /// The key `info` is published under.
    pub fn key_of(&self, app: &str, revision: &str) -> String {
        self.inner.layout.metadata_key(app, revision)
    }

    /// The lease the publication of `revision` of `app` is kept under, while
    /// this report publishes it.
    pub fn lease_of(&self, app: &str, revision: &str) -> Option<i64> {
        let key = self.key_of(app, revision);
        self.inner.publications.lease_of(key.as_bytes())
    }

    /// The counters of this report's keepers (shared with the registry it
    /// came from, if any).
    pub fn stats(&self) -> EtcdStatsSnapshot {
        let mut s = self.inner.ctx.stats.snapshot();
        if let Some(p) = self.inner.ctx.client.prober_if_any() {
            p.add_stats(&mut s);
        }
        s
    }

    async fn bounded<F>(&self, op: F) -> Result<(), PublishError>
    where
        F: Future<Output = Result<(), GatewayError>>,
    {
        match tokio::time::timeout(self.inner.ctx.operation_timeout, op).await {
            Ok(r) => r.map_err(PublishError::from),
            Err(_) => Err(PublishError::Unavailable(format!(
                "etcd did not complete the operation within {:?}",
                self.inner.ctx.operation_timeout
            ))),
        }
    }

    /// Writes `info` at `<prefix>/metadata/<app>/<revision>` under a lease
    /// kept alive until [`Self::withdraw`] or the report drops. Publishing a
    /// revision again updates it in place under the same lease.
    pub async fn publish(&self, info: &MetadataInfo) -> Result<(), PublishError> {
        segments(&info.app, &info.revision).map_err(PublishError::Rejected)?;
        let value = serde_json::to_vec(info)
            .map_err(|e| PublishError::Rejected(format!("cannot encode metadata: {e}")))?;
        let key = self.key_of(&info.app, &info.revision);
        self.bounded(self.inner.publications.upsert(key.as_bytes(), value))
            .await
    }

    /// Stops publishing `revision` of `app`: its keeper stops and its lease
    /// is revoked, deleting the key unless another provider put it since
    /// (then that provider's publication stands). Not published here: a
    /// no-op.
    pub async fn withdraw(&self, app: &str, revision: &str) -> Result<(), PublishError> {
        segments(app, revision).map_err(PublishError::Rejected)?;
        let key = self.key_of(app, revision);
        self.bounded(
            self.inner
                .publications
                .remove(key.as_bytes(), Removal::RevokeLease),
        )
        .await
    }

    /// Reads `revision` of `app` (core's `decode_report`): missing ->
    /// `UnknownRevision`, bad JSON -> `Malformed`, another app or revision
    /// inside -> `Mismatch`, etcd not
    /// reachable -> `Unreachable` (or `Timeout`).
    pub async fn fetch_revision(
        &self,
        app: &str,
        revision: &str,
    ) -> Result<MetadataInfo, FetchError> {
        if segments(app, revision).is_err() {
            return Err(FetchError::UnknownRevision(revision.to_string()));
        }
        let key = self.key_of(app, revision);
        let r = self.client().get(key.as_bytes()).await?;
        let kv = r
            .kvs
            .first()
            .ok_or_else(|| FetchError::UnknownRevision(revision.to_string()))?;
        decode_report(app, revision, &kv.value)
    }
}

fn segments(app: &str, revision: &str) -> Result<(), String> {
    check_segment("app", app)
        .and_then(|_| check_segment("revision", revision))
        .map_err(|e| e.to_string())
}

impl MetadataFetcher for EtcdMetadataReport {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let this = self.clone();
        let app = instance.app.clone();
        let revision = revision.to_string();
        async move { this.fetch_revision(&app, &revision).await }.boxed()
    }
}

impl MetadataPublisher for EtcdMetadataReport {
    fn publish(&self, info: MetadataInfo) -> BoxFuture<'static, Result<(), PublishError>> {
        let this = self.clone();
        async move { EtcdMetadataReport::publish(&this, &info).await }.boxed()
    }

    fn withdraw(&self, app: &str, revision: &str) -> BoxFuture<'static, Result<(), PublishError>> {
        let this = self.clone();
        let (app, revision) = (app.to_string(), revision.to_string());
        async move { EtcdMetadataReport::withdraw(&this, &app, &revision).await }.boxed()
    }
}
