//! Dubbo 3 instance records on etcd (`/services/<app>/<host>:<port>`, put
//! under a lease), in both spellings Dubbo writes: Java's Gson of
//! `DefaultServiceInstance` (`serviceName`, `host`, `port`, `enabled`,
//! `healthy`, `metadata`) and dubbo-go's untagged struct (`ServiceName`,
//! `Host`, `Port`, `Weight`, `Enable`, `Healthy`, `Metadata`, plus fields
//! read past: `ID`, `ServiceMetadata`, `Address`, `GroupName`, `Tag`).
//! The metadata map goes through core's [`adopt_dubbo_metadata`], as on
//! Nacos. [`DubboEtcdReport`] reads dubbo-go's remote metadata report, and
//! [`encode`] writes a record exported for Dubbo consumers in a shape both
//! Dubbo spellings read.

use std::collections::BTreeMap;

use futures::future::{BoxFuture, FutureExt};
use serde::Deserialize;
use steadfast_core::{
    adopt_dubbo_metadata, decode_report, FetchError, MetadataFetcher, MetadataInfo,
    ServiceInstance, DUBBO_META_VERSION_KEY, DUBBO_REVISION_KEY, DUBBO_STORAGE_KEY,
};

use crate::error::InvalidRecord;

/// A Dubbo instance record, either spelling.
#[derive(Deserialize)]
struct DubboRecord {
    #[serde(rename = "serviceName", alias = "ServiceName")]
    service_name: String,
    #[serde(rename = "host", alias = "Host")]
    host: String,
    #[serde(rename = "port", alias = "Port")]
    port: i64,
    /// Go only; Go leaves it 0 when unset, which Dubbo reads as the
    /// default weight (100), not as "no traffic".
    #[serde(rename = "Weight", alias = "weight", default)]
    weight: i64,
    #[serde(rename = "enabled", alias = "Enable", default = "yes")]
    enabled: bool,
    #[serde(rename = "healthy", alias = "Healthy", default = "yes")]
    healthy: bool,
    #[serde(rename = "metadata", alias = "Metadata", default)]
    metadata: Option<BTreeMap<String, String>>,
}

fn yes() -> bool {
    true
}

/// Dubbo's default instance weight.
const DEFAULT_WEIGHT: u32 = 100;

/// Decodes `value`, stored under `key` for `app` with instance id `id`, as
/// a Dubbo record; `Ok(None)` when it is not one (no service name field).
pub(crate) fn decode(
    app: &str,
    id: &str,
    key: &[u8],
    value: &[u8],
) -> Result<Option<ServiceInstance>, InvalidRecord> {
    let key_str = || String::from_utf8_lossy(key).into_owned();
    let looks_dubbo = contains(value, b"\"serviceName\"") || contains(value, b"\"ServiceName\"");
    if !looks_dubbo {
        return Ok(None);
    }
    let record: DubboRecord =
        serde_json::from_slice(value).map_err(|e| InvalidRecord::BadJson {
            key: key_str(),
            reason: format!("not a Dubbo instance record: {e}"),
        })?;
    if record.service_name != app {
        return Err(InvalidRecord::ForeignApp {
            key: key_str(),
            expected: app.to_string(),
            actual: record.service_name,
        });
    }
    let port = u16::try_from(record.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| InvalidRecord::BadJson {
            key: key_str(),
            reason: format!("port {} is not 1..=65535", record.port),
        })?;
    if record.host.trim().is_empty() {
        return Err(InvalidRecord::BadJson {
            key: key_str(),
            reason: "empty host".into(),
        });
    }
    let weight = if record.weight <= 0 {
        DEFAULT_WEIGHT
    } else {
        u32::try_from(record.weight).unwrap_or(u32::MAX)
    };
    let mut metadata = record.metadata.unwrap_or_default();
    adopt_dubbo_metadata(&mut metadata).map_err(|source| InvalidRecord::Dubbo {
        key: key_str(),
        source,
    })?;
    Ok(Some(ServiceInstance {
        id: id.to_string(),
        app: app.to_string(),
        host: record.host,
        port,
        weight,
        healthy: record.healthy && record.enabled,
        metadata,
    }))
}

/// The stored JSON of `instance`. A record exported for Dubbo consumers
/// (its metadata has `meta-v`, see `ExportSpec::dubbo_triple`) is written
/// so that Java's Gson and dubbo-go read it too: Steadfast's fields plus
/// `serviceName`, `enabled` (Java) and `enable` (Go matches field names
/// case-insensitively; `id`, `host`, `port`, `weight`, `healthy` and
/// `metadata` it already reads), with the revision also under
/// `dubbo.metadata.revision` and storage `local`. Steadfast reads it as
/// its own record. Any other record is Steadfast's JSON as it is.
pub(crate) fn encode(instance: &ServiceInstance) -> Result<Vec<u8>, serde_json::Error> {
    if !instance.metadata.contains_key(DUBBO_META_VERSION_KEY) {
        return serde_json::to_vec(instance);
    }
    let mut value = serde_json::to_value(instance)?;
    if let Some(object) = value.as_object_mut() {
        object.insert("serviceName".into(), instance.app.clone().into());
        object.insert("enabled".into(), true.into());
        object.insert("enable".into(), true.into());
        if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            if let Some(rev) = instance.revision() {
                meta.insert(DUBBO_REVISION_KEY.into(), rev.into());
            }
            meta.entry(DUBBO_STORAGE_KEY)
                .or_insert_with(|| "local".into());
        }
    }
    serde_json::to_vec(&value)
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests;

/// The remote metadata report in dubbo-go's etcd layout (read only):
/// `/dubbo/<app>/<revision>` holding the MetadataInfo JSON (Go's json tags;
/// Java's etcd report is not implemented upstream). What a consumer reads
/// for a record with `dubbo.metadata.storage-type=remote`; get one from
/// [`crate::EtcdRegistry::dubbo_report`].
#[derive(Clone, Debug)]
pub struct DubboEtcdReport {
    client: std::sync::Arc<crate::gateway::EtcdClient>,
}

impl crate::registry::EtcdRegistry {
    /// The Dubbo-layout remote metadata report on this registry's client.
    pub fn dubbo_report(&self) -> DubboEtcdReport {
        DubboEtcdReport {
            client: self.client().clone(),
        }
    }
}

impl DubboEtcdReport {
    async fn read(&self, app: &str, revision: &str) -> Result<MetadataInfo, FetchError> {
        crate::records::check_segment("app", app)
            .and_then(|_| crate::records::check_segment("revision", revision))
            .map_err(|e| FetchError::NoEndpoint(e.to_string()))?;
        let key = format!("/dubbo/{app}/{revision}");
        let range = self
            .client
            .get(key.as_bytes())
            .await
            .map_err(FetchError::from)?;
        let kv = range
            .kvs
            .first()
            .ok_or_else(|| FetchError::UnknownRevision(revision.to_string()))?;
        decode_report(app, revision, &kv.value)
    }
}

impl MetadataFetcher for DubboEtcdReport {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let this = self.clone();
        let app = instance.app.clone();
        let revision = revision.to_string();
        async move { this.read(&app, &revision).await }.boxed()
    }
}
