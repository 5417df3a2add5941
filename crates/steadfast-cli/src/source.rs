//! The registry and metadata fetcher named by `--registry`: etcd (records
//! under `--prefix`; metadata read from the etcd metadata report first,
//! then routed as the engine routes it: dubbo-go's report for a Dubbo
//! record with storage-type=remote, Triple for a Dubbo 3 one, HTTP), Nacos (`nacos://`,
//! parsed as the facade parses `STEADFAST_REGISTRY`; metadata read from
//! the Nacos report first), or the embedded in-memory registry (empty; for
//! trying the command).

use std::sync::Arc;

use steadfast_actors::EngineBuilder;
use steadfast_core::{FallbackFetcher, MetadataFetcher};
use steadfast_dubbo::{DubboFetcher, TripleFetcher};
use steadfast_etcd::{EtcdAuth, EtcdConfig, EtcdRegistry, EtcdTls, PemSource};
use steadfast_http::HttpMetadataFetcher;
use steadfast_memory::MemoryRegistry;
use steadfast_nacos::{grpc_address, NacosAuth, NacosConfig, NacosRegistry};

use crate::exit::Failure;

/// One fetcher shared by the engine and the command (which reads what a
/// provider exports when no endpoint matches the reference).
pub(crate) type SharedFetcher = Arc<dyn MetadataFetcher>;

/// An engine builder wired to a registry and its fetcher.
pub(crate) struct Source {
    pub builder: EngineBuilder,
    /// How the source reads in the report's header.
    pub label: String,
    /// The engine's metadata fetcher.
    pub fetcher: SharedFetcher,
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

/// How to reach a secured registry: etcd credentials, a private CA, a
/// client certificate; Nacos credentials (all optional).
#[derive(Default)]
pub(crate) struct Security {
    pub user: Option<String>,
    pub password: Option<String>,
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    pub nacos_user: Option<String>,
    pub nacos_password: Option<String>,
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

/// The source named by `registry` with records under `prefix`: a value
/// naming no supported registry, or an etcd configuration the options
/// make invalid, is a usage error; a client that cannot be built (e.g. an
/// unreadable certificate) a plain failure.
pub(crate) fn open(registry: &str, prefix: &str, security: &Security) -> Result<Source, Failure> {
    let http = HttpMetadataFetcher::builder()
        .build()
        .map_err(|e| Failure::failed(format!("metadata fetcher: {e}")))?;
    // Dubbo 3 providers (meta-v=2.0.0) over Triple, Steadfast's over HTTP.
    let http = DubboFetcher::new(TripleFetcher::default(), Arc::new(http));
    if registry == "memory" {
        let fetcher: SharedFetcher = Arc::new(http);
        return Ok(Source {
            builder: EngineBuilder::default()
                .registry(MemoryRegistry::new())
                .fetcher(fetcher.clone()),
            label: "embedded memory registry (empty)".into(),
            fetcher,
        });
    }
    if registry.starts_with("nacos://") {
        return nacos(registry, http, security);
    }
    let endpoints = etcd_endpoints(registry).ok_or_else(|| {
        Failure::usage(format!(
            "unsupported registry {registry:?}: use etcd://host:port[,host:port], nacos://host:port[,host:port] or memory"
        ))
    })?;
    let config = security.apply(EtcdConfig::new(endpoints).with_prefix(prefix));
    config.validate().map_err(Failure::usage)?;
    let etcd =
        EtcdRegistry::new(config).map_err(|e| Failure::failed(format!("etcd client: {e}")))?;
    // Dubbo records with storage-type=remote: dubbo-go's report, as the
    // engine configured from STEADFAST_REGISTRY reads them.
    let http = http.with_report(Arc::new(etcd.dubbo_report()));
    let fetcher: SharedFetcher = Arc::new(FallbackFetcher::new(etcd.metadata_report(), http));
    Ok(Source {
        builder: EngineBuilder::default()
            .registry_arc(Arc::new(etcd))
            .fetcher(fetcher.clone()),
        label: format!("{registry} prefix {prefix}"),
        fetcher,
    })
}

/// A Nacos source: `nacos://host:port[,...][?namespace=..&group=..]`
/// (HTTP addresses; the client speaks gRPC at port + 1000).
fn nacos(registry: &str, http: DubboFetcher, security: &Security) -> Result<Source, Failure> {
    let choice: steadfast::RegistryChoice = registry
        .parse()
        .map_err(|e: steadfast::env::BadRegistry| Failure::usage(e.to_string()))?;
    let steadfast::RegistryChoice::Nacos {
        servers,
        namespace,
        group,
    } = choice
    else {
        return Err(Failure::usage(format!(
            "{registry:?} is not a nacos:// address"
        )));
    };
    let mut config = NacosConfig::new(Vec::<String>::new());
    for server in &servers {
        let grpc = grpc_address(server)
            .ok_or_else(|| Failure::usage(format!("{server:?}: no gRPC port at port + 1000")))?;
        config.servers.push(grpc);
    }
    if let Some(n) = namespace {
        config.namespace = n;
    }
    if let Some(g) = group {
        config.group = g;
    }
    if let Some(user) = &security.nacos_user {
        let password = security.nacos_password.clone().unwrap_or_default();
        config.auth = Some(NacosAuth::new(user.clone(), password));
    }
    let nacos = NacosRegistry::new(config);
    let fetcher: SharedFetcher = Arc::new(FallbackFetcher::new(nacos.metadata_report(), http));
    Ok(Source {
        builder: EngineBuilder::default()
            .registry(nacos)
            .fetcher(fetcher.clone()),
        label: registry.to_string(),
        fetcher,
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
