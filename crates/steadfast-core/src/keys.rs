//! Service keys, match keys and references. One function derives the
//! subscribe key of a reference; subscribe and unsubscribe both use it.

use serde::{Deserialize, Serialize};

/// Builds a service key `[group/]interface[:version]`; empty parts are left out.
pub fn service_key(interface: &str, group: Option<&str>, version: Option<&str>) -> String {
    let mut key = String::with_capacity(interface.len() + 16);
    if let Some(g) = group.filter(|g| !g.is_empty()) {
        key.push_str(g);
        key.push('/');
    }
    key.push_str(interface);
    if let Some(v) = version.filter(|v| !v.is_empty()) {
        key.push(':');
        key.push_str(v);
    }
    key
}

/// Builds a match key: service key + `:` + protocol.
pub fn match_key(service_key: &str, protocol: &str) -> String {
    format!("{service_key}:{protocol}")
}

/// What a consumer subscribes to: a service (interface, group, version,
/// protocol) and the provider apps that serve it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reference {
    /// Interface name.
    pub interface: String,
    /// Optional group.
    pub group: Option<String>,
    /// Optional version.
    pub version: Option<String>,
    /// Protocol to call with.
    pub protocol: String,
    /// Provider applications that serve the interface (sorted, deduplicated).
    pub apps: Vec<String>,
}

impl Reference {
    /// A reference to `interface` over `protocol`, served by `apps`.
    pub fn new<I, S>(interface: impl Into<String>, protocol: impl Into<String>, apps: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut apps: Vec<String> = apps.into_iter().map(Into::into).collect();
        apps.sort();
        apps.dedup();
        Self {
            interface: interface.into(),
            group: None,
            version: None,
            protocol: protocol.into(),
            apps,
        }
    }

    /// Sets the group.
    pub fn with_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Sets the version.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// The subscribe key: the match key of the service this reference names.
    /// Subscribe and unsubscribe both derive their key here.
    pub fn subscribe_key(&self) -> String {
        let sk = service_key(
            &self.interface,
            self.group.as_deref(),
            self.version.as_deref(),
        );
        match_key(&sk, &self.protocol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_leave_out_empty_parts() {
        assert_eq!(service_key("a.B", None, None), "a.B");
        assert_eq!(service_key("a.B", Some("g"), Some("1.0")), "g/a.B:1.0");
        assert_eq!(service_key("a.B", Some(""), Some("")), "a.B");
        let r = Reference::new("a.B", "tri", ["x", "x"]).with_group("g");
        assert_eq!(r.subscribe_key(), "g/a.B:tri");
        assert_eq!(r.apps, vec!["x".to_string()]);
    }
}
