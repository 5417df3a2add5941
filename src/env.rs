//! Configuration from a file and the environment: [`SteadfastConfig`] (one
//! document for the registry choice, the engine, the etcd client and the
//! HTTP metadata fetcher) and [`from_env`], which turns it into an
//! [`EngineBuilder`].
//!
//! ```no_run
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // STEADFAST_REGISTRY=etcd://10.0.0.1:2379,10.0.0.2:2379 STEADFAST_FETCH_TIMEOUT=2s
//! let engine = steadfast::from_env()?.start()?;
//! # Ok(()) }
//! ```
//!
//! `STEADFAST_REGISTRY` (or the file's `registry`) is required: without it
//! [`SteadfastConfig::builder`] refuses to start ([`FromEnvError::NoRegistry`]),
//! so a misspelt name cannot silently pick the in-process registry; `memory`
//! is the explicit choice for that. [`SteadfastConfig::from_env`] warns
//! about every `STEADFAST_*` variable it does not know, naming the closest
//! known one. The other variables are optional (unset or empty keeps the
//! value below it; durations are humantime strings such as `5s`, `250ms`):
//!
//! | variable | what | default |
//! |---|---|---|
//! | `STEADFAST_CONFIG` | path of a JSON [`SteadfastConfig`] read first; the variables apply on top | none |
//! | `STEADFAST_REGISTRY` | `memory`, `etcd://host:port[,host:port...]` (`etcds://` for https), or `nacos://host:port[,host:port...][?namespace=..&group=..]` (HTTP addresses; gRPC at port + 1000) | required |
//! | `STEADFAST_ETCD_PREFIX` | etcd key prefix | `/steadfast` |
//! | `STEADFAST_ETCD_LEASE_TTL` | lease TTL of registrations | 10s |
//! | `STEADFAST_ETCD_REQUEST_TIMEOUT` | deadline of one etcd call | 3s |
//! | `STEADFAST_ETCD_OPERATION_TIMEOUT` | deadline of a whole register / unregister | 10s |
//! | `STEADFAST_ETCD_USER` / `STEADFAST_ETCD_PASSWORD` | etcd user and password (auth through the gateway) | none |
//! | `STEADFAST_ETCD_CA_FILE` | PEM file of the CA the members' certificates chain to | built-in roots |
//! | `STEADFAST_ETCD_CERT_FILE` / `STEADFAST_ETCD_KEY_FILE` | client certificate and key (PEM files) | none |
//! | `STEADFAST_ETCD_PROXY` | proxy URL for the etcd client (proxy variables are ignored otherwise) | none |
//! | `STEADFAST_NACOS_USER` / `STEADFAST_NACOS_PASSWORD` | Nacos user and password (login over HTTP, token on every call) | none |
//! | `STEADFAST_HTTP_CONNECT_TIMEOUT` | metadata fetcher TCP connect deadline | 5s |
//! | `STEADFAST_HTTP_TIMEOUT` | metadata fetcher deadline of one request | 5s |
//! | `STEADFAST_HTTP_MAX_BODY_BYTES` | largest metadata body | 1048576 |
//! | `STEADFAST_HTTP_BASE_PATH` | MetadataService base path | `/steadfast` |
//! | `STEADFAST_EXPORT_HOST` / `STEADFAST_EXPORT_PORT` | the address a provider advertises ([`ExportSpec::from_env`](crate::ExportSpec::from_env)) | none / the bound port |
//!
//! and the engine's own variables ([`ENGINE_VARS`](crate::ENGINE_VARS),
//! e.g. `STEADFAST_FETCH_TIMEOUT`, `STEADFAST_REGISTRY_CALL_TIMEOUT`,
//! `STEADFAST_SEED`; each row names its config field). The etcd and HTTP
//! variables need the `etcd` / `http` features; without them they are
//! ignored, and `STEADFAST_REGISTRY=etcd://...` is refused.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use steadfast_actors::{ConfigError, EngineBuilder, EngineConfig};
use steadfast_actors::{EnvError, EnvVar, EnvVars, Takes};
use thiserror::Error;

/// The variable naming a JSON [`SteadfastConfig`] read before the others.
pub const CONFIG_VAR: &str = "STEADFAST_CONFIG";

/// Every variable of the facade's part of [`SteadfastConfig`] (the
/// engine's are [`ENGINE_VARS`](crate::ENGINE_VARS), below `engine`), each
/// with the document field it sets. Read through [`EnvVars::apply`], the
/// one mapping from the environment to a config. The `etcd.*` rows need
/// the `etcd` feature and the `fetcher.*` rows the `http` feature; without
/// it they are not read, as the `nacos.*` rows without the `nacos`
/// feature.
pub const FACADE_VARS: &[EnvVar] = &[
    EnvVar::new("STEADFAST_REGISTRY", "registry", Takes::Text),
    EnvVar::new("STEADFAST_ETCD_PREFIX", "etcd.prefix", Takes::Text),
    EnvVar::new(
        "STEADFAST_ETCD_LEASE_TTL",
        "etcd.lease_ttl",
        Takes::Duration,
    ),
    EnvVar::new(
        "STEADFAST_ETCD_REQUEST_TIMEOUT",
        "etcd.request_timeout",
        Takes::Duration,
    ),
    EnvVar::new(
        "STEADFAST_ETCD_OPERATION_TIMEOUT",
        "etcd.operation_timeout",
        Takes::Duration,
    ),
    EnvVar::new("STEADFAST_ETCD_USER", "etcd.auth.username", Takes::Text),
    EnvVar::new(
        "STEADFAST_ETCD_PASSWORD",
        "etcd.auth.password",
        Takes::Secret,
    ),
    EnvVar::new("STEADFAST_ETCD_CA_FILE", "etcd.tls.ca", Takes::PemFile),
    EnvVar::new(
        "STEADFAST_ETCD_CERT_FILE",
        "etcd.tls.client_cert",
        Takes::PemFile,
    ),
    EnvVar::new(
        "STEADFAST_ETCD_KEY_FILE",
        "etcd.tls.client_key",
        Takes::PemFile,
    ),
    EnvVar::new("STEADFAST_ETCD_PROXY", "etcd.proxy", Takes::Text),
    EnvVar::new("STEADFAST_NACOS_USER", "nacos.auth.username", Takes::Text),
    EnvVar::new(
        "STEADFAST_NACOS_PASSWORD",
        "nacos.auth.password",
        Takes::Secret,
    ),
    EnvVar::new(
        "STEADFAST_HTTP_CONNECT_TIMEOUT",
        "fetcher.connect_timeout",
        Takes::Duration,
    ),
    EnvVar::new("STEADFAST_HTTP_TIMEOUT", "fetcher.timeout", Takes::Duration),
    EnvVar::new(
        "STEADFAST_HTTP_MAX_BODY_BYTES",
        "fetcher.max_body_bytes",
        Takes::Number,
    ),
    EnvVar::new("STEADFAST_HTTP_BASE_PATH", "fetcher.base_path", Takes::Text),
];

/// Whether this build's [`SteadfastConfig`] has the field a facade row sets.
fn built_in(v: &EnvVar) -> bool {
    let section = v.field.split('.').next();
    let needs = |name: &str| section == Some(name);
    (cfg!(feature = "etcd") || !needs("etcd"))
        && (cfg!(feature = "http") || !needs("fetcher"))
        && (cfg!(feature = "nacos") || !needs("nacos"))
}

/// Which registry backend to use: `memory`,
/// `etcd://host:port[,host:port...]` (`etcds://`: the members speak https)
/// or `nacos://host:port[,host:port...][?namespace=..&group=..]` (the
/// servers' HTTP addresses, as Dubbo writes them; the client speaks gRPC
/// at port + 1000).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum RegistryChoice {
    /// A fresh embedded `MemoryRegistry` (in-process: only this process
    /// sees its records).
    Memory,
    /// etcd with these client URLs (`http://host:port`).
    Etcd(Vec<String>),
    /// Nacos at these servers.
    Nacos {
        /// The servers' HTTP addresses (`host:port`).
        servers: Vec<String>,
        /// The namespace id (`None`: `public`).
        namespace: Option<String>,
        /// The group (`None`: `DEFAULT_GROUP`).
        group: Option<String>,
    },
}

/// Why a registry choice was refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error(
    "registry {0:?} is none of `memory`, `etcd://host:port[,host:port...]`, `nacos://host:port[,host:port...][?namespace=..&group=..]`"
)]
pub struct BadRegistry(pub String);

impl FromStr for RegistryChoice {
    type Err = BadRegistry;

    fn from_str(text: &str) -> Result<Self, BadRegistry> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("memory") {
            return Ok(RegistryChoice::Memory);
        }
        if let Some(rest) = t.strip_prefix("nacos://") {
            return parse_nacos(rest).ok_or_else(|| BadRegistry(redacted(text)));
        }
        let (scheme, rest) = if let Some(rest) = t.strip_prefix("etcd://") {
            ("http", rest)
        } else if let Some(rest) = t.strip_prefix("etcds://") {
            ("https", rest)
        } else {
            return Err(BadRegistry(text.to_string()));
        };
        let members: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .map(|m| {
                m.trim_start_matches("etcd://")
                    .trim_start_matches("etcds://")
            })
            .map(|m| m.trim_end_matches('/'))
            .filter(|m| !m.is_empty())
            .map(|m| format!("{scheme}://{m}"))
            .collect();
        let well_formed = |m: &String| {
            let host_port = m.split_once("://").map_or("", |(_, hp)| hp);
            match host_port.rsplit_once(':') {
                Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
                None => false,
            }
        };
        if rest.contains('@') {
            // Credentials in the URL would reach error texts, logs and the
            // inspection report: refused, without echoing them.
            return Err(BadRegistry(
                "<an etcd URL with user info: give credentials as STEADFAST_ETCD_USER / STEADFAST_ETCD_PASSWORD>"
                    .to_string(),
            ));
        }
        if members.is_empty() || !members.iter().all(well_formed) {
            return Err(BadRegistry(text.to_string()));
        }
        Ok(RegistryChoice::Etcd(members))
    }
}

/// `text` as an error may show it: never with user info.
fn redacted(text: &str) -> String {
    if text.contains('@') {
        "<a registry URL with user info: give credentials apart>".to_string()
    } else {
        text.to_string()
    }
}

/// Whether `member` is `host:port` with a non-empty host and a port.
fn host_port(member: &str) -> bool {
    match member.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
    }
}

/// The part of a `nacos://` URL after the scheme.
fn parse_nacos(rest: &str) -> Option<RegistryChoice> {
    if rest.contains('@') {
        return None;
    }
    let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
    let servers: Vec<String> = hosts
        .split(',')
        .map(|m| m.trim().trim_end_matches('/'))
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect();
    if servers.is_empty() || !servers.iter().all(|m| host_port(m)) {
        return None;
    }
    let safe = |v: &str| {
        !v.is_empty()
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    };
    let (mut namespace, mut group) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("namespace", v)) if safe(v) => namespace = Some(v.to_string()),
            Some(("group", v)) if safe(v) => group = Some(v.to_string()),
            _ => return None,
        }
    }
    Some(RegistryChoice::Nacos {
        servers,
        namespace,
        group,
    })
}

impl TryFrom<String> for RegistryChoice {
    type Error = BadRegistry;

    fn try_from(text: String) -> Result<Self, BadRegistry> {
        text.parse()
    }
}

impl fmt::Display for RegistryChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryChoice::Memory => f.write_str("memory"),
            RegistryChoice::Etcd(members) => {
                let https = members.iter().any(|m| m.starts_with("https://"));
                let hosts: Vec<&str> = members
                    .iter()
                    .map(|m| m.split_once("://").map_or(m.as_str(), |(_, hp)| hp))
                    .collect();
                let scheme = if https { "etcds" } else { "etcd" };
                write!(f, "{scheme}://{}", hosts.join(","))
            }
            RegistryChoice::Nacos {
                servers,
                namespace,
                group,
            } => {
                write!(f, "nacos://{}", servers.join(","))?;
                let query: Vec<String> = [("namespace", namespace), ("group", group)]
                    .into_iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
                    .collect();
                if !query.is_empty() {
                    write!(f, "?{}", query.join("&"))?;
                }
                Ok(())
            }
        }
    }
}

impl From<RegistryChoice> for String {
    fn from(choice: RegistryChoice) -> String {
        choice.to_string()
    }
}

/// Everything [`from_env`] configures, as one serde document (every field
/// optional, unknown fields refused), e.g.
/// `{ "registry": "etcd://127.0.0.1:2379", "engine": { "fetch_timeout": "2s" },
///    "etcd": { "prefix": "/prod" }, "fetcher": { "timeout": "1s" } }`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SteadfastConfig {
    /// The registry backend. Required: `None` is refused by
    /// [`SteadfastConfig::builder`].
    pub registry: Option<RegistryChoice>,
    /// The engine's settings.
    pub engine: EngineConfig,
    /// The etcd client's settings (its endpoints come from `registry`).
    #[cfg(feature = "etcd")]
    pub etcd: steadfast_etcd::EtcdConfig,
    /// The Nacos client's settings (its servers, namespace and group come
    /// from `registry`).
    #[cfg(feature = "nacos")]
    pub nacos: steadfast_nacos::NacosConfig,
    /// The HTTP metadata fetcher's settings.
    #[cfg(feature = "http")]
    pub fetcher: steadfast_http::HttpFetcherConfig,
}

/// Why [`from_env`] or [`SteadfastConfig::builder`] refused the settings.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FromEnvError {
    /// A variable holds a value of the wrong shape.
    #[error(transparent)]
    Var(#[from] EnvError),
    /// `STEADFAST_REGISTRY` (or the file's `registry`) names no backend.
    #[error("STEADFAST_REGISTRY: {0}")]
    Registry(#[source] BadRegistry),
    /// Neither `STEADFAST_REGISTRY` nor the file's `registry` is set.
    #[error(
        "STEADFAST_REGISTRY is not set: name the registry (`etcd://host:port` or `memory` for the in-process one)"
    )]
    NoRegistry,
    /// The registry needs a cargo feature this build does not have.
    #[error("registry {registry} needs the `{feature}` feature of steadfast")]
    FeatureOff {
        /// The registry asked for.
        registry: String,
        /// The feature it needs.
        feature: &'static str,
    },
    /// The `STEADFAST_CONFIG` file could not be read.
    #[error("reading config file {path:?} failed")]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The `STEADFAST_CONFIG` file is not a valid config document.
    #[error("config file {path:?} is not a valid steadfast config")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause (line, column, field).
        #[source]
        source: serde_json::Error,
    },
    /// The engine settings are out of range.
    #[error("invalid engine configuration")]
    Engine(#[source] ConfigError),
    /// The etcd settings are out of range.
    #[cfg(feature = "etcd")]
    #[error("invalid etcd configuration")]
    Etcd(#[source] steadfast_etcd::EtcdConfigError),
    /// The etcd client could not be built.
    #[cfg(feature = "etcd")]
    #[error("building the etcd client failed")]
    EtcdClient(#[source] steadfast_etcd::GatewayError),
    /// The metadata fetcher settings were refused.
    #[cfg(feature = "http")]
    #[error("invalid metadata fetcher configuration")]
    Fetcher(#[source] steadfast_http::HttpFetcherError),
}

impl SteadfastConfig {
    /// The `STEADFAST_CONFIG` file when set (else the defaults), with every
    /// `STEADFAST_*` variable of the process environment applied on top.
    /// Warns (one `WARN` line each) about every `STEADFAST_*` variable of
    /// the process that no part of steadfast reads ([`unknown_vars`]).
    pub fn from_env() -> Result<Self, FromEnvError> {
        for u in unknown_vars(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok())) {
            match u.closest {
                Some(known) => tracing::warn!(
                    variable = %u.name,
                    "unknown STEADFAST_* variable {}, ignored (did you mean {known}?)",
                    u.name
                ),
                None => tracing::warn!(
                    variable = %u.name,
                    "unknown STEADFAST_* variable {}, ignored",
                    u.name
                ),
            }
        }
        Self::from_vars(&EnvVars::new(|k| std::env::var(k).ok()))
    }

    /// As [`SteadfastConfig::from_env`], reading variables through `vars`:
    /// the `STEADFAST_CONFIG` document (or an empty one) with every set
    /// variable of [`FACADE_VARS`] and [`ENGINE_VARS`](crate::ENGINE_VARS)
    /// put at its field, then read once. A secret in the file (an etcd
    /// password, an inline key) is never written back out on the way.
    pub fn from_vars<F: Fn(&str) -> Option<String>>(
        vars: &EnvVars<F>,
    ) -> Result<Self, FromEnvError> {
        let document = match vars.string(CONFIG_VAR) {
            Some(path) => Self::read_document(path.into())?,
            None => serde_json::Value::Object(Default::default()),
        };
        if let Some(r) = vars.string("STEADFAST_REGISTRY") {
            // Checked first for its own error, which never echoes
            // credentials given in the URL.
            r.parse::<RegistryChoice>()
                .map_err(FromEnvError::Registry)?;
        }
        let facade: Vec<EnvVar> = FACADE_VARS.iter().copied().filter(built_in).collect();
        Ok(vars.apply(
            document,
            &[("", &facade), ("engine", steadfast_actors::ENGINE_VARS)],
        )?)
    }

    /// Reads a JSON config document.
    pub fn from_file(path: impl Into<PathBuf>) -> Result<Self, FromEnvError> {
        let path = path.into();
        let document = Self::read_document(path.clone())?;
        serde_json::from_value(document).map_err(|source| FromEnvError::Parse { path, source })
    }

    /// The file as a JSON document, checked to be a valid config.
    fn read_document(path: PathBuf) -> Result<serde_json::Value, FromEnvError> {
        let text = std::fs::read_to_string(&path).map_err(|source| FromEnvError::File {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str::<Self>(&text)
            .and_then(|_| serde_json::from_str(&text))
            .map_err(|source| FromEnvError::Parse { path, source })
    }

    /// Checks every value and returns a builder with the registry, the
    /// fetcher (feature `http`) and the engine settings installed; add
    /// publishers or override anything before `start()`. [`Self::build`]
    /// also hands back the registry and fetcher it built.
    pub fn builder(&self) -> Result<EngineBuilder, FromEnvError> {
        self.build().map(|c| c.builder)
    }

    /// As [`Self::builder`], with the handles of what it built: the
    /// registry (for `Metrics::etcd`, a metadata report, registering by
    /// hand) and the metadata fetcher (to wrap in a `FallbackFetcher`).
    pub fn build(&self) -> Result<Configured, FromEnvError> {
        let choice = self.registry.as_ref().ok_or(FromEnvError::NoRegistry)?;
        self.engine.validate().map_err(FromEnvError::Engine)?;
        let builder = steadfast_actors::Engine::builder().config(self.engine.clone());
        #[cfg(feature = "http")]
        let fetcher = self.fetcher.build().map_err(FromEnvError::Fetcher)?;
        let registry = match choice {
            RegistryChoice::Memory => {
                ConfiguredRegistry::Memory(steadfast_memory::MemoryRegistry::new())
            }
            #[cfg(feature = "etcd")]
            RegistryChoice::Etcd(members) => {
                let mut config = self.etcd.clone();
                config.endpoints = members.clone();
                config.validate().map_err(FromEnvError::Etcd)?;
                ConfiguredRegistry::Etcd(
                    steadfast_etcd::EtcdRegistry::new(config).map_err(FromEnvError::EtcdClient)?,
                )
            }
            #[cfg(not(feature = "etcd"))]
            RegistryChoice::Etcd(_) => {
                return Err(FromEnvError::FeatureOff {
                    registry: choice.to_string(),
                    feature: "etcd",
                })
            }
            #[cfg(feature = "nacos")]
            RegistryChoice::Nacos {
                servers,
                namespace,
                group,
            } => {
                let mut config = self.nacos.clone();
                config.servers = servers
                    .iter()
                    .map(|s| steadfast_nacos::grpc_address(s))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| FromEnvError::Registry(BadRegistry(choice.to_string())))?;
                if let Some(n) = namespace {
                    config.namespace = n.clone();
                }
                if let Some(g) = group {
                    config.group = g.clone();
                }
                ConfiguredRegistry::Nacos(steadfast_nacos::NacosRegistry::new(config))
            }
            #[cfg(not(feature = "nacos"))]
            RegistryChoice::Nacos { .. } => {
                return Err(FromEnvError::FeatureOff {
                    registry: choice.to_string(),
                    feature: "nacos",
                })
            }
        };
        #[cfg(feature = "http")]
        let builder = builder.fetcher(engine_fetcher(&fetcher, &registry));
        let builder = match &registry {
            ConfiguredRegistry::Memory(m) => builder.registry(m.clone()),
            #[cfg(feature = "etcd")]
            ConfiguredRegistry::Etcd(e) => builder.registry(e.clone()),
            #[cfg(feature = "nacos")]
            ConfiguredRegistry::Nacos(n) => builder.registry(n.clone()),
        };
        Ok(Configured {
            builder,
            registry,
            #[cfg(feature = "http")]
            fetcher,
        })
    }
}

/// The fetcher the engine gets: `http` as it is, or with the `dubbo`
/// feature behind Dubbo's routing (Triple for Dubbo 3 records; for
/// `storage-type=remote`, the Nacos metadata report on Nacos, dubbo-go's
/// `/dubbo/<app>/<revision>` report on etcd; `http` for the rest).
#[cfg(feature = "http")]
fn engine_fetcher(
    http: &steadfast_http::HttpMetadataFetcher,
    registry: &ConfiguredRegistry,
) -> std::sync::Arc<dyn steadfast_core::MetadataFetcher> {
    let http = std::sync::Arc::new(http.clone());
    #[cfg(feature = "dubbo")]
    {
        let routed =
            steadfast_dubbo::DubboFetcher::new(steadfast_dubbo::TripleFetcher::default(), http);
        match registry {
            #[cfg(feature = "nacos")]
            ConfiguredRegistry::Nacos(n) => {
                std::sync::Arc::new(routed.with_report(std::sync::Arc::new(n.metadata_report())))
            }
            #[cfg(feature = "etcd")]
            ConfiguredRegistry::Etcd(e) => {
                std::sync::Arc::new(routed.with_report(std::sync::Arc::new(e.dubbo_report())))
            }
            _ => std::sync::Arc::new(routed),
        }
    }
    #[cfg(not(feature = "dubbo"))]
    {
        let _ = registry;
        http
    }
}

/// What [`SteadfastConfig::build`] made: the engine builder and the
/// handles it was given.
#[non_exhaustive]
pub struct Configured {
    /// The engine builder, registry and fetcher installed.
    pub builder: EngineBuilder,
    /// The registry it uses (a clone: both share one client and state).
    pub registry: ConfiguredRegistry,
    /// The HTTP metadata fetcher it uses (a clone sharing its pool).
    #[cfg(feature = "http")]
    pub fetcher: steadfast_http::HttpMetadataFetcher,
}

/// The registry [`SteadfastConfig::build`] built.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ConfiguredRegistry {
    /// The embedded registry.
    Memory(steadfast_memory::MemoryRegistry),
    /// The etcd registry.
    #[cfg(feature = "etcd")]
    Etcd(steadfast_etcd::EtcdRegistry),
    /// The Nacos registry.
    #[cfg(feature = "nacos")]
    Nacos(steadfast_nacos::NacosRegistry),
}

/// A `STEADFAST_*` variable no part of steadfast reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownVar {
    /// Its name.
    pub name: String,
    /// The known name closest to it (at most 3 edits away), if any.
    pub closest: Option<&'static str>,
}

/// Every name in `names` that starts with `STEADFAST_` and is none of
/// [`CONFIG_VAR`], [`FACADE_VARS`], [`ENGINE_VARS`](crate::ENGINE_VARS) or
/// [`EXPORT_VARS`](crate::EXPORT_VARS), with the closest known name.
pub fn unknown_vars(names: impl IntoIterator<Item = String>) -> Vec<UnknownVar> {
    let known: Vec<&'static str> = std::iter::once(CONFIG_VAR)
        .chain(FACADE_VARS.iter().map(|v| v.var))
        .chain(steadfast_actors::ENGINE_VARS.iter().map(|v| v.var))
        .chain(steadfast_actors::EXPORT_VARS.iter().copied())
        .collect();
    let mut unknown: Vec<UnknownVar> = names
        .into_iter()
        .filter(|n| n.starts_with("STEADFAST_") && !known.contains(&n.as_str()))
        .map(|name| {
            let closest = known
                .iter()
                .map(|k| (edit_distance(&name, k), *k))
                .filter(|(d, _)| *d <= 3)
                .min()
                .map(|(_, k)| k);
            UnknownVar { name, closest }
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown
}

/// Levenshtein distance over chars (names are short: O(len^2) is fine).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// An [`EngineBuilder`] configured from the `STEADFAST_*` environment
/// variables (and the `STEADFAST_CONFIG` file they may name); see the
/// [module docs](self) for the names.
pub fn from_env() -> Result<EngineBuilder, FromEnvError> {
    SteadfastConfig::from_env()?.builder()
}
