//! [`NacosConfig`]: where the servers are and how the client behaves.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use steadfast_core::{BackoffPolicy, Secret};

/// The namespace sent when none is configured (Nacos 3's default id; sent
/// explicitly, never the empty string).
pub const DEFAULT_NAMESPACE: &str = "public";
/// The group used when none is configured (Dubbo's default).
pub const DEFAULT_GROUP: &str = "DEFAULT_GROUP";

/// Settings of the Nacos client. Deserializes with every field optional;
/// durations are humantime strings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NacosConfig {
    /// gRPC endpoints of the servers, `host:port` (Nacos: HTTP port +
    /// 1000), tried in order; a failing one rotates to the next.
    pub servers: Vec<String>,
    /// The namespace id. Default `public`.
    pub namespace: String,
    /// The group of every service. Default `DEFAULT_GROUP`.
    pub group: String,
    /// Deadline of one call. Default 3 s.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Deadline of one whole operation (a register with its wait for the
    /// connection, a merged mapping write with its retries). Default 10 s.
    #[serde(with = "humantime_serde")]
    pub operation_timeout: Duration,
    /// Deadline of connecting to one server (TCP, server check, setup).
    /// Default 3 s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// How often the connection is checked with a `HealthCheckRequest`.
    /// Default 2 s.
    #[serde(with = "humantime_serde")]
    pub health_interval: Duration,
    /// Consecutive failed health checks after which the connection counts
    /// as dead (watches report `Err`, the client moves on). Default 2.
    pub health_failures: u32,
    /// A periodic full list of every subscribed service corrects a missed
    /// push (`missed_notifications`). Default 30 s.
    #[serde(with = "humantime_serde")]
    pub resync_interval: Duration,
    /// Delays between reconnect attempts.
    pub backoff: BackoffPolicy,
    /// Bound of each subscriber's queue (it collapses to a Reset past it).
    pub queue_capacity: usize,
    /// Credentials of a server with auth on: the client logs in over HTTP
    /// (`/nacos/v1/auth/login` at the gRPC port - 1000) on every new
    /// connection and again before the token expires, and sends the token
    /// with every call. Default none.
    pub auth: Option<NacosAuth>,
    /// Largest message the client accepts from a server. A push carries a
    /// service's whole list (~300 B per instance): gRPC's usual 4 MiB
    /// would refuse a list of ~14k instances and break the connection on
    /// every push. Default 64 MiB.
    pub max_message_bytes: usize,
}

impl Default for NacosConfig {
    fn default() -> Self {
        Self {
            servers: vec!["127.0.0.1:9848".to_string()],
            namespace: DEFAULT_NAMESPACE.to_string(),
            group: DEFAULT_GROUP.to_string(),
            request_timeout: Duration::from_secs(3),
            operation_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            health_interval: Duration::from_secs(2),
            health_failures: 2,
            resync_interval: Duration::from_secs(30),
            backoff: BackoffPolicy {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(5),
                multiplier: 2.0,
                jitter: 0.25,
            },
            queue_capacity: 256,
            max_message_bytes: 64 << 20,
            auth: None,
        }
    }
}

impl NacosConfig {
    /// The defaults, with these servers.
    pub fn new<S: Into<String>>(servers: impl IntoIterator<Item = S>) -> Self {
        Self {
            servers: servers.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }
}

/// A Nacos user. The password is a [`Secret`]: neither `Debug` nor
/// `Serialize` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NacosAuth {
    /// The user name.
    pub username: String,
    /// Its password (empty when not given).
    #[serde(default)]
    pub password: Secret,
}

impl NacosAuth {
    /// Credentials of `username`.
    pub fn new(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }
}

/// The HTTP address of a server named by its gRPC address (port - 1000).
pub fn http_address(grpc: &str) -> Option<String> {
    let (host, port) = grpc.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let http = port.checked_sub(1000)?;
    (!host.is_empty()).then(|| format!("{host}:{http}"))
}

/// The gRPC address of a Nacos server named by its HTTP address
/// (`host:port`, as users and Dubbo write it): the same host at port +
/// 1000, Nacos's fixed offset. `None` when `server` has no port or the
/// offset leaves the port range.
pub fn grpc_address(server: &str) -> Option<String> {
    let (host, port) = server.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let grpc = port.checked_add(1000)?;
    (!host.is_empty()).then(|| format!("{host}:{grpc}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_grpc_port_is_the_http_port_plus_1000() {
        assert_eq!(
            super::grpc_address("10.0.0.1:8848").as_deref(),
            Some("10.0.0.1:9848")
        );
        assert_eq!(
            super::grpc_address("[::1]:8848").as_deref(),
            Some("[::1]:9848")
        );
        assert_eq!(super::grpc_address("h:65000"), None);
        assert_eq!(super::grpc_address("h"), None);
        assert_eq!(super::grpc_address(":1"), None);
    }
}
