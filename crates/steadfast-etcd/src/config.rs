//! [`EtcdConfig`]: endpoints, key prefix, lease TTL, deadlines, the watch
//! backoff and the liveness settings of the etcd backend.
//!
//! Defaults (all on, nothing to configure for fault containment):
//!
//! | knob | default | what |
//! |---|---|---|
//! | `lease_ttl` | 10 s | lease of every registration, refreshed every TTL/3 |
//! | `request_timeout` | 3 s | deadline of one unary call per endpoint |
//! | `watch_open_timeout` | 5 s | deadline for a watch to be accepted |
//! | `operation_timeout` | 10 s | deadline of a whole register / unregister |
//! | `backoff` | 250 ms doubling to 10 s, +25 % | re-open, resync and keepalive retries; a watch's schedule resets once it stayed open for `backoff.max` (or delivered something) |
//! | `liveness_probe_interval` | 2 s | probe of each endpoint watches are open on (one prober per client) |
//! | `probe_timeout` | 1 s | deadline of one probe |
//! | `probe_failures` | 2 | failed probes in a row that declare the endpoint dead |
//! | `recover_probe_interval` | 1 s | probe cadence while a watch is down |
//! | `stale_after` | 3 s | a broken watch not resumed by then reports `Err` |
//! | `keepalive_probe_interval` | 250 ms | probe cadence while registrations fail |
//! | `reregister_spread` | 250 ms | registrations resume spread over this after etcd answers again |
//! | `auth` | none | username / password; the token is sent on every call and renewed when refused |
//! | `tls` | none | custom CA and optional client certificate for `https://` endpoints |
//! | `proxy` | none | HTTP proxy for etcd calls; none means direct, `HTTP_PROXY` / `ALL_PROXY` ignored |
//!
//! Probing belongs to the client: all watches and keepers of one
//! [`crate::EtcdClient`] share one prober, which takes its cadences,
//! deadline and probe key from the first registry or report built on that
//! client. Every constructor validates the config.

use std::time::Duration;

use steadfast_core::{BackoffError, BackoffPolicy, MAX_BACKOFF};
use thiserror::Error;

pub use crate::auth::EtcdAuth;
pub use crate::tls::EtcdTls;

/// Configuration of [`crate::EtcdRegistry`] and [`crate::EtcdMetadataReport`].
///
/// Deserializes (serde) with every field optional (the defaults of
/// [`EtcdConfig::default`], endpoint `http://127.0.0.1:2379`); unknown
/// fields are refused; durations are humantime strings (`"3s"`,
/// `"250ms"`). Checked by [`EtcdConfig::validate`] when a client is built.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdConfig {
    /// Client URLs of the cluster members (`http://host:port`), tried in
    /// order; a failing one rotates to the next.
    pub endpoints: Vec<String>,
    /// Key prefix; records live under `<prefix>/services/...` and
    /// `<prefix>/metadata/...`. Default `/steadfast`.
    pub prefix: String,
    /// TTL of the lease each registration (and each published metadata
    /// revision) is attached to; refreshed every TTL/3. etcd rounds it up to
    /// whole seconds and at least 2 s. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// Deadline of every unary call (range, put, lease, ...), per endpoint
    /// tried. Default 3 s.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Deadline for a watch to be accepted (its response headers arrive
    /// with the first message). The stream itself has no deadline; the
    /// liveness probe watches over it. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub watch_open_timeout: Duration,
    /// Deadline of one whole register or unregister (waiting for another
    /// operation on the same key included); past it the call fails with
    /// `RegistryError::Timeout`. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub operation_timeout: Duration,
    /// Delays between attempts to resume a broken watch (resyncs and
    /// streams that end right after their creation included) and between
    /// failed keepalive rounds. A watch's schedule resets only once it
    /// proved healthy: an event or progress notification after its
    /// creation, or staying open for `max`. Default 250 ms doubling to
    /// 10 s, +25 % jitter.
    pub backoff: BackoffPolicy,
    /// Ask etcd for progress notifications on watches (empty messages on
    /// idle watches, every 10 min unless the server's
    /// `--experimental-watch-progress-notify-interval` says otherwise).
    /// Default false.
    pub progress_notify: bool,
    /// With `progress_notify`, declare a watch dead when it delivered
    /// nothing for this long (set it above the server's notify interval).
    /// Default none.
    #[serde(with = "humantime_serde")]
    pub watch_idle_timeout: Option<Duration>,
    /// While watches are open on an endpoint, the client's shared prober
    /// probes it this often (+ jitter, once for all of them) with a
    /// linearizable one-key read carrying `hasleader`, so a frozen or
    /// leaderless member is noticed. `None` turns the probe off. Default 2 s.
    #[serde(with = "humantime_serde")]
    pub liveness_probe_interval: Option<Duration>,
    /// Deadline of one probe. Default 1 s.
    #[serde(with = "humantime_serde")]
    pub probe_timeout: Duration,
    /// Consecutive failed probes after which an endpoint counts as dead:
    /// every watch on it reports `Err`, drops its stream and moves on (to
    /// another endpoint when there is one). A failed probe is retried after
    /// a quarter of `liveness_probe_interval`, doubling. Default 2.
    pub probe_failures: u32,
    /// While a watch is down after a possible unreachability, the shared
    /// prober checks etcd this often (+ jitter) so that the watch resumes
    /// as soon as etcd answers, however long the backoff has grown.
    /// Default 1 s.
    #[serde(with = "humantime_serde")]
    pub recover_probe_interval: Duration,
    /// A watch that broke and has not resumed within this reports `Err` (the
    /// engine marks the app stale and keeps reading). A liveness failure
    /// reports at once. Default 3 s.
    #[serde(with = "humantime_serde")]
    pub stale_after: Duration,
    /// While keepalive rounds fail, the client's shared prober checks etcd
    /// this often (+ jitter); its first success lets every failing
    /// registration retry at once. Default 250 ms.
    #[serde(with = "humantime_serde")]
    pub keepalive_probe_interval: Duration,
    /// When etcd answers again, failing registrations retry at a random
    /// point within this window, so a fleet of them does not land at once.
    /// Default 250 ms.
    #[serde(with = "humantime_serde")]
    pub reregister_spread: Duration,
    /// Watch requests of apps are coalesced: a shared watch stream is
    /// opened once no app asked for a watch for this long. Default 10 ms.
    #[serde(with = "humantime_serde")]
    pub watch_rebuild_debounce: Duration,
    /// Longest an app's watch request waits for its shared stream to be
    /// opened (a burst of subscribes, ranges still in flight). Default
    /// 100 ms.
    #[serde(with = "humantime_serde")]
    pub watch_rebuild_max_delay: Duration,
    /// Most apps on the side stream (new and resyncing apps since the main
    /// stream was opened) before they all move into a new main stream.
    /// Default 256.
    pub side_stream_limit: usize,
    /// Most prefix ranges in one txn (etcd's `--max-txn-ops` defaults to
    /// 128). Default 128.
    pub range_batch_size: usize,
    /// Most range txns in flight at once (each holds a connection).
    /// Default 2.
    pub range_batches_in_flight: usize,
    /// Most items queued for one watch subscriber; past it the queue
    /// collapses to a Reset of the app's current state. Default 256.
    pub watch_queue_capacity: usize,
    /// Username and password: the client authenticates through the
    /// gateway, sends the token on every call (watches and keepalives
    /// included) and fetches a new one when etcd refuses it (expired,
    /// revoked, lost by a restart). Default none (etcd without auth).
    pub auth: Option<EtcdAuth>,
    /// TLS for `https://` endpoints: a custom CA and an optional client
    /// certificate. Default none (built-in web roots only).
    pub tls: Option<EtcdTls>,
    /// Proxy URL for every etcd call. Default none: the client connects
    /// directly and ignores `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY`.
    pub proxy: Option<String>,
}

/// Why an [`EtcdConfig`] was refused by [`EtcdConfig::validate`].
#[derive(Clone, Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum EtcdConfigError {
    /// The endpoint list is empty.
    #[error("no etcd endpoint configured")]
    NoEndpoints,
    /// A duration that must be above zero is zero.
    #[error("etcd config: {0} must be above zero")]
    Zero(&'static str),
    /// A duration is absurdly long (over one day, core's
    /// [`steadfast_core::MAX_BACKOFF`]).
    #[error("etcd config: {0} must not exceed one day")]
    TooLong(&'static str),
    /// A count is above what etcd accepts by default (128 txn operations).
    #[error("etcd config: {0} must not exceed 128")]
    TooMany(&'static str),
    /// `probe_failures` is zero.
    #[error("etcd config: probe_failures must be at least 1")]
    NoProbeFailures,
    /// `auth` has an empty user name.
    #[error("etcd config: auth.username is empty")]
    EmptyUser,
    /// An endpoint or the proxy URL carries user info (`user:password@`):
    /// it would be echoed into errors, status pages and logs. The URL
    /// itself is not repeated here; set [`EtcdConfig::auth`] instead.
    #[error("etcd config: {0} carries user info (user:password@); use the auth settings instead")]
    UserInfo(&'static str),
    /// The backoff policy is invalid.
    #[error("etcd config: invalid backoff")]
    Backoff(#[source] BackoffError),
}

/// etcd's default client URL, the endpoint of [`EtcdConfig::default`].
pub const DEFAULT_ETCD_ENDPOINT: &str = "http://127.0.0.1:2379";

impl Default for EtcdConfig {
    /// The defaults for one local etcd, [`DEFAULT_ETCD_ENDPOINT`].
    fn default() -> Self {
        Self::new([DEFAULT_ETCD_ENDPOINT])
    }
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
            operation_timeout: Duration::from_secs(10),
            backoff: BackoffPolicy {
                initial: Duration::from_millis(250),
                max: Duration::from_secs(10),
                multiplier: 2.0,
                jitter: 0.25,
            },
            progress_notify: false,
            watch_idle_timeout: None,
            liveness_probe_interval: Some(Duration::from_secs(2)),
            probe_timeout: Duration::from_secs(1),
            probe_failures: 2,
            recover_probe_interval: Duration::from_secs(1),
            stale_after: Duration::from_secs(3),
            keepalive_probe_interval: Duration::from_millis(250),
            reregister_spread: Duration::from_millis(250),
            watch_rebuild_debounce: Duration::from_millis(10),
            watch_rebuild_max_delay: Duration::from_millis(100),
            side_stream_limit: 256,
            range_batch_size: 128,
            range_batches_in_flight: 2,
            watch_queue_capacity: 256,
            auth: None,
            tls: None,
            proxy: None,
        }
    }

    /// Authenticates as `username` with `password`.
    pub fn with_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<steadfast_core::Secret>,
    ) -> Self {
        self.auth = Some(EtcdAuth::new(username, password));
        self
    }

    /// Uses these TLS settings (custom CA, client certificate).
    pub fn with_tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sends every etcd call through the proxy at `url`.
    pub fn proxy(mut self, url: impl Into<String>) -> Self {
        self.proxy = Some(url.into());
        self
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

    /// Checks every value: endpoints present, deadlines and cadences above
    /// zero and at most one day, a valid backoff, `probe_failures >= 1`.
    pub fn validate(&self) -> Result<(), EtcdConfigError> {
        if self.endpoints.iter().all(|e| e.trim().is_empty()) {
            return Err(EtcdConfigError::NoEndpoints);
        }
        if self.endpoints.iter().any(|e| has_user_info(e)) {
            return Err(EtcdConfigError::UserInfo("an endpoint"));
        }
        if self.proxy.as_deref().is_some_and(has_user_info) {
            return Err(EtcdConfigError::UserInfo("the proxy URL"));
        }
        let mut durations = vec![
            ("lease_ttl", self.lease_ttl),
            ("request_timeout", self.request_timeout),
            ("watch_open_timeout", self.watch_open_timeout),
            ("operation_timeout", self.operation_timeout),
            ("probe_timeout", self.probe_timeout),
            ("recover_probe_interval", self.recover_probe_interval),
            ("stale_after", self.stale_after),
            ("keepalive_probe_interval", self.keepalive_probe_interval),
        ];
        if let Some(p) = self.liveness_probe_interval {
            durations.push(("liveness_probe_interval", p));
        }
        if let Some(i) = self.watch_idle_timeout {
            durations.push(("watch_idle_timeout", i));
        }
        for (name, d) in durations {
            if d.is_zero() {
                return Err(EtcdConfigError::Zero(name));
            }
            if d > MAX_BACKOFF {
                return Err(EtcdConfigError::TooLong(name));
            }
        }
        if self.reregister_spread > MAX_BACKOFF {
            return Err(EtcdConfigError::TooLong("reregister_spread"));
        }
        if self.watch_rebuild_debounce > MAX_BACKOFF || self.watch_rebuild_max_delay > MAX_BACKOFF {
            return Err(EtcdConfigError::TooLong("watch_rebuild_max_delay"));
        }
        for (name, n) in [
            ("side_stream_limit", self.side_stream_limit),
            ("range_batch_size", self.range_batch_size),
            ("range_batches_in_flight", self.range_batches_in_flight),
            ("watch_queue_capacity", self.watch_queue_capacity),
        ] {
            if n == 0 {
                return Err(EtcdConfigError::Zero(name));
            }
        }
        if self.range_batch_size > crate::gateway::MAX_TXN_OPS {
            return Err(EtcdConfigError::TooMany("range_batch_size"));
        }
        if self.probe_failures == 0 {
            return Err(EtcdConfigError::NoProbeFailures);
        }
        if self.auth.as_ref().is_some_and(|a| a.username.is_empty()) {
            return Err(EtcdConfigError::EmptyUser);
        }
        self.backoff.validate().map_err(EtcdConfigError::Backoff)
    }
}

/// Whether `url`'s authority (between `://` and the first `/`, `?` or
/// `#`) holds an `@`, i.e. user info.
fn has_user_info(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?', '#'])
        .next()
        .is_some_and(|authority| authority.contains('@'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_user_info_are_refused_without_being_echoed() {
        for (c, what) in [
            (
                EtcdConfig::new(["http://127.0.0.1:2379", "http://root:hunter2@10.0.0.1:2379"]),
                "an endpoint",
            ),
            (
                EtcdConfig::new(["root:hunter2@10.0.0.1:2379"]),
                "an endpoint",
            ),
            (
                EtcdConfig {
                    proxy: Some("http://u:hunter2@proxy:3128".into()),
                    ..EtcdConfig::new(["http://127.0.0.1:2379"])
                },
                "the proxy URL",
            ),
        ] {
            let e = c.validate().unwrap_err();
            assert_eq!(e, EtcdConfigError::UserInfo(what));
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
            // The client refuses it too, whoever builds it.
            let e = crate::EtcdClient::from_config(&c).unwrap_err();
            assert!(!format!("{e} {e:?}").contains("hunter2"));
        }
        // An `@` past the authority is not user info.
        let c = EtcdConfig::new(["http://127.0.0.1:2379/path@x"]);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn defaults_and_ttl_rounding() {
        let c = EtcdConfig::new(["http://127.0.0.1:2379"]);
        assert_eq!(c.prefix, "/steadfast");
        assert_eq!(c.lease_ttl_secs(), 10);
        assert_eq!(c.request_timeout, Duration::from_secs(3));
        assert_eq!(c.operation_timeout, Duration::from_secs(10));
        assert_eq!(c.liveness_probe_interval, Some(Duration::from_secs(2)));
        assert!(!c.progress_notify && c.watch_idle_timeout.is_none());
        assert_eq!(c.validate(), Ok(()));
        let c = c.with_lease_ttl(Duration::from_millis(1500));
        assert_eq!(c.lease_ttl_secs(), 2);
        let c = c.with_lease_ttl(Duration::ZERO);
        assert_eq!(c.lease_ttl_secs(), 1);
        let c = c.with_lease_ttl(Duration::MAX);
        assert_eq!(c.lease_ttl_secs(), i64::MAX);
    }

    #[test]
    fn validation_names_the_bad_value() {
        let ok = EtcdConfig::new(["http://e:1"]);
        let mut c = ok.clone();
        c.endpoints = vec![" ".into()];
        assert_eq!(c.validate(), Err(EtcdConfigError::NoEndpoints));
        let mut c = ok.clone();
        c.probe_timeout = Duration::ZERO;
        assert_eq!(c.validate(), Err(EtcdConfigError::Zero("probe_timeout")));
        let mut c = ok.clone();
        c.operation_timeout = Duration::MAX;
        assert_eq!(
            c.validate(),
            Err(EtcdConfigError::TooLong("operation_timeout"))
        );
        let mut c = ok.clone();
        c.probe_failures = 0;
        assert_eq!(c.validate(), Err(EtcdConfigError::NoProbeFailures));
        let mut c = ok.clone();
        c.backoff.multiplier = f64::NAN;
        assert!(matches!(c.validate(), Err(EtcdConfigError::Backoff(_))));
        assert!(std::error::Error::source(&c.validate().unwrap_err()).is_some());
        let c = ok.clone().with_auth("", "pw");
        assert_eq!(c.validate(), Err(EtcdConfigError::EmptyUser));
        assert_eq!(ok.clone().with_auth("u", "").validate(), Ok(()));
    }

    #[test]
    fn the_one_day_limit_is_cores_max_backoff() {
        let mut c = EtcdConfig::new(["http://e:1"]);
        c.stale_after = MAX_BACKOFF;
        c.reregister_spread = MAX_BACKOFF;
        c.backoff.max = MAX_BACKOFF;
        assert_eq!(c.validate(), Ok(()));
        c.stale_after = MAX_BACKOFF + Duration::from_nanos(1);
        assert_eq!(c.validate(), Err(EtcdConfigError::TooLong("stale_after")));
        c.stale_after = MAX_BACKOFF;
        c.reregister_spread = MAX_BACKOFF + Duration::from_nanos(1);
        assert_eq!(
            c.validate(),
            Err(EtcdConfigError::TooLong("reregister_spread"))
        );
    }
}
