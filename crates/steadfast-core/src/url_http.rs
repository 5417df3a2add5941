//! The HTTP URL of an endpoint: [`ServiceUrl::to_http_url`] and
//! [`ServiceUrl::http_url_for`], what a caller sends its requests to.
//! `ServiceUrl`'s `Display` is a diagnostic form (unencoded, with the
//! internal parameters); these are the URLs to call.
//!
//! - **scheme**: `https` when the service's protocol is `https` (any case),
//!   otherwise `http`: `http`, `tri`, `rest`, `grpc`, `h2c`, ... are all
//!   spoken over plain HTTP by this crate's callers. A TLS service is
//!   exported with protocol `https`.
//! - **host**: the registry record's host (never a metadata param); an IPv6
//!   address is put in brackets (a zone's `%` as `%25`); any character of
//!   a name that is not `A-Z a-z 0-9 - . _ ~` is percent-encoded, so a
//!   hostile host can never move the authority (`evil.com/x@` stays one
//!   invalid name, it cannot become user info or a path).
//! - **port**: the service's port ([`ServiceInfo::port`](crate::ServiceInfo),
//!   see [the ports](crate::ServiceInfoBuilder#ports)).
//! - **path**: the service path, each segment percent-encoded, empty,
//!   `.` and `..` segments dropped (a record cannot walk the path up); the
//!   URL ends with `/` when the path is empty.
//! - **query**: the service params, keys and values percent-encoded
//!   (everything but `A-Z a-z 0-9 - . _ ~`), in key order, WITHOUT the
//!   internal ones ([`is_internal_param`]): every `steadfast.*` key (revision,
//!   incarnation, metadata port, closing flag) and the discovery
//!   descriptors `interface`, `group`, `version`, `methods`, `timestamp`
//!   and `pid`, which describe the service to the registry and mean nothing
//!   to an HTTP handler.

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::url::ServiceUrl;

/// Everything but the unreserved characters of RFC 3986.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Service params that never go into an HTTP URL (see the module docs).
pub const INTERNAL_PARAMS: [&str; 6] = [
    "interface",
    "group",
    "version",
    "methods",
    "timestamp",
    "pid",
];

/// Whether the service param `key` is internal: a `steadfast.*` key or one
/// of [`INTERNAL_PARAMS`].
pub fn is_internal_param(key: &str) -> bool {
    key.starts_with("steadfast.") || INTERNAL_PARAMS.contains(&key)
}

impl ServiceUrl {
    /// The URL to call this endpoint at: scheme, host, port, path and the
    /// percent-encoded query of its non-internal params (see the module
    /// docs for every rule), e.g. `http://[::1]:8080/api/v1?lang=en%20GB`.
    pub fn to_http_url(&self) -> String {
        let mut url = self.http_origin_and_path();
        push_query(&mut url, self, false);
        url
    }

    /// The URL of `call` under this endpoint: the service path, then
    /// `call` (its leading `/` trimmed; its own `?query` kept as given, a
    /// `#fragment` dropped), then the service's query as in
    /// [`ServiceUrl::to_http_url`]. `call` is a path the caller wrote
    /// (`"greet/ann?loud=1"`); its characters are not re-encoded, so encode
    /// user input that goes into it.
    pub fn http_url_for(&self, call: &str) -> String {
        let call = call.split('#').next().unwrap_or_default();
        let (path, query) = match call.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (call, None),
        };
        let mut url = self.http_origin_and_path();
        let path = path.trim_start_matches('/');
        if !path.is_empty() {
            if !url.ends_with('/') {
                url.push('/');
            }
            url.push_str(path);
        }
        let mut has_query = false;
        if let Some(q) = query.filter(|q| !q.is_empty()) {
            url.push('?');
            url.push_str(q);
            has_query = true;
        }
        push_query(&mut url, self, has_query);
        url
    }

    /// `scheme://host:port/path` (no query).
    fn http_origin_and_path(&self) -> String {
        let scheme = if self.protocol().eq_ignore_ascii_case("https") {
            "https"
        } else {
            "http"
        };
        let mut url = format!("{scheme}://");
        push_host(&mut url, self.host());
        let _ = write!(url, ":{}/", self.port());
        let mut first = true;
        let segments = self.path().split('/');
        for segment in segments.filter(|s| !matches!(*s, "" | "." | "..")) {
            if !first {
                url.push('/');
            }
            first = false;
            url.extend(utf8_percent_encode(segment, COMPONENT));
        }
        url
    }
}

/// Appends the host: bracketed IPv6, else a percent-encoded name.
fn push_host(url: &mut String, host: &str) {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let (addr, zone) = match bare.split_once('%') {
        Some((a, z)) => (a, Some(z)),
        None => (bare, None),
    };
    if addr.parse::<Ipv6Addr>().is_ok() {
        url.push('[');
        url.push_str(addr);
        if let Some(zone) = zone {
            url.push_str("%25");
            url.extend(utf8_percent_encode(zone, COMPONENT));
        }
        url.push(']');
    } else {
        url.extend(utf8_percent_encode(host, COMPONENT));
    }
}

/// Appends `?k=v&...` (or `&k=v...` after an existing query) of the
/// endpoint's non-internal params.
fn push_query(url: &mut String, endpoint: &ServiceUrl, mut has_query: bool) {
    for (k, v) in &endpoint.service.params {
        if is_internal_param(k) {
            continue;
        }
        url.push(if has_query { '&' } else { '?' });
        has_query = true;
        url.extend(utf8_percent_encode(k, COMPONENT));
        url.push('=');
        url.extend(utf8_percent_encode(v, COMPONENT));
    }
}

#[cfg(test)]
mod tests;
