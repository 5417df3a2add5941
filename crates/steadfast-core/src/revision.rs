//! Metadata revisions in Dubbo's form, so that a Dubbo consumer and a
//! Steadfast one agree on what a revision names: the lower-case hex MD5 of
//! the app name followed by, for each service in match-key order,
//! `match key + port + path + {k1=v1, k2=v2}` (the params sorted by key and
//! written as Java's `TreeMap.toString` writes them). This is Java Dubbo
//! 3.x's `MetadataInfo.calAndGetRevision`; it reproduces the revisions of
//! real Java providers (see the tests). An app with no services has the
//! empty revision `"0"`.
//!
//! One normalisation goes beyond Java: the `methods` param is sorted
//! before hashing, so the order a provider lists its methods in never
//! changes its revision (Java providers always list them sorted, so their
//! revisions are unaffected). A revision is a content hash, not a secret:
//! MD5 is what Dubbo uses and what its tooling expects (32 hex digits).

use std::fmt::Write as _;

use md5::{Digest, Md5};

use crate::model::{ServiceInfo, EMPTY_REVISION};

/// Computes the revision of `app` exporting `services`.
pub fn compute_revision<'a>(
    app: &str,
    services: impl IntoIterator<Item = &'a ServiceInfo>,
) -> String {
    let mut described: Vec<(String, String)> = services
        .into_iter()
        .map(|s| (s.match_key(), describe(s)))
        .collect();
    if described.is_empty() {
        return EMPTY_REVISION.to_string();
    }
    described.sort_unstable();
    let mut h = Md5::new();
    h.update(app.as_bytes());
    for (_, desc) in &described {
        h.update(desc.as_bytes());
    }
    h.finalize()
        .iter()
        .fold(String::with_capacity(32), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Java's `ServiceInfo.toDescString`: `matchKey + port + path +
/// TreeMap(params).toString()`.
fn describe(service: &ServiceInfo) -> String {
    let mut s = format!("{}{}{}{{", service.match_key(), service.port, service.path);
    for (i, (k, v)) in service.params.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(k);
        s.push('=');
        if k == "methods" {
            let mut m: Vec<&str> = v.split(',').filter(|m| !m.is_empty()).collect();
            m.sort_unstable();
            s.push_str(&m.join(","));
        } else {
            s.push_str(v);
        }
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn service(
        name: &str,
        group: Option<&str>,
        version: Option<&str>,
        protocol: &str,
        port: u16,
        params: &[(&str, &str)],
    ) -> ServiceInfo {
        ServiceInfo {
            name: name.into(),
            group: group.map(Into::into),
            version: version.map(Into::into),
            protocol: protocol.into(),
            port,
            path: name.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    /// V0 of the interop notes: no services is the empty revision.
    #[test]
    fn v0_no_services_is_zero() {
        assert_eq!(compute_revision("any-app", []), "0");
    }

    /// V1 of the interop notes: the revision a real Java 3.1.4 provider
    /// wrote into its ZooKeeper record.
    #[test]
    fn v1_reproduces_a_real_java_provider() {
        let iface = "org.apache.dubbo.samples.api.GreetingsService";
        let s = service(
            iface,
            None,
            None,
            "dubbo",
            20880,
            &[
                ("anyhost", "true"),
                ("application", "first-dubbo-provider"),
                ("background", "false"),
                ("deprecated", "false"),
                ("dubbo", "2.0.2"),
                ("dynamic", "true"),
                ("environment", "product"),
                ("generic", "false"),
                ("interface", iface),
                ("methods", "sayHi"),
                ("release", "3.1.4"),
                ("service-name-mapping", "true"),
                ("side", "provider"),
            ],
        );
        assert_eq!(
            compute_revision("first-dubbo-provider", [&s]),
            "871fbc9cb2730caea9b0d858852d5ede"
        );
    }

    /// V2 of the interop notes (dubbo-go PR #3578's golden value): two
    /// services, one with a group, sorted by match key.
    #[test]
    fn v2_reproduces_the_go_golden_value() {
        let bar = service(
            "com.foo.Bar",
            None,
            Some("1.0.0"),
            "dubbo",
            20880,
            &[("timeout", "3000"), ("weight", "100")],
        );
        let baz = service(
            "com.foo.Baz",
            Some("g1"),
            Some("2.0.0"),
            "tri",
            50051,
            &[("cluster", "failfast")],
        );
        let want = "8ab6351c86cccf642be0a2cda8be847a";
        assert_eq!(compute_revision("dubbo-go-app", [&bar, &baz]), want);
        assert_eq!(compute_revision("dubbo-go-app", [&baz, &bar]), want);
    }

    #[test]
    fn method_order_and_service_order_do_not_matter() {
        let a = service("A", None, None, "tri", 1, &[("methods", "x,y")]);
        let b = service("B", None, None, "tri", 1, &[("methods", "y,x")]);
        let b2 = service("B", None, None, "tri", 1, &[("methods", "x,y")]);
        let r = compute_revision("app", [&a, &b]);
        assert_eq!(r, compute_revision("app", [&b2, &a]));
        assert_eq!(r.len(), 32);
        assert_ne!(compute_revision("other", [&a, &b]), r);
    }
}
