//! Remote metadata report in etcd, and a fetcher that falls back from one
//! source to another.
//!
//! A provider publishes each revision's [`MetadataInfo`] at
//! `<prefix>/metadata/<app>/<revision>` (no lease: revisions stay until
//! withdrawn). Consumers fetch it from there when the provider's own
//! MetadataService cannot be reached; [`FallbackFetcher`] combines both.

use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};
use steadfast_core::{
    check_metadata, FetchError, MetadataFetcher, MetadataInfo, MetadataPublisher, PublishError,
    ServiceInstance,
};

use crate::config::EtcdConfig;
use crate::error::GatewayError;
use crate::gateway::EtcdClient;
use crate::records::{check_segment, KeyLayout};

/// MetadataInfo stored in etcd, keyed by app and revision. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EtcdMetadataReport {
    client: Arc<EtcdClient>,
    layout: KeyLayout,
}

impl EtcdMetadataReport {
    /// A report for `config` (its endpoints, timeouts and prefix).
    pub fn new(config: &EtcdConfig) -> Result<Self, GatewayError> {
        let client = EtcdClient::new(
            config.endpoints.clone(),
            config.request_timeout,
            config.watch_open_timeout,
        )?;
        Ok(Self::with_client(Arc::new(client), &config.prefix))
    }

    /// A report over an existing client, under `prefix`.
    pub fn with_client(client: Arc<EtcdClient>, prefix: &str) -> Self {
        Self {
            client,
            layout: KeyLayout::new(prefix),
        }
    }

    /// The key `info` is published under.
    pub fn key_of(&self, app: &str, revision: &str) -> String {
        self.layout.metadata_key(app, revision)
    }

    /// Writes `info` at `<prefix>/metadata/<app>/<revision>`.
    pub async fn publish(&self, info: &MetadataInfo) -> Result<(), PublishError> {
        segments(&info.app, &info.revision).map_err(PublishError::Rejected)?;
        let value = serde_json::to_vec(info)
            .map_err(|e| PublishError::Rejected(format!("cannot encode metadata: {e}")))?;
        let key = self.key_of(&info.app, &info.revision);
        self.client.put(key.as_bytes(), &value, 0).await?;
        Ok(())
    }

    /// Deletes the record of `revision` of `app` (absent is fine).
    pub async fn withdraw(&self, app: &str, revision: &str) -> Result<(), PublishError> {
        segments(app, revision).map_err(PublishError::Rejected)?;
        let key = self.key_of(app, revision);
        self.client.delete(key.as_bytes()).await?;
        Ok(())
    }

    /// Reads `revision` of `app`: missing -> `UnknownRevision`, bad JSON ->
    /// `Malformed`, another app or revision inside -> `Mismatch`, etcd not
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
        let r = self.client.get(key.as_bytes()).await?;
        let kv = r
            .kvs
            .first()
            .ok_or_else(|| FetchError::UnknownRevision(revision.to_string()))?;
        let info: MetadataInfo = serde_json::from_slice(&kv.value)
            .map_err(|e| FetchError::Malformed(format!("{key}: {e}")))?;
        check_metadata(app, revision, &info)?;
        Ok(info)
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
