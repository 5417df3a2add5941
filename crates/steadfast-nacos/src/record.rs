//! Instance records on Nacos, in Dubbo's layout: service name = the
//! application, a flat string map of metadata with
//! `dubbo.metadata.revision` and `dubbo.metadata.storage-type`, and
//! Steadfast's own keys (incarnation, closing, metadata port) beside them.
//! A Dubbo provider's record reads as a Steadfast instance; a Steadfast
//! record reads as a Dubbo instance.

//! The key mapping itself is core's ([`adopt_dubbo_metadata`],
//! [`dubbo_metadata`]), shared with the etcd backend.

use steadfast_core::{adopt_dubbo_metadata, dubbo_metadata, ServiceInstance};

use crate::error::InvalidInstance;
use crate::protocol::NacosInstance;

/// Where a Steadfast id that is not `ip:port` is kept.
pub const ID_KEY: &str = "steadfast.id";

/// Nacos weights are floats around 1.0; Steadfast's are integers around
/// 100: a Nacos weight is Steadfast's divided by this.
const WEIGHT_SCALE: f64 = 100.0;

/// The Nacos record of `instance` (ephemeral: it lives with the
/// connection).
pub fn encode(instance: &ServiceInstance) -> NacosInstance {
    let mut metadata = instance.metadata.clone();
    dubbo_metadata(&mut metadata);
    if instance.id != format!("{}:{}", instance.host, instance.port) {
        metadata.insert(ID_KEY.to_string(), instance.id.clone());
    }
    NacosInstance {
        instance_id: None,
        ip: instance.host.clone(),
        port: i64::from(instance.port),
        weight: f64::from(instance.weight) / WEIGHT_SCALE,
        healthy: instance.healthy,
        enabled: true,
        ephemeral: true,
        cluster_name: Some("DEFAULT".to_string()),
        service_name: None,
        metadata,
    }
}

/// The Steadfast instance of app `app` a Nacos host record describes.
pub fn decode(app: &str, host: &str) -> Result<ServiceInstance, InvalidInstance> {
    let record: NacosInstance = serde_json::from_str(host)
        .map_err(|e| InvalidInstance::Shape(e.to_string().chars().take(120).collect()))?;
    let port = u16::try_from(record.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or(InvalidInstance::Port(record.port))?;
    if record.ip.trim().is_empty() {
        return Err(InvalidInstance::Ip);
    }
    if !record.weight.is_finite() || record.weight < 0.0 {
        return Err(InvalidInstance::Weight);
    }
    // Clamped and rounded: a float from the wire never overflows.
    let weight = (record.weight * WEIGHT_SCALE)
        .round()
        .min(f64::from(u32::MAX)) as u32;
    let mut metadata = record.metadata;
    adopt_dubbo_metadata(&mut metadata)?;
    let id = metadata
        .remove(ID_KEY)
        .unwrap_or_else(|| format!("{}:{}", record.ip, port));
    Ok(ServiceInstance {
        id,
        app: app.to_string(),
        host: record.ip,
        port,
        weight,
        healthy: record.healthy && record.enabled,
        metadata,
    })
}

#[cfg(test)]
mod tests;
