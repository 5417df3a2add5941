//! The awc client factory (feature `awc`). An `awc::Client` is tied to the
//! thread (actix arbiter) it runs on, so the pooled client is a `Send`
//! handle, [`AwcClient`], that gives each thread its own `awc::Client` for
//! the endpoint, built on the thread's first use and dropped once the pool
//! closes the handle.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use steadfast_pool::ClientFactory;

/// How [`AwcFactory`] builds each endpoint's clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AwcConfig {
    /// Bound on establishing one connection (default 2 s).
    pub connect_timeout: Duration,
    /// An idle keep-alive connection is closed after this long (default
    /// 90 s).
    pub connection_idle_timeout: Duration,
    /// Connections open at once per thread and endpoint (default 100).
    pub max_connections: usize,
}

impl Default for AwcConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            connection_idle_timeout: Duration::from_secs(90),
            max_connections: 100,
        }
    }
}

/// Builds one [`AwcClient`] handle per endpoint address.
#[derive(Clone, Copy, Debug, Default)]
pub struct AwcFactory {
    config: AwcConfig,
}

impl AwcFactory {
    /// A factory with `config`.
    pub fn new(config: AwcConfig) -> Self {
        Self { config }
    }
}

/// Never returned: building an [`AwcClient`] handle cannot fail.
#[derive(Debug, thiserror::Error)]
#[error("awc client factory error")]
pub struct AwcFactoryError;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
struct Shared {
    id: u64,
    address: String,
    config: AwcConfig,
    closed: AtomicBool,
}

/// A pooled awc client for one endpoint: a `Send + Sync` handle whose
/// [`client`](Self::client) gives the current thread's `awc::Client`.
#[derive(Clone, Debug)]
pub struct AwcClient {
    shared: Arc<Shared>,
}

type ThreadClients = HashMap<u64, (Weak<Shared>, awc::Client)>;

thread_local! {
    static CLIENTS: RefCell<ThreadClients> = RefCell::new(HashMap::new());
}

impl AwcClient {
    /// The endpoint address ("host:port").
    pub fn address(&self) -> &str {
        &self.shared.address
    }

    /// This thread's `awc::Client` for the endpoint (built on the thread's
    /// first use; use it on an actix / tokio-local runtime).
    pub fn client(&self) -> awc::Client {
        CLIENTS.with(|cell| {
            let mut clients = cell.borrow_mut();
            // Forget the clients of closed or dropped handles first, so the
            // map stays as small as the pool.
            clients.retain(|_, (weak, _)| {
                weak.upgrade()
                    .is_some_and(|s| !s.closed.load(Ordering::Acquire))
            });
            clients
                .entry(self.shared.id)
                .or_insert_with(|| (Arc::downgrade(&self.shared), build(&self.shared.config)))
                .1
                .clone()
        })
    }

    fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        let id = self.shared.id;
        // Other threads drop their copy on their next use of any handle.
        let _ = CLIENTS.try_with(|cell| cell.borrow_mut().remove(&id));
    }
}

fn build(config: &AwcConfig) -> awc::Client {
    let connector = awc::Connector::new()
        .timeout(config.connect_timeout)
        .conn_keep_alive(config.connection_idle_timeout)
        .limit(config.max_connections);
    // No overall timeout: the caller bounds each call with its deadline.
    awc::Client::builder()
        .connector(connector)
        .disable_timeout()
        .finish()
}

impl ClientFactory for AwcFactory {
    type Client = AwcClient;
    type Error = AwcFactoryError;

    fn build(&self, address: &str) -> Result<AwcClient, AwcFactoryError> {
        Ok(AwcClient {
            shared: Arc::new(Shared {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                address: address.to_string(),
                config: self.config,
                closed: AtomicBool::new(false),
            }),
        })
    }

    fn close(
        &self,
        client: AwcClient,
    ) -> futures::future::BoxFuture<'static, Result<(), AwcFactoryError>> {
        client.close();
        Box::pin(async { Ok(()) })
    }
}
