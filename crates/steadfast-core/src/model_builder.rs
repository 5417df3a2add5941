//! [`ServiceInfo::builder`] and [`ServiceInfo::http`]: describe an exported
//! service without a struct literal (see [`ServiceInfoBuilder`], which also
//! defines the three ports of an export).

use std::collections::BTreeMap;

use crate::model::ServiceInfo;

/// Builds a [`ServiceInfo`]: starts as protocol `http`, empty path, no
/// group, version or params. [`ServiceInfo::builder`] and
/// [`ServiceInfo::http`] describe an exported service without a struct
/// literal.
///
/// ```
/// use steadfast_core::ServiceInfo;
/// let greeter = ServiceInfo::http("demo.Greeter", 8080);          // http, path "", no params
/// let api = ServiceInfo::builder("demo.Api", 8443)
///     .protocol("https")
///     .path("api/v1")
///     .version("1.0")
///     .param("lang", "en")
///     .build();
/// assert_eq!(greeter.match_key(), "demo.Greeter:http");
/// assert_eq!(api.service_key(), "demo.Api:1.0");
/// ```
///
/// # Ports
///
/// Three ports appear in an export; this is the one place that defines them
/// (the other docs link here):
///
/// | port | set with | meaning |
/// |---|---|---|
/// | instance main port | `ExportSpec::new(app, host, port)` | names the instance: its registry record is `host:port` (the instance id), and it is the port of the instance's MetadataService unless `metadata_port` says otherwise. Nothing else is called on it. |
/// | metadata port | `ExportSpec::metadata_port(p)` (record key `steadfast.metadata.port`) | where consumers fetch the instance's MetadataInfo (the HTTP MetadataService), when it is not the main port. |
/// | service port | [`ServiceInfo::port`], here `builder(name, port)` | where THAT service listens: a consumer calls `host:service port` ([`ServiceUrl::to_http_url`](crate::ServiceUrl::to_http_url), `Caller`). One instance may export services on several ports. |
///
/// An actix-web app serving its routes and the MetadataService on one
/// listener uses the same number for all three.
#[derive(Clone, Debug)]
#[must_use]
pub struct ServiceInfoBuilder {
    info: ServiceInfo,
}

impl ServiceInfo {
    /// A builder of service `name` listening on `port` (the service port,
    /// see [the ports](crate::ServiceInfoBuilder#ports)).
    pub fn builder(name: impl Into<String>, port: u16) -> ServiceInfoBuilder {
        ServiceInfoBuilder {
            info: ServiceInfo {
                name: name.into(),
                group: None,
                version: None,
                protocol: "http".into(),
                port,
                path: String::new(),
                params: BTreeMap::new(),
            },
        }
    }

    /// Service `name` over plain HTTP on `port` at the root path, no group,
    /// version or params: what an actix-web route set exports.
    pub fn http(name: impl Into<String>, port: u16) -> ServiceInfo {
        Self::builder(name, port).build()
    }
}

impl ServiceInfoBuilder {
    /// The protocol (`http`, `https`, `tri`, ...; a reference matches it).
    pub fn protocol(mut self, protocol: impl Into<String>) -> Self {
        self.info.protocol = protocol.into();
        self
    }

    /// The URL path every call of the service goes under (`api/v1`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.info.path = path.into();
        self
    }

    /// The group.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.info.group = Some(group.into());
        self
    }

    /// The version.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.info.version = Some(version.into());
        self
    }

    /// The service port (overrides the one given to the builder).
    pub fn port(mut self, port: u16) -> Self {
        self.info.port = port;
        self
    }

    /// One param (non-internal ones go into every call's query, see
    /// [`crate::url_http`]).
    pub fn param(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.info.params.insert(key.into(), value.into());
        self
    }

    /// The finished service.
    pub fn build(self) -> ServiceInfo {
        self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_every_field_and_http_is_the_plain_default() {
        let s = ServiceInfo::builder("S", 1)
            .protocol("tri")
            .path("p")
            .group("g")
            .version("v")
            .port(2)
            .param("k", "v")
            .build();
        assert_eq!(
            s,
            ServiceInfo {
                name: "S".into(),
                group: Some("g".into()),
                version: Some("v".into()),
                protocol: "tri".into(),
                port: 2,
                path: "p".into(),
                params: [("k".to_string(), "v".to_string())].into(),
            }
        );
        let h = ServiceInfo::http("S", 80);
        assert_eq!(
            (h.protocol.as_str(), h.port, h.path.as_str()),
            ("http", 80, "")
        );
        assert!(h.params.is_empty() && h.group.is_none() && h.version.is_none());
    }
}
