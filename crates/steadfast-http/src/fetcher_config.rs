//! [`HttpFetcherConfig`]: the settings of an [`HttpMetadataFetcher`] as
//! plain data, for config files (serde, humantime durations) and
//! environment variables.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::fetcher::{HttpFetcherBuilder, HttpFetcherError, HttpMetadataFetcher};
use crate::{DEFAULT_BASE_PATH, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_TIMEOUT};

/// Settings of an [`HttpMetadataFetcher`].
///
/// Deserializes with every field optional (missing: its default, unknown:
/// refused), durations as humantime strings, e.g.
/// `{ "timeout": "2s", "max_body_bytes": 65536 }`. [`HttpFetcherConfig::build`]
/// checks the values and refuses a bad one with a typed
/// [`HttpFetcherError`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpFetcherConfig {
    /// Deadline of the TCP connect (default 5 s).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Deadline of a whole request, connect to last body byte (default 5 s).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Largest body accepted, in bytes (default 1 MiB).
    pub max_body_bytes: usize,
    /// Base path the providers mount the MetadataService under (default
    /// [`DEFAULT_BASE_PATH`]).
    pub base_path: String,
}

impl Default for HttpFetcherConfig {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            base_path: DEFAULT_BASE_PATH.to_string(),
        }
    }
}

impl HttpFetcherConfig {
    /// A builder holding these settings.
    pub fn builder(&self) -> HttpFetcherBuilder {
        HttpMetadataFetcher::builder()
            .connect_timeout(self.connect_timeout)
            .timeout(self.timeout)
            .max_body_bytes(self.max_body_bytes)
            .base_path(self.base_path.clone())
    }

    /// Checks the settings (the same checks as [`HttpFetcherBuilder::build`]
    /// without building a client).
    pub fn validate(&self) -> Result<(), HttpFetcherError> {
        self.builder().check().map(|_| ())
    }

    /// Checks the settings and builds the fetcher.
    pub fn build(&self) -> Result<HttpMetadataFetcher, HttpFetcherError> {
        self.builder().build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_humantime_with_defaults_and_refuses_bad_values() {
        let c: HttpFetcherConfig =
            serde_json::from_str(r#"{"timeout":"250ms","max_body_bytes":4096}"#).unwrap();
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.max_body_bytes, 4096);
        assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT, "default kept");
        assert_eq!(c.base_path, DEFAULT_BASE_PATH);
        assert!(c.validate().is_ok());
        let zero: HttpFetcherConfig = serde_json::from_str(r#"{"timeout":"0s"}"#).unwrap();
        assert!(matches!(
            zero.validate(),
            Err(HttpFetcherError::ZeroTimeout("timeout"))
        ));
        let path: HttpFetcherConfig = serde_json::from_str(r#"{"base_path":"a/../b"}"#).unwrap();
        assert!(matches!(
            path.build(),
            Err(HttpFetcherError::InvalidBasePath(_))
        ));
        assert!(serde_json::from_str::<HttpFetcherConfig>(r#"{"timout":"1s"}"#).is_err());
        assert!(serde_json::from_str::<HttpFetcherConfig>(r#"{"timeout":"soon"}"#).is_err());
        let back: HttpFetcherConfig =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c, "serializes back to the same settings");
    }
}
