//! [`Directory`]: the handle a caller picks endpoints from. It reads the
//! snapshot its directory actor publishes, lock-free and on any thread:
//! `select` (a lease, see `handle/lease.rs`), `select_now`, `status`,
//! `view` and `snapshot` never message the actor. `ready`, `select_ready`
//! and `changes` wait for publishes (`handle/wait.rs`). A handle keeps its
//! engine running, but not a closed directory (`handle/hold.rs`).

#[cfg(feature = "tower")]
mod discover;
mod hold;
mod wait;

#[cfg(feature = "tower")]
pub use discover::DirectoryDiscover;

pub(crate) use hold::{EngineLife, HandleHold};
pub use wait::Deadline;

use std::sync::Arc;

use actix::WeakAddr;
use steadfast_core::ServiceUrl;
use steadfast_core::{DirectorySnapshot, DirectoryStatus, Endpoint, Reference};

use crate::directory_actor::{DirectoryActor, DirectoryShared, DirectoryView};
use crate::error::EngineError;

mod avoiding;
mod lease;

/// Handle to the directory of one reference.
///
/// # Lifetime
///
/// Every handle of a subscribed reference (each clone, each `subscribe` of
/// it) keeps the engine running, even once every [`Engine`](crate::Engine)
/// value is dropped: a `Directory` returned from a function keeps serving
/// and updating. The reference stays subscribed until the first of:
///
/// - [`Engine::unsubscribe`](crate::Engine::unsubscribe) was called as many
///   times as `subscribe` (the directory closes at once, even while handles
///   are alive: they then answer `NotSubscribed` / `DirectoryClosed`);
/// - no handle of it has been alive for
///   [`CallerConfig::unsubscribe_linger`](crate::CallerConfig) (default
///   30 s; `None`: never), which ends all of its subscriptions at once; a
///   `subscribe` of the reference within the linger keeps the directory as
///   it is;
/// - [`Engine::shutdown`](crate::Engine::shutdown), which stops every actor
///   whatever handles are alive.
///
/// Once every `Engine` value and every handle is gone, nothing can reach
/// the engine any more and it stops at once.
#[derive(Clone, Debug)]
pub struct Directory {
    reference: Reference,
    addr: WeakAddr<DirectoryActor>,
    shared: Arc<DirectoryShared>,
    /// Keeps the engine alive; `None` in the coordinator's own copy (which
    /// must not keep it alive) and in handles built directly by tests.
    /// Never read: it is held for its drop.
    #[allow(dead_code)]
    hold: Option<Arc<HandleHold>>,
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
            hold: None,
        }
    }

    /// This handle, holding `hold` (shared by every handle of the reference).
    pub(crate) fn with_hold(&self, hold: Arc<HandleHold>) -> Self {
        Self {
            hold: Some(hold),
            ..self.clone()
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
            .select_with(crate::random::thread_random())
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

    /// Whether the directory is still open (its actor running, not shut
    /// down).
    pub fn is_open(&self) -> bool {
        !self.shared.published.is_closed() && self.addr.upgrade().is_some()
    }

    /// A handle for observers (metrics probes, status pages): it reads and
    /// picks like this one but keeps neither the reference subscribed nor
    /// the engine running.
    pub fn observer(&self) -> Directory {
        Self {
            hold: None,
            ..self.clone()
        }
    }
}
