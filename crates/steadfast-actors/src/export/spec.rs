//! What a provider exports, and how it becomes a [`MetadataInfo`] plus a
//! registry record.

use std::collections::BTreeMap;

use rand::Rng;
use steadfast_core::{
    Incarnation, MetadataInfo, ServiceInfo, ServiceInstance, DUBBO_ENDPOINTS_KEY,
    DUBBO_METADATA_PARAMS_KEY, DUBBO_META_VERSION_KEY, DUBBO_TIMESTAMP_KEY, METADATA_PORT_KEY,
    META_V2,
};

use super::in_flight::InFlight;
use crate::env::{EnvError, EnvVars};

pub use steadfast_core::CLOSING_KEY;

/// The variables [`ExportSpec::from_env`] reads.
pub const EXPORT_VARS: &[&str] = &["STEADFAST_EXPORT_HOST", "STEADFAST_EXPORT_PORT"];

/// The services one provider instance exports.
#[derive(Clone, Debug)]
pub struct ExportSpec {
    /// Provider application name.
    pub app: String,
    /// Host consumers reach the instance on.
    pub host: String,
    /// Main port of the instance.
    pub port: u16,
    /// Port of its MetadataService, when not the main port.
    pub metadata_port: Option<u16>,
    /// Load-balancing weight.
    pub weight: u32,
    /// Exported services.
    pub services: Vec<ServiceInfo>,
    /// Extra instance metadata.
    pub metadata: BTreeMap<String, String>,
    /// Whether the record also speaks Dubbo 3 (see [`ExportSpec::dubbo_triple`]).
    pub dubbo: bool,
    /// The in-flight tracker the export drains on shutdown: `None` makes a
    /// fresh one (reach it with `ExportHandle::in_flight`). Set it with
    /// [`ExportSpec::in_flight`] to build the server (and its middleware)
    /// before the export exists.
    pub in_flight: Option<InFlight>,
}

impl ExportSpec {
    /// An export of `app` on `host:port` with no service yet.
    pub fn new(app: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        Self {
            app: app.into(),
            host: host.into(),
            port,
            metadata_port: None,
            weight: 100,
            services: Vec::new(),
            metadata: BTreeMap::new(),
            dubbo: false,
            in_flight: None,
        }
    }

    /// Makes the export findable by Dubbo 3 consumers: the record carries
    /// Dubbo's metadata keys (`meta-v=2.0.0`,
    /// `dubbo.metadata-service.url-params` naming Triple on
    /// `metadata_port`, `dubbo.endpoints` with each service protocol's
    /// port, `timestamp`), and the MetadataService is announced at
    /// `metadata_port`, where the provider serves MetadataServiceV2 over
    /// Triple (`steadfast::dubbo::TripleMetadataServer` on the store it
    /// publishes to). The revision is Dubbo's MD5 form whatever this says.
    pub fn dubbo_triple(mut self, metadata_port: u16) -> Self {
        self.metadata_port = Some(metadata_port);
        self.dubbo = true;
        self
    }

    /// Uses `in_flight` as this export's tracker: the tracker the provider's
    /// server already counts requests with (e.g. through the actix-web
    /// middleware), created before the export so no `OnceLock` is needed.
    /// One tracker per export: a graceful shutdown closes it for good, and
    /// exporting with a tracker that is already closing is refused.
    pub fn in_flight(mut self, in_flight: InFlight) -> Self {
        self.in_flight = Some(in_flight);
        self
    }

    /// An export of `app` at the address this instance advertises, from
    /// the environment: the host is `STEADFAST_EXPORT_HOST`, else
    /// Kubernetes' `POD_IP` (neither set: [`EnvError::Missing`]); the port
    /// is `STEADFAST_EXPORT_PORT`, else `bound_port` (the port the server
    /// listens on; they differ behind a port mapping).
    pub fn from_env(app: impl Into<String>, bound_port: u16) -> Result<Self, EnvError> {
        Self::from_vars(app, bound_port, &EnvVars::new(|k| std::env::var(k).ok()))
    }

    /// As [`ExportSpec::from_env`], reading variables through `vars`.
    pub fn from_vars<F: Fn(&str) -> Option<String>>(
        app: impl Into<String>,
        bound_port: u16,
        vars: &EnvVars<F>,
    ) -> Result<Self, EnvError> {
        let host = vars
            .string("STEADFAST_EXPORT_HOST")
            .or_else(|| vars.string("POD_IP"))
            .ok_or(EnvError::Missing {
                var: "STEADFAST_EXPORT_HOST",
                what: "the address consumers reach this instance on (or POD_IP)",
            })?;
        let port = vars
            .number::<u16>("STEADFAST_EXPORT_PORT")?
            .unwrap_or(bound_port);
        Ok(Self::new(app, host.trim(), port))
    }

    /// Adds an HTTP service served on the instance's own port: the
    /// one-port shorthand for `.service(ServiceInfo::http(name, port))`.
    pub fn http_service(self, name: impl Into<String>) -> Self {
        let port = self.port;
        self.service(ServiceInfo::http(name, port))
    }

    /// Adds an exported service.
    pub fn service(mut self, service: ServiceInfo) -> Self {
        self.services.push(service);
        self
    }

    /// Sets the MetadataService port.
    pub fn metadata_port(mut self, port: u16) -> Self {
        self.metadata_port = Some(port);
        self
    }

    /// Sets the weight.
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }
}

/// Builds the metadata and the registry record of an export at `export_ms`.
///
/// The revision hashes only the service definitions (as Dubbo Java does: no
/// export timestamp, no pid), so N identical instances share one revision
/// and one metadata fetch per consumer, and a restart that deploys the same
/// definitions keeps its revision (already cached by every consumer). Boot
/// identity lives in the record's incarnation (export ms + random boot id),
/// which reaches every URL.
pub fn build_export(
    spec: &ExportSpec,
    export_ms: u64,
    rng: &mut impl Rng,
) -> (MetadataInfo, ServiceInstance) {
    let info = MetadataInfo::new(spec.app.clone(), spec.services.iter().cloned());
    let mut instance = ServiceInstance::new(spec.app.clone(), spec.host.clone(), spec.port);
    instance.weight = spec.weight;
    instance.metadata.extend(spec.metadata.clone());
    instance.set_revision(info.revision.clone());
    if let Some(p) = spec.metadata_port {
        instance
            .metadata
            .insert(METADATA_PORT_KEY.to_string(), p.to_string());
    }
    if spec.dubbo {
        dubbo_keys(spec, export_ms, &mut instance.metadata);
    }
    Incarnation::new(export_ms, rng).stamp(&mut instance.metadata);
    (info, instance)
}

/// Dubbo 3's record keys of an export (see [`ExportSpec::dubbo_triple`]).
fn dubbo_keys(spec: &ExportSpec, export_ms: u64, meta: &mut BTreeMap<String, String>) {
    let port = spec.metadata_port.unwrap_or(spec.port);
    let params = serde_json::json!({
        "port": port.to_string(),
        "protocol": "tri",
        "version": "2.0.0",
        "side": "provider",
    });
    meta.insert(DUBBO_METADATA_PARAMS_KEY.into(), params.to_string());
    let mut endpoints: Vec<(&str, u16)> = spec
        .services
        .iter()
        .map(|s| (s.protocol.as_str(), s.port))
        .collect();
    endpoints.sort_unstable();
    endpoints.dedup_by(|a, b| a.0 == b.0);
    let endpoints: Vec<serde_json::Value> = endpoints
        .into_iter()
        .map(|(protocol, port)| serde_json::json!({ "port": port, "protocol": protocol }))
        .collect();
    meta.insert(
        DUBBO_ENDPOINTS_KEY.into(),
        serde_json::Value::from(endpoints).to_string(),
    );
    meta.insert(DUBBO_META_VERSION_KEY.into(), META_V2.into());
    meta.insert(DUBBO_TIMESTAMP_KEY.into(), export_ms.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn spec() -> ExportSpec {
        ExportSpec::new("app", "127.0.0.1", 9000)
            .metadata_port(9001)
            .service(ServiceInfo {
                name: "S".into(),
                group: None,
                version: None,
                protocol: "tri".into(),
                port: 9000,
                path: "S".into(),
                params: Default::default(),
            })
    }

    #[test]
    fn a_restart_keeps_its_revision_and_gets_a_new_incarnation() {
        let mut rng = StdRng::seed_from_u64(1);
        let (m1, i1) = build_export(&spec(), 1000, &mut rng);
        let (m2, i2) = build_export(&spec(), 2000, &mut rng);
        assert_eq!(m1.revision, m2.revision, "no boot time in the revision");
        assert_eq!(m1, m2, "identical definitions, identical metadata");
        let mut changed = spec();
        changed.services[0]
            .params
            .insert("methods".into(), "greet,farewell".into());
        let (m3, _) = build_export(&changed, 3000, &mut rng);
        assert_ne!(
            m3.revision, m1.revision,
            "a changed definition is a new revision"
        );
        assert_eq!(i1.revision(), Some(m1.revision.as_str()));
        assert_eq!(i1.metadata_port(), 9001);
        let (a, b) = (i1.incarnation().unwrap(), i2.incarnation().unwrap());
        assert_eq!((a.export_ms, b.export_ms), (1000, 2000));
        assert_ne!(a.boot_id, b.boot_id);
    }

    #[test]
    fn a_dubbo_export_carries_dubbos_keys_and_reads_back_as_one() {
        let mut rng = StdRng::seed_from_u64(1);
        let (info, mut inst) = build_export(&spec().dubbo_triple(9002), 1000, &mut rng);
        assert_eq!(inst.metadata_port(), 9002);
        assert_eq!(inst.metadata["meta-v"], "2.0.0");
        assert_eq!(inst.metadata["timestamp"], "1000");
        let service = steadfast_core::metadata_service(&inst.metadata)
            .unwrap()
            .unwrap();
        assert_eq!(
            (service.protocol.as_str(), service.port),
            ("tri", Some(9002))
        );
        let endpoints = steadfast_core::dubbo_endpoints(&inst.metadata).unwrap();
        assert_eq!(endpoints.len(), 1);
        assert_eq!(
            (endpoints[0].protocol.as_str(), endpoints[0].port),
            ("tri", 9000)
        );
        // Read back as a Dubbo record (Steadfast's own keys win).
        steadfast_core::dubbo_metadata(&mut inst.metadata);
        steadfast_core::adopt_dubbo_metadata(&mut inst.metadata).unwrap();
        assert_eq!(inst.revision(), Some(info.revision.as_str()));
        assert_eq!(inst.incarnation().unwrap().export_ms, 1000);
        assert_eq!(info.revision.len(), 32, "Dubbo's MD5 form");
    }
}
