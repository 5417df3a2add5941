//! Tests of the HTTP URLs of endpoints: fixed cases and a seeded random
//! round trip through the `url` crate's parser.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::model::{ServiceInfo, ServiceInstance};
use crate::url::ServiceUrl;
use crate::Incarnation;

fn endpoint(
    host: &str,
    protocol: &str,
    port: u16,
    path: &str,
    params: &[(&str, &str)],
) -> ServiceUrl {
    let mut svc = ServiceInfo::builder("demo.S", port)
        .protocol(protocol)
        .path(path)
        .group("g")
        .version("1.0");
    for (k, v) in params {
        svc = svc.param(*k, *v);
    }
    let mut inst = ServiceInstance::new("app", host, 9000);
    Incarnation {
        export_ms: 7,
        boot_id: "b1".into(),
        created: None,
    }
    .stamp(&mut inst.metadata);
    ServiceUrl::build(&inst, &svc.build())
}

#[test]
fn a_plain_endpoint_has_no_internal_params() {
    let u = endpoint(
        "10.0.0.1",
        "tri",
        8080,
        "demo.S",
        &[("methods", "a,b"), ("timestamp", "1")],
    );
    assert_eq!(u.to_http_url(), "http://10.0.0.1:8080/demo.S");
    assert!(
        u.to_string().contains("steadfast.boot-id"),
        "Display keeps them"
    );
}

#[test]
fn ipv6_https_path_and_query_are_encoded() {
    let u = endpoint(
        "::1",
        "HTTPS",
        443,
        "/api//v 1/",
        &[("lang", "en GB"), ("a&b", "c=d"), ("steadfast.x", "y")],
    );
    assert_eq!(
        u.to_http_url(),
        "https://[::1]:443/api/v%201?a%26b=c%3Dd&lang=en%20GB"
    );
    let zoned = endpoint("fe80::1%eth0", "http", 80, "", &[]);
    assert_eq!(zoned.to_http_url(), "http://[fe80::1%25eth0]:80/");
    let bracketed = endpoint("[::2]", "rest", 81, "x", &[]);
    assert_eq!(bracketed.to_http_url(), "http://[::2]:81/x");
}

#[test]
fn a_hostile_host_cannot_move_the_authority() {
    let u = endpoint("evil.com/x@good", "http", 80, "p", &[]);
    let url = u.to_http_url();
    assert_eq!(url, "http://evil.com%2Fx%40good:80/p");
    // Either refused or one opaque host: never `good` with a user `evil.com/x`.
    if let Ok(parsed) = url::Url::parse(&url) {
        assert_eq!(parsed.username(), "");
        assert_ne!(parsed.host_str(), Some("good"));
    }
}

#[test]
fn call_paths_join_under_the_service_path() {
    let u = endpoint("h", "http", 1, "api", &[("lang", "en")]);
    assert_eq!(
        u.http_url_for("/greet/ann"),
        "http://h:1/api/greet/ann?lang=en"
    );
    assert_eq!(
        u.http_url_for("greet?loud=1#top"),
        "http://h:1/api/greet?loud=1&lang=en"
    );
    assert_eq!(u.http_url_for(""), "http://h:1/api?lang=en");
    let root = endpoint("h", "http", 1, "", &[]);
    assert_eq!(root.http_url_for("/x?"), "http://h:1/x");
    assert_eq!(root.http_url_for("?q=1"), "http://h:1/?q=1");
}

/// A random string over an alphabet full of characters URLs treat specially.
fn random_text(rng: &mut StdRng, max: usize) -> String {
    const ALPHABET: &[char] = &[
        'a', 'Z', '0', '-', '.', '.', '.', '_', '~', ' ', '/', '?', '#', '&', '=', '%', '+', '@',
        ':', '[', ']', '\\', '"', 'é', '中', '\u{7f}', '\n',
    ];
    let n = rng.gen_range(1..=max);
    (0..n)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())])
        .collect()
}

#[test]
fn random_endpoints_round_trip_through_a_url_parser() {
    let mut rng = StdRng::seed_from_u64(10);
    for round in 0..500 {
        let host = match round % 3 {
            0 => format!(
                "10.{}.{}.{}",
                rng.gen::<u8>(),
                rng.gen::<u8>(),
                rng.gen::<u8>()
            ),
            1 => format!("fd00::{:x}", rng.gen::<u16>()),
            _ => format!("svc-{}.example", rng.gen_range(0..1000)),
        };
        let port = rng.gen_range(1..=u16::MAX);
        let segments: Vec<String> = (0..rng.gen_range(0..4))
            .map(|_| random_text(&mut rng, 6))
            .filter(|s| !s.contains('/'))
            .collect();
        let mut params = BTreeMap::new();
        for _ in 0..rng.gen_range(0..4) {
            params.insert(random_text(&mut rng, 5), random_text(&mut rng, 8));
        }
        params.insert("steadfast.metadata.port".to_string(), "1".to_string());
        let pairs: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let u = endpoint(&host, "tri", port, &segments.join("/"), &pairs);
        let text = u.to_http_url();
        let parsed = url::Url::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(parsed.scheme(), "http", "{text}");
        match host.parse::<std::net::Ipv6Addr>() {
            Ok(v6) => assert_eq!(parsed.host(), Some(url::Host::Ipv6(v6)), "{text}"),
            Err(_) => assert_eq!(parsed.host_str(), Some(host.as_str()), "{text}"),
        }
        assert_eq!(parsed.port_or_known_default(), Some(port), "{text}");
        let got: Vec<String> = parsed
            .path_segments()
            .map(|s| {
                s.filter(|s| !s.is_empty())
                    .map(|s| {
                        percent_encoding::percent_decode_str(s)
                            .decode_utf8_lossy()
                            .into_owned()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let want: Vec<String> = segments
            .iter()
            .filter(|s| !matches!(s.as_str(), "" | "." | ".."))
            .cloned()
            .collect();
        assert_eq!(got, want, "{text}");
        let query: BTreeMap<String, String> = parsed
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').expect("k=v");
                let dec = |s: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned()
                };
                (dec(k), dec(v))
            })
            .collect();
        let want: BTreeMap<String, String> = params
            .into_iter()
            .filter(|(k, _)| !super::is_internal_param(k))
            .collect();
        assert_eq!(query, want, "{text}");
    }
}
