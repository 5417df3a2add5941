//! [`MetadataStore`]: the revisions a provider app currently serves, shared
//! between the exporter that publishes them and the HTTP handlers that read
//! them. The lock is only ever held for a map operation, never across an
//! `.await`.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use futures::future::BoxFuture;
use steadfast_core::{MetadataInfo, MetadataPublisher, PublishError};

/// A cheap-to-clone shared table `revision -> MetadataInfo`. Every clone
/// sees the same table.
#[derive(Clone, Debug, Default)]
pub struct MetadataStore {
    inner: Arc<RwLock<HashMap<String, Arc<MetadataInfo>>>>,
}

impl MetadataStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishes `info` under its own revision, replacing any metadata held
    /// for that revision; returns the replaced metadata, if any.
    pub fn publish(&self, info: MetadataInfo) -> Option<Arc<MetadataInfo>> {
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(info.revision.clone(), Arc::new(info))
    }

    /// Stops serving `revision`; returns the metadata it held, if any.
    pub fn withdraw(&self, revision: &str) -> Option<Arc<MetadataInfo>> {
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(revision)
    }

    /// The metadata held for `revision`.
    pub fn get(&self, revision: &str) -> Option<Arc<MetadataInfo>> {
        let map = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        map.get(revision).cloned()
    }

    /// Every revision held, sorted.
    pub fn revisions(&self) -> Vec<String> {
        let map = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let mut revs: Vec<String> = map.keys().cloned().collect();
        revs.sort_unstable();
        revs
    }

    /// Number of revisions held.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether the store holds no revision.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Publishing into the store makes the revision served by every
/// [`crate::metadata_scope`] and [`crate::MetadataServer`] sharing it.
impl MetadataPublisher for MetadataStore {
    fn publish(&self, info: MetadataInfo) -> BoxFuture<'static, Result<(), PublishError>> {
        MetadataStore::publish(self, info);
        Box::pin(async { Ok(()) })
    }

    fn withdraw(&self, _app: &str, revision: &str) -> BoxFuture<'static, Result<(), PublishError>> {
        MetadataStore::withdraw(self, revision);
        Box::pin(async { Ok(()) })
    }
}
