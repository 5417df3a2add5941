//! Builders for the model types, so tests read as intent rather than
//! struct literals: [`InstanceBuilder`] for registry records,
//! [`MetadataBuilder`] for the metadata a provider serves, and
//! [`instance_for`] to tie the two together.

use std::collections::BTreeMap;

use steadfast_core::METADATA_PORT_KEY;
use steadfast_core::{Incarnation, MetadataInfo, ServiceInfo, ServiceInstance};

/// Builds a [`ServiceInstance`]; starts as [`ServiceInstance::new`] does:
/// id `host:port`, healthy, weight 100, no metadata.
#[derive(Clone, Debug)]
#[must_use]
pub struct InstanceBuilder {
    instance: ServiceInstance,
}

impl InstanceBuilder {
    /// Starts an instance of `app` at `host:port`.
    pub fn new(app: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        Self {
            instance: ServiceInstance::new(app, host, port),
        }
    }

    /// Overrides the instance id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.instance.id = id.into();
        self
    }

    /// Sets the load-balancing weight.
    pub fn weight(mut self, weight: u32) -> Self {
        self.instance.weight = weight;
        self
    }

    /// Sets the registry health flag.
    pub fn healthy(mut self, healthy: bool) -> Self {
        self.instance.healthy = healthy;
        self
    }

    /// Sets the advertised metadata revision.
    pub fn revision(mut self, revision: impl Into<String>) -> Self {
        self.instance.set_revision(revision);
        self
    }

    /// Sets the port of the instance's MetadataService.
    pub fn metadata_port(mut self, port: u16) -> Self {
        self.instance
            .metadata
            .insert(METADATA_PORT_KEY.to_string(), port.to_string());
        self
    }

    /// Sets one free-form metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.instance.metadata.insert(key.into(), value.into());
        self
    }

    /// Stamps the incarnation (export time in ms, boot id).
    pub fn incarnation(mut self, export_ms: u64, boot_id: impl Into<String>) -> Self {
        Incarnation {
            export_ms,
            boot_id: boot_id.into().into(),
            created: None,
        }
        .stamp(&mut self.instance.metadata);
        self
    }

    /// The finished instance.
    pub fn build(self) -> ServiceInstance {
        self.instance
    }
}

/// Builds a [`MetadataInfo`] service by service; the revision is computed by
/// [`MetadataInfo::new`] at [`build`](Self::build).
#[derive(Clone, Debug)]
#[must_use]
pub struct MetadataBuilder {
    app: String,
    services: Vec<ServiceInfo>,
}

impl MetadataBuilder {
    /// Starts the metadata of `app`, with no service.
    pub fn new(app: impl Into<String>) -> Self {
        Self {
            app: app.into(),
            services: Vec::new(),
        }
    }

    /// Adds service `interface` exported with `protocol` on `port`: path is
    /// the interface name, no group or version, params `methods=invoke`.
    pub fn service(
        self,
        interface: impl Into<String>,
        protocol: impl Into<String>,
        port: u16,
    ) -> Self {
        let name = interface.into();
        let mut params = BTreeMap::new();
        params.insert("methods".to_string(), "invoke".to_string());
        self.service_info(ServiceInfo {
            path: name.clone(),
            name,
            group: None,
            version: None,
            protocol: protocol.into(),
            port,
            params,
        })
    }

    /// Adds a fully specified service.
    pub fn service_info(mut self, info: ServiceInfo) -> Self {
        self.services.push(info);
        self
    }

    /// Sets a parameter of the last added service.
    ///
    /// # Panics
    /// When no service was added yet.
    pub fn param(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.last().params.insert(key.into(), value.into());
        self
    }

    /// Sets the group of the last added service.
    ///
    /// # Panics
    /// When no service was added yet.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.last().group = Some(group.into());
        self
    }

    /// Sets the version of the last added service.
    ///
    /// # Panics
    /// When no service was added yet.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.last().version = Some(version.into());
        self
    }

    fn last(&mut self) -> &mut ServiceInfo {
        self.services
            .last_mut()
            .expect("MetadataBuilder: add a service before setting its fields")
    }

    /// The finished metadata, with its computed revision. Services with the
    /// same match key collapse to the last one added.
    pub fn build(self) -> MetadataInfo {
        MetadataInfo::new(self.app, self.services)
    }
}

/// An instance of `info.app` at `host:port` advertising `info.revision`.
pub fn instance_for(info: &MetadataInfo, host: impl Into<String>, port: u16) -> ServiceInstance {
    InstanceBuilder::new(info.app.clone(), host, port)
        .revision(info.revision.clone())
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use steadfast_core::EMPTY_REVISION;

    #[test]
    fn instance_builder_sets_every_field() {
        let i = InstanceBuilder::new("app", "10.0.0.1", 8080)
            .id("custom")
            .weight(5)
            .healthy(false)
            .revision("r1")
            .metadata_port(9090)
            .metadata("zone", "eu")
            .incarnation(1234, "boot-a")
            .build();
        assert_eq!(i.id, "custom");
        assert_eq!(
            (i.app.as_str(), i.host.as_str(), i.port),
            ("app", "10.0.0.1", 8080)
        );
        assert_eq!(i.weight, 5);
        assert!(!i.healthy);
        assert_eq!(i.revision(), Some("r1"));
        assert_eq!(i.metadata_port(), 9090);
        assert_eq!(i.metadata.get("zone").map(String::as_str), Some("eu"));
        assert_eq!(
            i.incarnation(),
            Some(Incarnation {
                export_ms: 1234,
                boot_id: "boot-a".into(),
                created: None,
            })
        );
    }

    #[test]
    fn instance_builder_defaults_match_service_instance_new() {
        let built = InstanceBuilder::new("app", "h", 1).build();
        assert_eq!(built, ServiceInstance::new("app", "h", 1));
        assert_eq!(built.id, "h:1");
        assert!(built.is_serving());
    }

    #[test]
    fn metadata_builder_builds_services_with_defaults() {
        let info = MetadataBuilder::new("app")
            .service("com.example.Greeter", "tri", 50051)
            .service("com.example.Other", "http", 80)
            .param("timeout", "3s")
            .group("g")
            .version("1.0")
            .build();
        assert_eq!(info.app, "app");
        assert_eq!(info.services.len(), 2);
        let greeter = &info.services["com.example.Greeter:tri"];
        assert_eq!(greeter.path, "com.example.Greeter");
        assert_eq!(greeter.port, 50051);
        assert_eq!(greeter.params["methods"], "invoke");
        assert!(!greeter.params.contains_key("timeout"));
        let other = &info.services["g/com.example.Other:1.0:http"];
        assert_eq!(other.params["timeout"], "3s");
        assert_eq!(other.params["methods"], "invoke");
    }

    #[test]
    fn metadata_builder_revision_is_computed_and_content_sensitive() {
        let a = MetadataBuilder::new("app").service("S", "tri", 1).build();
        let same = MetadataBuilder::new("app").service("S", "tri", 1).build();
        let other = MetadataBuilder::new("app")
            .service("S", "tri", 1)
            .param("methods", "invoke,close")
            .build();
        assert_eq!(a.revision, same.revision);
        assert_ne!(a.revision, other.revision);
        assert_ne!(a.revision, EMPTY_REVISION);
        assert_eq!(MetadataBuilder::new("app").build().revision, EMPTY_REVISION);
    }

    #[test]
    fn service_info_is_taken_as_is() {
        let svc = ServiceInfo {
            name: "S".into(),
            group: None,
            version: None,
            protocol: "tri".into(),
            port: 7,
            path: "custom/path".into(),
            params: BTreeMap::new(),
        };
        let info = MetadataBuilder::new("app")
            .service_info(svc.clone())
            .build();
        assert_eq!(info.services["S:tri"], svc);
    }

    #[test]
    #[should_panic(expected = "add a service")]
    fn param_without_service_panics() {
        let _ = MetadataBuilder::new("app").param("k", "v");
    }

    #[test]
    fn instance_for_advertises_the_revision() {
        let info = MetadataBuilder::new("app").service("S", "tri", 1).build();
        let i = instance_for(&info, "h", 2);
        assert_eq!(i.app, "app");
        assert_eq!(i.id, "h:2");
        assert_eq!(i.revision(), Some(info.revision.as_str()));
    }
}
