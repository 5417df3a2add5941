//! [`NacosMetadataReport`]: the remote metadata report on Nacos config, in
//! Dubbo's layout (data id = the app, group = the revision, content = the
//! MetadataInfo JSON). A provider publishes there; a consumer reads there
//! first (pair it with core's `FallbackFetcher`) and falls back to the
//! provider's MetadataService.

use futures::future::{BoxFuture, FutureExt};
use steadfast_core::{
    decode_report, FetchError, MetadataFetcher, MetadataInfo, MetadataPublisher, PublishError,
    ServiceInstance,
};

use crate::error::NacosError;
use crate::registry::NacosRegistry;

/// The metadata report of a [`NacosRegistry`] (its connection; cheap to
/// clone).
#[derive(Clone, Debug)]
pub struct NacosMetadataReport {
    registry: NacosRegistry,
}

impl NacosRegistry {
    /// The remote metadata report on this client's connection.
    pub fn metadata_report(&self) -> NacosMetadataReport {
        NacosMetadataReport {
            registry: self.clone(),
        }
    }
}

fn unreachable(e: NacosError) -> FetchError {
    match e {
        NacosError::Timeout { .. } => FetchError::Timeout,
        other => FetchError::Unreachable(other.to_string()),
    }
}

fn unavailable(e: NacosError) -> PublishError {
    match e {
        NacosError::Refused { .. } => PublishError::Rejected(e.to_string()),
        other => PublishError::Unavailable(other.to_string()),
    }
}

impl NacosMetadataReport {
    /// Reads `revision` of `app` as Steadfast, Java or Go wrote it (core's
    /// `decode_report`): missing -> `UnknownRevision`, bad JSON ->
    /// `Malformed`, another app or revision inside -> `Mismatch`, Nacos not
    /// reachable -> `Unreachable` (or `Timeout`).
    pub async fn fetch_revision(
        &self,
        app: &str,
        revision: &str,
    ) -> Result<MetadataInfo, FetchError> {
        self.registry.start_driver();
        let shared = self.registry.shared();
        let item = shared
            .bounded("ConfigQueryRequest", shared.config_get(app, revision))
            .await
            .map_err(unreachable)?
            .ok_or_else(|| FetchError::UnknownRevision(revision.to_string()))?;
        decode_report(app, revision, item.content.as_bytes())
    }

    /// Writes `info` at (app, revision).
    pub async fn publish(&self, info: &MetadataInfo) -> Result<(), PublishError> {
        self.registry.start_driver();
        let content = serde_json::to_string(info)
            .map_err(|e| PublishError::Rejected(format!("cannot encode metadata: {e}")))?;
        let shared = self.registry.shared();
        shared
            .bounded(
                "ConfigPublishRequest",
                shared.config_put(&info.app, &info.revision, content, None),
            )
            .await
            .map_err(unavailable)
    }

    /// Removes (app, revision).
    pub async fn withdraw(&self, app: &str, revision: &str) -> Result<(), PublishError> {
        self.registry.start_driver();
        let shared = self.registry.shared();
        shared
            .bounded("ConfigRemoveRequest", shared.config_remove(app, revision))
            .await
            .map_err(unavailable)
    }
}

impl MetadataFetcher for NacosMetadataReport {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let this = self.clone();
        let (app, revision) = (instance.app.clone(), revision.to_string());
        async move { this.fetch_revision(&app, &revision).await }.boxed()
    }
}

impl MetadataPublisher for NacosMetadataReport {
    fn publish(&self, info: MetadataInfo) -> BoxFuture<'static, Result<(), PublishError>> {
        let this = self.clone();
        async move { NacosMetadataReport::publish(&this, &info).await }.boxed()
    }

    fn withdraw(&self, app: &str, revision: &str) -> BoxFuture<'static, Result<(), PublishError>> {
        let this = self.clone();
        let (app, revision) = (app.to_string(), revision.to_string());
        async move { NacosMetadataReport::withdraw(&this, &app, &revision).await }.boxed()
    }
}
