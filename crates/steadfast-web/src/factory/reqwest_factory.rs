//! The reqwest client factory: one `reqwest::Client` (its own connection
//! pool) per endpoint address, with bounded connects.

use std::sync::Arc;
use std::time::Duration;

use steadfast_pool::ClientFactory;

/// How [`ReqwestFactory`] builds each endpoint's client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqwestConfig {
    /// Bound on establishing one TCP (and TLS) connection (default 2 s).
    pub connect_timeout: Duration,
    /// An idle keep-alive connection is closed after this long (default
    /// 90 s).
    pub connection_idle_timeout: Duration,
    /// Idle keep-alive connections kept per endpoint (default 32).
    pub max_idle_connections: usize,
    /// TCP keepalive probes on every connection (default 30 s).
    pub tcp_keepalive: Duration,
    /// Disable Nagle's algorithm (default true).
    pub tcp_nodelay: bool,
}

impl Default for ReqwestConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            connection_idle_timeout: Duration::from_secs(90),
            max_idle_connections: 32,
            tcp_keepalive: Duration::from_secs(30),
            tcp_nodelay: true,
        }
    }
}

type Customize = Arc<dyn Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder + Send + Sync>;

/// Builds one `reqwest::Client` per endpoint address. A client is closed by
/// dropping it (reqwest closes its connections when the last clone goes).
/// No overall request timeout is set here: the caller bounds each call with
/// its own deadline.
#[derive(Clone, Default)]
pub struct ReqwestFactory {
    config: ReqwestConfig,
    customize: Option<Customize>,
}

impl ReqwestFactory {
    /// A factory with `config`.
    pub fn new(config: ReqwestConfig) -> Self {
        Self {
            config,
            customize: None,
        }
    }

    /// Lets `customize` adjust each client's builder after the factory's
    /// settings (TLS roots, proxies, default headers...).
    pub fn customize(
        mut self,
        customize: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder + Send + Sync + 'static,
    ) -> Self {
        self.customize = Some(Arc::new(customize));
        self
    }

    /// The configuration.
    pub fn config(&self) -> ReqwestConfig {
        self.config
    }
}

impl std::fmt::Debug for ReqwestFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReqwestFactory")
            .field("config", &self.config)
            .field("customized", &self.customize.is_some())
            .finish()
    }
}

impl ClientFactory for ReqwestFactory {
    type Client = reqwest::Client;
    type Error = reqwest::Error;

    fn build(&self, _address: &str) -> Result<reqwest::Client, reqwest::Error> {
        let c = self.config;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(c.connect_timeout)
            .pool_idle_timeout(c.connection_idle_timeout)
            .pool_max_idle_per_host(c.max_idle_connections)
            .tcp_keepalive(c.tcp_keepalive)
            .tcp_nodelay(c.tcp_nodelay);
        if let Some(customize) = &self.customize {
            builder = customize(builder);
        }
        builder.build()
    }
}
