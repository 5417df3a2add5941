//! Endpoint URLs built from an instance's host and a [`ServiceInfo`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::incarnation::{BOOT_ID_KEY, EXPORT_MS_KEY};
use crate::model::{ServiceInfo, ServiceInstance};

/// One callable endpoint of one service on one instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceUrl {
    /// Protocol, e.g. `tri`.
    pub protocol: String,
    /// Host taken from the registry record (never from metadata params).
    pub host: String,
    /// Service port.
    pub port: u16,
    /// Service path.
    pub path: String,
    /// Id of the instance the URL belongs to.
    pub instance_id: String,
    /// Load-balancing weight of the instance.
    pub weight: u32,
    /// Service params plus the instance's incarnation.
    pub params: Arc<BTreeMap<String, String>>,
}

impl ServiceUrl {
    /// Builds the URL of `service` on `instance`.
    pub fn build(instance: &ServiceInstance, service: &ServiceInfo) -> Self {
        let mut params = service.params.clone();
        params.insert("interface".into(), service.name.clone());
        if let Some(g) = &service.group {
            params.insert("group".into(), g.clone());
        }
        if let Some(v) = &service.version {
            params.insert("version".into(), v.clone());
        }
        for key in [EXPORT_MS_KEY, BOOT_ID_KEY] {
            if let Some(v) = instance.metadata.get(key) {
                params.insert(key.into(), v.clone());
            }
        }
        Self {
            protocol: service.protocol.clone(),
            host: instance.host.clone(),
            port: service.port,
            path: service.path.clone(),
            instance_id: instance.id.clone(),
            weight: instance.weight,
            params: Arc::new(params),
        }
    }

    /// `host:port` of the endpoint.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl fmt::Display for ServiceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}:{}/{}",
            self.protocol, self.host, self.port, self.path
        )?;
        let mut sep = '?';
        for (k, v) in self.params.iter() {
            write!(f, "{sep}{k}={v}")?;
            sep = '&';
        }
        Ok(())
    }
}
