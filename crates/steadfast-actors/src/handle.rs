//! [`Directory`]: the handle a caller picks endpoints from. It reads the
//! snapshot its directory actor publishes, lock-free and on any thread:
//! `select` (a lease, see `handle/lease.rs`), `select_now`, `status`,
//! `view` and `snapshot` never message the actor. It
//! holds only a weak address, so it never keeps a closed directory alive.

use std::sync::Arc;
use std::time::Duration;

use actix::WeakAddr;
use steadfast_core::ServiceUrl;
use steadfast_core::{DirectorySnapshot, DirectoryStatus, Endpoint, Reference};

use crate::directory_actor::{DirectoryActor, DirectoryShared, DirectoryView};
use crate::error::EngineError;

mod lease;

/// Handle to the directory of one reference.
#[derive(Clone, Debug)]
pub struct Directory {
    reference: Reference,
    addr: WeakAddr<DirectoryActor>,
    shared: Arc<DirectoryShared>,
}

impl Directory {
    pub(crate) fn new(
        reference: Reference,
        addr: WeakAddr<DirectoryActor>,
        shared: Arc<DirectoryShared>,
    ) -> Self {
        lease::install(&shared, &addr, &reference);
        Self {
            reference,
            addr,
            shared,
        }
    }

    /// Marks the directory closed at once (before its actor processes the
    /// shutdown), so no read after an unsubscribe sees its last state.
    pub(crate) fn close(&self) {
        self.shared.close();
    }

    /// The reference this directory serves.
    pub fn reference(&self) -> &Reference {
        &self.reference
    }

    /// The latest published snapshot (version, status, every endpoint),
    /// read lock-free without messaging the directory.
    pub fn snapshot(&self) -> Result<Arc<DirectorySnapshot>, EngineError> {
        let snapshot = self.shared.published.snapshot();
        if snapshot.is_closed() {
            return Err(EngineError::DirectoryClosed);
        }
        Ok(snapshot)
    }

    /// One endpoint picked at random by weight, or `None` when empty: read
    /// lock-free from the published snapshot with this thread's fast
    /// generator; the endpoint is a shared handle, not a copy.
    pub fn select_now(&self) -> Result<Option<Endpoint>, EngineError> {
        self.shared
            .published
            .select()
            .map_err(|_| EngineError::DirectoryClosed)
    }

    /// Everything the directory can tell: version, status and endpoints
    /// (copies the endpoint list; [`Directory::snapshot`] does not).
    pub async fn view(&self) -> Result<DirectoryView, EngineError> {
        Ok(DirectoryView::of(&*self.snapshot()?))
    }

    /// Every endpoint.
    pub async fn endpoints(&self) -> Result<Vec<ServiceUrl>, EngineError> {
        Ok(self.view().await?.endpoints)
    }

    /// What the directory can serve, and why.
    pub async fn status(&self) -> Result<DirectoryStatus, EngineError> {
        Ok(self.snapshot()?.status().clone())
    }

    /// Waits until the directory serves at least one endpoint, for at most
    /// `timeout` (woken by each publish, never polling the actor); returns
    /// the snapshot then, which may still not be ready once `timeout` has
    /// passed (its status says why).
    pub async fn ready(&self, timeout: Duration) -> Result<Arc<DirectorySnapshot>, EngineError> {
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a publish in between wakes us.
            changed.as_mut().enable();
            let snapshot = self.snapshot()?;
            if snapshot.status().is_ready() {
                return Ok(snapshot);
            }
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d, changed).await.is_err() {
                        return self.snapshot();
                    }
                }
                None => changed.await,
            }
        }
    }

    /// Whether the directory is still open (its actor running, not shut
    /// down).
    pub fn is_open(&self) -> bool {
        !self.shared.published.is_closed() && self.addr.upgrade().is_some()
    }
}
