//! Dubbo 3's application-level instance metadata, read and written in one
//! place for every backend: the revision under `dubbo.metadata.revision`,
//! the MetadataService's protocol and port in
//! `dubbo.metadata-service.url-params` (a JSON object inside the string),
//! the protocol ports in `dubbo.endpoints` (a JSON array inside the
//! string), `meta-v` (`2.0.0`: MetadataServiceV2 over Triple is served)
//! and Java's per-instance `timestamp`.
//!
//! [`adopt_dubbo_metadata`] turns a Dubbo record's map into Steadfast's
//! keys (revision, metadata port, incarnation) and checks the embedded
//! JSON; [`dubbo_metadata`] writes Steadfast's keys in Dubbo's layout.
//! Dubbo's other keys (all but the revision, which moves) stay in the map,
//! so the fetcher reads the MetadataService protocol from them and the URL
//! builder the endpoint ports.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::incarnation::{BOOT_ID_KEY, EXPORT_MS_KEY};
use crate::model::{METADATA_PORT_KEY, REVISION_KEY};

/// Dubbo's revision key (`"0"`: the instance exports nothing).
pub const DUBBO_REVISION_KEY: &str = "dubbo.metadata.revision";
/// Where the provider keeps its MetadataInfo: `local` (its
/// MetadataService) or `remote` (the metadata report).
pub const DUBBO_STORAGE_KEY: &str = "dubbo.metadata.storage-type";
/// The ports per protocol: a JSON array `[{"port":..,"protocol":..}]`.
pub const DUBBO_ENDPOINTS_KEY: &str = "dubbo.endpoints";
/// The MetadataService URL params: a JSON object of strings with at least
/// `port` and `protocol`.
pub const DUBBO_METADATA_PARAMS_KEY: &str = "dubbo.metadata-service.url-params";
/// The MetadataService version: `2.0.0` when MetadataServiceV2 (Triple,
/// protobuf) is served.
pub const DUBBO_META_VERSION_KEY: &str = "meta-v";
/// Java Dubbo's per-instance export time (ms).
pub const DUBBO_TIMESTAMP_KEY: &str = "timestamp";
/// The `meta-v` of a provider serving MetadataServiceV2.
pub const META_V2: &str = "2.0.0";

/// A Dubbo record whose embedded metadata does not parse. The instance is
/// skipped; nothing else is affected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DubboRecordError {
    /// `dubbo.endpoints` is not an array of `{port, protocol}`.
    #[error("dubbo.endpoints does not parse: {0}")]
    Endpoints(String),
    /// `dubbo.metadata-service.url-params` is not an object of strings.
    #[error("dubbo.metadata-service.url-params does not parse: {0}")]
    MetadataParams(String),
    /// A port in the embedded metadata is not 1..=65535.
    #[error("{key} names port {port:?}, not 1..=65535")]
    Port {
        /// The metadata key it was found in.
        key: &'static str,
        /// The port as written (escaped, at most 40 characters).
        port: String,
    },
    /// `dubbo.metadata.storage-type` is neither `local` nor `remote`.
    #[error("unknown dubbo.metadata.storage-type {0:?}")]
    StorageType(String),
}

/// One entry of `dubbo.endpoints`: a protocol and its port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DubboEndpoint {
    /// The protocol (`tri`, `dubbo`, ...).
    pub protocol: String,
    /// Its port.
    pub port: u16,
}

/// Where a Dubbo provider serves its MetadataService.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataServiceParams {
    /// The protocol (`tri`: Triple; `dubbo`: Dubbo 2 with hessian2).
    pub protocol: String,
    /// Its port (`None`: the instance port).
    pub port: Option<u16>,
    /// Every param, `port` and `protocol` included.
    pub params: BTreeMap<String, String>,
}

/// Text from a record, cut to 40 characters and escaped, for an error.
fn shown(text: &str) -> String {
    crate::error::excerpt(text, 40)
}

fn port_of(key: &'static str, v: &Value) -> Result<u16, DubboRecordError> {
    let bad = || DubboRecordError::Port {
        key,
        port: shown(&v.to_string()),
    };
    let n = match v {
        Value::Number(n) => n.as_u64().ok_or_else(bad)?,
        Value::String(s) => s.trim().parse::<u64>().map_err(|_| bad())?,
        _ => return Err(bad()),
    };
    u16::try_from(n).ok().filter(|p| *p != 0).ok_or_else(bad)
}

/// The entries of `dubbo.endpoints` (none when the key is absent).
pub fn dubbo_endpoints(
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<DubboEndpoint>, DubboRecordError> {
    match metadata.get(DUBBO_ENDPOINTS_KEY) {
        Some(text) => parse_endpoints(text),
        None => Ok(Vec::new()),
    }
}

/// The port of an instance's service over `protocol` when the service
/// names none (port 0), as Dubbo consumers derive it: the `dubbo.endpoints`
/// entry of that protocol (`endpoints`: the key's text), else the instance
/// port.
pub fn derived_port(endpoints: Option<&str>, protocol: &str, instance_port: u16) -> u16 {
    endpoints
        .and_then(|text| parse_endpoints(text).ok())
        .and_then(|list| list.into_iter().find(|e| e.protocol == protocol))
        .map_or(instance_port, |e| e.port)
}

fn parse_endpoints(text: &str) -> Result<Vec<DubboEndpoint>, DubboRecordError> {
    let bad = |why: String| DubboRecordError::Endpoints(shown(&why));
    let items: Vec<Value> = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    items
        .iter()
        .map(|item| {
            let protocol = item
                .get("protocol")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("an entry without a protocol".into()))?;
            let port = item
                .get("port")
                .ok_or_else(|| bad("an entry without a port".into()))?;
            Ok(DubboEndpoint {
                protocol: protocol.to_string(),
                port: port_of(DUBBO_ENDPOINTS_KEY, port)?,
            })
        })
        .collect()
}

/// The MetadataService params of a Dubbo record (`None`: not a Dubbo
/// record, or one that does not name them). A missing protocol is `dubbo`,
/// as Java reads it.
pub fn metadata_service(
    metadata: &BTreeMap<String, String>,
) -> Result<Option<MetadataServiceParams>, DubboRecordError> {
    let Some(text) = metadata.get(DUBBO_METADATA_PARAMS_KEY) else {
        return Ok(None);
    };
    let bad = |why: String| DubboRecordError::MetadataParams(shown(&why));
    let object: serde_json::Map<String, Value> =
        serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let mut params = BTreeMap::new();
    for (k, v) in &object {
        let v = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => return Err(bad(format!("{} is not a string", shown(k)))),
        };
        params.insert(k.clone(), v);
    }
    let port = match object.get("port") {
        None => None,
        Some(p) => Some(port_of(DUBBO_METADATA_PARAMS_KEY, p)?),
    };
    let protocol = params
        .get("protocol")
        .cloned()
        .unwrap_or_else(|| "dubbo".to_string());
    Ok(Some(MetadataServiceParams {
        protocol,
        port,
        params,
    }))
}

/// Reads a record's metadata written in Dubbo's layout into Steadfast's
/// keys, in place: the revision moves to [`REVISION_KEY`]; the
/// MetadataService port becomes [`METADATA_PORT_KEY`]; Java's `timestamp`
/// becomes the incarnation (export time, and a boot id derived from it,
/// so a restart is a new incarnation). Keys Steadfast already wrote win.
/// A map without Dubbo keys is left as it is.
pub fn adopt_dubbo_metadata(
    metadata: &mut BTreeMap<String, String>,
) -> Result<(), DubboRecordError> {
    match metadata.get(DUBBO_STORAGE_KEY).map(String::as_str) {
        None | Some("local") | Some("remote") => {}
        Some(other) => return Err(DubboRecordError::StorageType(shown(other))),
    }
    dubbo_endpoints(metadata)?;
    let service = metadata_service(metadata)?;
    if let Some(rev) = metadata.remove(DUBBO_REVISION_KEY) {
        metadata.entry(REVISION_KEY.to_string()).or_insert(rev);
    }
    if let Some(port) = service.and_then(|s| s.port) {
        metadata
            .entry(METADATA_PORT_KEY.to_string())
            .or_insert_with(|| port.to_string());
    }
    let stamp = metadata
        .get(DUBBO_TIMESTAMP_KEY)
        .and_then(|t| t.trim().parse::<u64>().ok());
    if let Some(ts) = stamp {
        if !metadata.contains_key(EXPORT_MS_KEY) && !metadata.contains_key(BOOT_ID_KEY) {
            metadata.insert(EXPORT_MS_KEY.to_string(), ts.to_string());
            metadata.insert(BOOT_ID_KEY.to_string(), format!("{ts:016x}"));
        }
    }
    Ok(())
}

/// Writes Steadfast's metadata in Dubbo's layout, in place: the revision
/// moves to [`DUBBO_REVISION_KEY`] with storage `local` unless set.
pub fn dubbo_metadata(metadata: &mut BTreeMap<String, String>) {
    if let Some(rev) = metadata.remove(REVISION_KEY) {
        metadata.insert(DUBBO_REVISION_KEY.to_string(), rev);
        metadata
            .entry(DUBBO_STORAGE_KEY.to_string())
            .or_insert_with(|| "local".to_string());
    }
}

#[cfg(test)]
mod tests;
