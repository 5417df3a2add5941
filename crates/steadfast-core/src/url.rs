//! Endpoint URLs built from an instance's host and a [`ServiceInfo`].
//!
//! A URL is split in two: the [`ServiceEndpoint`] (protocol, port, path and
//! params of one service at one revision) is built once and shared by every
//! instance of that revision; the per-instance part is just the host, id,
//! weight and incarnation. A directory of 100k endpoints therefore holds
//! 100k small records, not 100k copies of the same parameter map.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::balance::EndpointStats;
use crate::incarnation::{Incarnation, BOOT_ID_KEY, EXPORT_MS_KEY};
use crate::instance::{Instance, RevisionInterner};
use crate::model::{ServiceInfo, ServiceInstance};

/// The part of an endpoint shared by every instance of one revision.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceEndpoint {
    /// Protocol, e.g. `tri`.
    pub protocol: String,
    /// Service port.
    pub port: u16,
    /// Service path.
    pub path: String,
    /// Service params, plus `interface`, `group` and `version`.
    pub params: BTreeMap<String, String>,
}

impl ServiceEndpoint {
    /// The shared endpoint part of `service`.
    pub fn of(service: &ServiceInfo) -> Arc<Self> {
        let mut params = service.params.clone();
        params.insert("interface".into(), service.name.clone());
        if let Some(g) = &service.group {
            params.insert("group".into(), g.clone());
        }
        if let Some(v) = &service.version {
            params.insert("version".into(), v.clone());
        }
        Arc::new(Self {
            protocol: service.protocol.clone(),
            port: service.port,
            path: service.path.clone(),
            params,
        })
    }
}

/// One callable endpoint of one service on one instance: the decoded
/// registry record and the service's shared endpoint part, both shared (a
/// URL copies no string). Directories hold each URL once, as an
/// [`Endpoint`], and hand out clones of that handle.
///
/// A URL also carries its balancing statistics inline ([`EndpointStats`]:
/// in flight, latency and, once it failed, failures and ejection), carried
/// over by the directory when a new record of the same incarnation replaces
/// it. Equality, hashing and order ignore them.
pub struct ServiceUrl {
    /// The instance the URL belongs to (host, id, weight, incarnation).
    pub instance: Arc<Instance>,
    /// Protocol, port, path and params, shared with the other instances of
    /// the same revision.
    pub service: Arc<ServiceEndpoint>,
    /// Balancing statistics (32 bytes inline, no allocation of their own).
    stats: EndpointStats,
}

/// A URL and its statistics stay within 48 bytes (64 with `Arc`'s counts:
/// one cache line holds what a pick reads). Checked at compile time.
const _: () = assert!(std::mem::size_of::<ServiceUrl>() <= 48);

impl Clone for ServiceUrl {
    /// A copy with the statistics as they are (the estimate, the failure
    /// record shared), counting no call in flight.
    fn clone(&self) -> Self {
        Self {
            instance: self.instance.clone(),
            service: self.service.clone(),
            stats: self.stats.copied(),
        }
    }
}

impl fmt::Debug for ServiceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceUrl")
            .field("instance", &self.instance)
            .field("service", &self.service)
            .finish()
    }
}

impl PartialEq for ServiceUrl {
    fn eq(&self, other: &Self) -> bool {
        self.instance == other.instance && self.service == other.service
    }
}

impl Eq for ServiceUrl {}

impl Hash for ServiceUrl {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.instance.hash(state);
        self.service.hash(state);
    }
}

impl PartialOrd for ServiceUrl {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ServiceUrl {
    fn cmp(&self, other: &Self) -> Ordering {
        self.instance
            .cmp(&other.instance)
            .then_with(|| self.service.cmp(&other.service))
    }
}

/// A shared handle on one URL: what a directory holds and `select()`
/// returns (a clone is one reference-count increment).
pub type Endpoint = Arc<ServiceUrl>;

impl ServiceUrl {
    /// The URL of `endpoint` on `instance`.
    ///
    /// A service without a port (0, as a Dubbo provider may publish it)
    /// gets the instance's own: [`crate::derived_port`].
    pub fn new(instance: &Arc<Instance>, endpoint: &Arc<ServiceEndpoint>) -> Self {
        let service = if endpoint.port == 0 {
            let port = crate::derived_port(
                instance.extra(crate::DUBBO_ENDPOINTS_KEY),
                &endpoint.protocol,
                instance.port(),
            );
            Arc::new(ServiceEndpoint {
                port,
                ..ServiceEndpoint::clone(endpoint)
            })
        } else {
            endpoint.clone()
        };
        Self {
            instance: instance.clone(),
            service,
            stats: EndpointStats::default(),
        }
    }

    /// The balancing statistics.
    #[inline]
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Builds the URL of `service` on the owned record `instance`
    /// (decoding it and allocating its endpoint part; for tests and tools).
    pub fn build(instance: &ServiceInstance, service: &ServiceInfo) -> Self {
        let inst = Arc::new(Instance::decode(instance, &mut RevisionInterner::default()));
        Self::new(&inst, &ServiceEndpoint::of(service))
    }

    /// Host taken from the registry record (never from metadata params).
    pub fn host(&self) -> &str {
        self.instance.host()
    }

    /// Id of the instance the URL belongs to.
    pub fn instance_id(&self) -> &str {
        self.instance.id()
    }

    /// Load-balancing weight of the instance.
    pub fn weight(&self) -> u32 {
        self.instance.weight()
    }

    /// When and in which boot the instance was exported, if stamped.
    pub fn incarnation(&self) -> Option<&Incarnation> {
        self.instance.incarnation()
    }

    /// Protocol, e.g. `tri`.
    pub fn protocol(&self) -> &str {
        &self.service.protocol
    }

    /// Service port.
    pub fn port(&self) -> u16 {
        self.service.port
    }

    /// Service path.
    pub fn path(&self) -> &str {
        &self.service.path
    }

    /// A URL parameter: a service param, or the incarnation's
    /// `steadfast.export-ms` / `steadfast.boot-id`.
    pub fn param(&self, key: &str) -> Option<String> {
        match (key, self.incarnation()) {
            (EXPORT_MS_KEY, Some(inc)) => Some(inc.export_ms.to_string()),
            (BOOT_ID_KEY, Some(inc)) => Some(inc.boot_id.to_string()),
            _ => self.service.params.get(key).cloned(),
        }
    }

    /// `host:port` of the endpoint.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host(), self.service.port)
    }
}

impl fmt::Display for ServiceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.service;
        write!(f, "{}://{}:{}/{}", s.protocol, self.host(), s.port, s.path)?;
        let mut params: BTreeMap<&str, String> = s
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if let Some(inc) = self.incarnation() {
            params.insert(EXPORT_MS_KEY, inc.export_ms.to_string());
            params.insert(BOOT_ID_KEY, inc.boot_id.to_string());
        }
        let mut sep = '?';
        for (k, v) in params {
            write!(f, "{sep}{k}={v}")?;
            sep = '&';
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_the_endpoint_and_shows_the_incarnation() {
        let svc = ServiceInfo {
            name: "demo.S".into(),
            group: Some("g".into()),
            version: None,
            protocol: "tri".into(),
            port: 50051,
            path: "demo.S".into(),
            params: [("methods".to_string(), "a,b".to_string())].into(),
        };
        let mut inst = ServiceInstance::new("app", "10.0.0.1", 8080);
        Incarnation {
            export_ms: 7,
            boot_id: "b1".into(),
            created: None,
        }
        .stamp(&mut inst.metadata);
        let ep = ServiceEndpoint::of(&svc);
        let inst = Arc::new(Instance::decode(&inst, &mut RevisionInterner::default()));
        let (a, b) = (ServiceUrl::new(&inst, &ep), ServiceUrl::new(&inst, &ep));
        assert!(Arc::ptr_eq(&a.service, &b.service));
        assert_eq!(a.param("steadfast.boot-id").as_deref(), Some("b1"));
        assert_eq!(a.param("group").as_deref(), Some("g"));
        assert_eq!(
            a.to_string(),
            "tri://10.0.0.1:50051/demo.S?group=g&interface=demo.S&methods=a,b\
             &steadfast.boot-id=b1&steadfast.export-ms=7"
        );
        assert_eq!(a.address(), "10.0.0.1:50051");
    }
}
