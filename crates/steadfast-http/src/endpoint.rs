//! Where a metadata request goes: the base path rules shared by both sides,
//! and the URL of one revision on one instance, built from the registry
//! record's host and metadata port only.

use std::net::Ipv6Addr;

use reqwest::Url;
use steadfast_core::{FetchError, ServiceInstance};

/// Lenient normalisation used by the provider side: trims whitespace and
/// trailing `/`, adds a leading `/`; the root is `""`.
pub(crate) fn normalize_base_path(base_path: &str) -> String {
    let trimmed = base_path.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        String::new()
    } else if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    }
}

/// Strict parsing used by the consumer side: the non-empty segments of the
/// normalised base path, each made of unreserved URL characters only.
/// Returns `None` when a segment holds anything else.
pub(crate) fn base_segments(base_path: &str) -> Option<Vec<String>> {
    let normalized = normalize_base_path(base_path);
    let segments: Vec<String> = normalized
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let unreserved = |c: char| c.is_ascii_alphanumeric() || "-._~".contains(c);
    segments
        .iter()
        .all(|s| s.chars().all(unreserved) && s != "." && s != "..")
        .then_some(segments)
}

/// The host of `instance` as it goes into a URL, or why it is unusable.
fn url_host(instance: &ServiceInstance) -> Result<String, FetchError> {
    let host = instance.host.as_str();
    let bad = |why: &str| {
        FetchError::NoEndpoint(format!("instance {} has host {host:?}: {why}", instance.id))
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match inner.parse::<Ipv6Addr>() {
            Ok(_) => Ok(host.to_string()),
            Err(_) => Err(bad("not an IPv6 literal")),
        };
    }
    if host.parse::<Ipv6Addr>().is_ok() {
        return Ok(format!("[{host}]"));
    }
    if host.contains(':') {
        return Err(bad("host carries a port part"));
    }
    if host.contains('@') {
        return Err(bad("host carries user info"));
    }
    if host.contains('/') {
        return Err(bad("host carries a path"));
    }
    if host.chars().any(char::is_whitespace) {
        return Err(bad("host contains whitespace"));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
    {
        return Err(bad("host contains a character not allowed in a host name"));
    }
    Ok(host.to_string())
}

/// `http://{host}:{metadata port}` of `instance`'s MetadataService: the
/// registry record's host only (a plain host name or IP literal, never
/// user info, a path or a port part) and a non-zero port, else a final
/// [`FetchError::NoEndpoint`] saying why. Every fetcher that calls an
/// instance (HTTP, Triple) builds its origin here.
pub fn metadata_origin(instance: &ServiceInstance) -> Result<String, FetchError> {
    let host = url_host(instance)?;
    let port = instance.metadata_port();
    if port == 0 {
        return Err(FetchError::NoEndpoint(format!(
            "instance {} has metadata port 0",
            instance.id
        )));
    }
    Ok(format!("http://{host}:{port}"))
}

/// `http://{instance.host}:{instance.metadata_port()}{base}/metadata/{revision}`,
/// with the revision percent-encoded as one path segment.
pub(crate) fn metadata_url(
    instance: &ServiceInstance,
    base_segments: &[String],
    revision: &str,
) -> Result<Url, FetchError> {
    let origin = metadata_origin(instance)?;
    let host = &instance.host;
    let mut url = Url::parse(&format!("{origin}/")).map_err(|e| {
        FetchError::NoEndpoint(format!("instance {} has no valid URL: {e}", instance.id))
    })?;
    if url.path() != "/" || url.query().is_some() || !url.username().is_empty() {
        return Err(FetchError::NoEndpoint(format!(
            "instance {} host {host:?} does not form a plain http origin",
            instance.id
        )));
    }
    url.path_segments_mut()
        .map_err(|_| FetchError::NoEndpoint(format!("instance {} has no URL path", instance.id)))?
        .pop_if_empty()
        .extend(base_segments)
        .push("metadata")
        .push(revision);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(host: &str) -> ServiceInstance {
        let mut i = ServiceInstance::new("app", host, 8080);
        i.metadata
            .insert(steadfast_core::METADATA_PORT_KEY.into(), "9090".into());
        i
    }

    fn segs(p: &str) -> Vec<String> {
        base_segments(p).expect("valid base path")
    }

    #[test]
    fn base_paths_are_normalised() {
        assert_eq!(normalize_base_path("/steadfast"), "/steadfast");
        assert_eq!(normalize_base_path("steadfast/"), "/steadfast");
        assert_eq!(normalize_base_path(" /a/b// "), "/a/b");
        assert_eq!(normalize_base_path("/"), "");
        assert_eq!(normalize_base_path(""), "");
        assert_eq!(segs("/a/b/"), vec!["a", "b"]);
        assert!(segs("/").is_empty());
        assert_eq!(base_segments("/a?b"), None);
        assert_eq!(base_segments("/a b"), None);
        assert_eq!(base_segments("/../x"), None);
        assert_eq!(base_segments("/x%2F"), None);
    }

    #[test]
    fn url_uses_record_host_and_metadata_port() {
        let url = metadata_url(&inst("10.1.2.3"), &segs("/steadfast"), "abc").unwrap();
        assert_eq!(url.as_str(), "http://10.1.2.3:9090/steadfast/metadata/abc");
        let url = metadata_url(&inst("svc.local"), &segs(""), "r/1?x").unwrap();
        assert_eq!(url.as_str(), "http://svc.local:9090/metadata/r%2F1%3Fx");
        let url = metadata_url(&inst("::1"), &segs("/m"), "r").unwrap();
        assert_eq!(url.as_str(), "http://[::1]:9090/m/metadata/r");
        let url = metadata_url(&inst("[::1]"), &segs("/m"), "r").unwrap();
        assert_eq!(url.as_str(), "http://[::1]:9090/m/metadata/r");
    }

    #[test]
    fn unusable_hosts_are_no_endpoint() {
        for host in [
            "",
            "evil.example/x",
            "user@10.0.0.1",
            "10.0.0.1:80",
            "[::1]:80",
            "a b",
            "host\t",
            "a?b",
            "a#b",
            "a%2Fb",
            "a\\b",
            "[nope]",
        ] {
            match metadata_url(&inst(host), &[], "r") {
                Err(FetchError::NoEndpoint(_)) => {}
                other => panic!("host {host:?}: expected NoEndpoint, got {other:?}"),
            }
        }
    }

    #[test]
    fn metadata_port_zero_is_no_endpoint() {
        let mut i = inst("127.0.0.1");
        i.metadata
            .insert(steadfast_core::METADATA_PORT_KEY.into(), "0".into());
        assert!(matches!(
            metadata_url(&i, &[], "r"),
            Err(FetchError::NoEndpoint(_))
        ));
    }
}
