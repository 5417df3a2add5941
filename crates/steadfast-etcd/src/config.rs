//! [`EtcdConfig`]: endpoints, key prefix, lease TTL, timeouts and the watch
//! backoff of the etcd backend.

use std::time::Duration;

use steadfast_core::BackoffPolicy;

/// Configuration of [`crate::EtcdRegistry`] and [`crate::EtcdMetadataReport`].
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdConfig {
    /// Client URLs of the cluster members (`http://host:port`), tried in
    /// order; a failing one rotates to the next.
    pub endpoints: Vec<String>,
    /// Key prefix; records live under `<prefix>/services/...` and
    /// `<prefix>/metadata/...`. Default `/steadfast`.
    pub prefix: String,
    /// TTL of the lease each registration is attached to; refreshed every
    /// TTL/3. etcd rounds it up to whole seconds and at least 2 s.
    /// Default 10 s.
    pub lease_ttl: Duration,
    /// Deadline of every unary call (range, put, lease, ...), per endpoint
    /// tried. Default 3 s.
    pub request_timeout: Duration,
    /// Deadline for a watch to be accepted (its response headers arrive
    /// with the first message). The stream itself has no deadline.
    /// Default 5 s.
    pub watch_open_timeout: Duration,
    /// Delays between attempts to resume a broken watch.
    /// Default 250 ms doubling to 10 s, +25 % jitter.
    pub backoff: BackoffPolicy,
    /// Ask etcd for progress notifications on watches (empty messages on
    /// idle watches, every 10 min unless the server's
    /// `--experimental-watch-progress-notify-interval` says otherwise).
    /// Default false.
    pub progress_notify: bool,
    /// With `progress_notify`, resume a watch that delivered nothing for this
    /// long (set it above the server's notify interval). Default none.
    pub watch_idle_timeout: Option<Duration>,
    /// Consecutive failed attempts (range, watch open, broken stream) after
    /// which a watch stream yields `Err(RegistryError::Unavailable)` and
    /// ends. Default 5.
    pub unavailable_after: u32,
}

impl EtcdConfig {
    /// Defaults for `endpoints`.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: "/steadfast".to_string(),
            lease_ttl: Duration::from_secs(10),
            request_timeout: Duration::from_secs(3),
            watch_open_timeout: Duration::from_secs(5),
            backoff: BackoffPolicy {
                initial: Duration::from_millis(250),
                max: Duration::from_secs(10),
                multiplier: 2.0,
                jitter: 0.25,
            },
            progress_notify: false,
            watch_idle_timeout: None,
            unavailable_after: 5,
        }
    }

    /// Sets the key prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the lease TTL.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets the watch backoff policy.
    pub fn with_backoff(mut self, backoff: BackoffPolicy) -> Self {
        self.backoff = backoff;
        self
    }

    /// The lease TTL in whole seconds as etcd takes it (rounded up, >= 1;
    /// etcd itself raises it to its minimum).
    pub fn lease_ttl_secs(&self) -> i64 {
        let ms = self.lease_ttl.as_millis().max(1);
        i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_ttl_rounding() {
        let c = EtcdConfig::new(["http://127.0.0.1:2379"]);
        assert_eq!(c.prefix, "/steadfast");
        assert_eq!(c.lease_ttl_secs(), 10);
        assert_eq!(c.request_timeout, Duration::from_secs(3));
        assert!(!c.progress_notify && c.watch_idle_timeout.is_none());
        let c = c.with_lease_ttl(Duration::from_millis(1500));
        assert_eq!(c.lease_ttl_secs(), 2);
        let c = c.with_lease_ttl(Duration::ZERO);
        assert_eq!(c.lease_ttl_secs(), 1);
    }
}
