//! One call's hold on one pooled client.

use std::ops::Deref;
use std::sync::Arc;

use tokio::sync::watch;

use steadfast_core::pool::ClientId;

/// Gives a client back to its pool (type-erased so [`PooledClient`] needs
/// only the client's type).
pub(crate) trait Release: Send + Sync {
    /// The call using client `id` ended.
    fn release(self: Arc<Self>, id: ClientId);
}

/// One call's hold on one pooled client: counts the call in flight while it
/// lives, and stamps the client's last use when taken and when dropped.
pub struct PooledClient<C> {
    client: C,
    id: ClientId,
    address: Arc<str>,
    closed: watch::Receiver<bool>,
    pool: Arc<dyn Release>,
}

impl<C> PooledClient<C> {
    pub(crate) fn new(
        client: C,
        id: ClientId,
        address: Arc<str>,
        closed: watch::Receiver<bool>,
        pool: Arc<dyn Release>,
    ) -> Self {
        Self {
            client,
            id,
            address,
            closed,
            pool,
        }
    }

    /// The client.
    pub fn client(&self) -> &C {
        &self.client
    }

    /// The endpoint address ("host:port") this client talks to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Resolves when the pool force-closes this client while the call runs
    /// (its endpoint was dropped and the drain timeout passed): the caller
    /// must then fail the call with [`ClosedWhileInUse`](crate::ClosedWhileInUse)
    /// (retryable, a transport failure). Never resolves otherwise.
    pub async fn closed(&self) {
        let mut rx = self.closed.clone();
        if rx.wait_for(|closed| *closed).await.is_err() {
            // The pool is gone without closing this client: never closed.
            std::future::pending::<()>().await;
        }
    }

    /// Whether the pool has force-closed this client.
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// The error to fail the call with once [`closed`](Self::closed)
    /// resolved.
    pub fn closed_error(&self) -> crate::ClosedWhileInUse {
        crate::ClosedWhileInUse {
            address: self.address.to_string(),
        }
    }
}

impl<C> Deref for PooledClient<C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.client
    }
}

impl<C> Drop for PooledClient<C> {
    fn drop(&mut self) {
        self.pool.clone().release(self.id);
    }
}

impl<C> std::fmt::Debug for PooledClient<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledClient")
            .field("id", &self.id)
            .field("address", &self.address)
            .field("closed", &self.is_closed())
            .finish()
    }
}
