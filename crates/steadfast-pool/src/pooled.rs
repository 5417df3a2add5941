//! One call's hold on one pooled client.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use steadfast_core::pool::ClientId;

/// Gives a client back to its pool (type-erased so [`PooledClient`] needs
/// only the client's type).
pub(crate) trait Release: Send + Sync {
    /// The call using client `id` (of `address`) ended.
    fn release(self: Arc<Self>, id: ClientId, address: &str);
}

/// The forced-close signal of one pooled client, shared by its holds.
#[derive(Debug, Default)]
pub(crate) struct ClosedSignal {
    closed: AtomicBool,
    notify: Notify,
}

impl ClosedSignal {
    /// Marks the client force-closed and wakes every call waiting on it.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a close between the check and
            // the await still wakes this waiter.
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

/// One call's hold on one pooled client: counts the call in flight while it
/// lives, and stamps the client's last use when taken and when dropped.
pub struct PooledClient<C> {
    client: C,
    id: ClientId,
    address: Arc<str>,
    closed: Arc<ClosedSignal>,
    /// Taken by `Drop` (no reference-count traffic on release).
    pool: Option<Arc<dyn Release>>,
}

impl<C> PooledClient<C> {
    pub(crate) fn new(
        client: C,
        id: ClientId,
        address: Arc<str>,
        closed: Arc<ClosedSignal>,
        pool: Arc<dyn Release>,
    ) -> Self {
        Self {
            client,
            id,
            address,
            closed,
            pool: Some(pool),
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
        self.closed.wait().await;
    }

    /// Runs `call` (the request made with this client) unless the pool
    /// force-closes the client first, in which case the call is dropped and
    /// [`ClosedWhileInUse`](crate::ClosedWhileInUse) returned (retryable, a
    /// transport failure).
    pub async fn until_closed<T>(
        &self,
        call: impl std::future::Future<Output = T>,
    ) -> Result<T, crate::ClosedWhileInUse> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        tokio::select! {
            biased;
            () = self.closed() => Err(self.closed_error()),
            out = call => Ok(out),
        }
    }

    /// Whether the pool has force-closed this client.
    pub fn is_closed(&self) -> bool {
        self.closed.is_closed()
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
        if let Some(pool) = self.pool.take() {
            pool.release(self.id, &self.address);
        }
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
