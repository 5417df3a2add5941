//! The client factory: how the pool builds and closes one endpoint's client.

use futures::future::BoxFuture;

/// Builds and closes the clients of a [`ClientPool`](crate::ClientPool),
/// one per endpoint address.
pub trait ClientFactory: Send + Sync + 'static {
    /// The pooled client (cheap to clone: a handle on shared state).
    type Client: Clone + Send + Sync + 'static;
    /// Why building or closing a client failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Builds a client for `address` ("host:port").
    fn build(&self, address: &str) -> Result<Self::Client, Self::Error>;

    /// Closes a client (default: drops it). May fail; the pool logs and
    /// counts the failure, and goes on closing the others.
    fn close(&self, client: Self::Client) -> BoxFuture<'static, Result<(), Self::Error>> {
        drop(client);
        Box::pin(async { Ok(()) })
    }
}
