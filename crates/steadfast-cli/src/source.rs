//! The registry and metadata fetcher named by `--registry`: etcd (records
//! under `--prefix`; metadata read from the etcd metadata report first,
//! then from each instance's MetadataService over HTTP) or the embedded
//! in-memory registry (empty; for trying the command).

use std::sync::Arc;

use steadfast_actors::EngineBuilder;
use steadfast_core::FallbackFetcher;
use steadfast_etcd::{EtcdAuth, EtcdConfig, EtcdRegistry, EtcdTls, PemSource};
use steadfast_http::HttpMetadataFetcher;
use steadfast_memory::MemoryRegistry;

/// An engine builder wired to a registry and its fetcher.
pub(crate) struct Source {
    pub builder: EngineBuilder,
    /// How the source reads in the report's header.
    pub label: String,
}

/// The gateway URLs of `etcd://h:p,h2:p2` (`etcds://`: https).
pub(crate) fn etcd_endpoints(url: &str) -> Option<Vec<String>> {
    let (scheme, hosts) = if let Some(h) = url.strip_prefix("etcd://") {
        ("http", h)
    } else if let Some(h) = url.strip_prefix("etcds://") {
        ("https", h)
    } else {
        return None;
    };
    let endpoints: Vec<String> = hosts
        .trim_end_matches('/')
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{h}"))
        .collect();
    (!endpoints.is_empty()).then_some(endpoints)
}

/// How to reach a secured etcd: credentials, a private CA, a client
/// certificate (all optional).
#[derive(Default)]
pub(crate) struct Security {
    pub user: Option<String>,
    pub password: Option<String>,
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl Security {
    /// `config` with these settings applied.
    fn apply(&self, mut config: EtcdConfig) -> EtcdConfig {
        if let Some(user) = &self.user {
            let password = self.password.clone().unwrap_or_default();
            config.auth = Some(EtcdAuth::new(user.clone(), password));
        }
        if self.ca.is_some() || self.cert.is_some() {
            config.tls = Some(EtcdTls {
                ca: self.ca.clone().map(PemSource::File),
                client_cert: self.cert.clone().map(PemSource::File),
                client_key: self.key.clone().map(PemSource::File),
            });
        }
        config
    }
}

/// The source named by `registry` with records under `prefix`.
pub(crate) fn open(registry: &str, prefix: &str, security: &Security) -> Result<Source, String> {
    let http = HttpMetadataFetcher::builder()
        .build()
        .map_err(|e| format!("metadata fetcher: {e}"))?;
    if registry == "memory" {
        return Ok(Source {
            builder: EngineBuilder::default()
                .registry(MemoryRegistry::new())
                .fetcher(http),
            label: "embedded memory registry (empty)".into(),
        });
    }
    let endpoints = etcd_endpoints(registry).ok_or_else(|| {
        format!("unsupported registry {registry:?}: use etcd://host:port[,host:port] or memory")
    })?;
    let config = security.apply(EtcdConfig::new(endpoints).with_prefix(prefix));
    config.validate().map_err(|e| e.to_string())?;
    let etcd = EtcdRegistry::new(config).map_err(|e| format!("etcd client: {e}"))?;
    let report = etcd.metadata_report();
    Ok(Source {
        builder: EngineBuilder::default()
            .registry_arc(Arc::new(etcd))
            .fetcher(FallbackFetcher::new(report, http)),
        label: format!("{registry} prefix {prefix}"),
    })
}

#[cfg(test)]
mod tests {
    use super::etcd_endpoints;

    #[test]
    fn etcd_urls_name_every_gateway_endpoint() {
        assert_eq!(
            etcd_endpoints("etcd://127.0.0.1:2379,10.0.0.2:2379/"),
            Some(vec![
                "http://127.0.0.1:2379".to_string(),
                "http://10.0.0.2:2379".to_string()
            ])
        );
        assert_eq!(
            etcd_endpoints("etcds://e:2379"),
            Some(vec!["https://e:2379".to_string()])
        );
        assert_eq!(etcd_endpoints("etcd://"), None);
        assert_eq!(etcd_endpoints("consul://x"), None);
    }
}
