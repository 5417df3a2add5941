//! Configuration from documents and the environment: a deserialized config
//! is what the started engine runs with, bad values are refused with typed
//! errors naming them, and `STEADFAST_REGISTRY=etcd://...` drives a real
//! etcd under the configured prefix.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use steadfast::{
    ConfigError, Engine, EngineConfig, EngineError, EnvError, EnvVars, FromEnvError,
    RegistryChoice, SteadfastConfig,
};

fn vars(pairs: &[(&str, &str)]) -> EnvVars<impl Fn(&str) -> Option<String>> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    EnvVars::new(move |k: &str| map.get(k).cloned())
}

#[actix_rt::test]
async fn the_builder_runs_with_a_deserialized_config() {
    let config: EngineConfig = serde_json::from_str(
        r#"{ "seed": 7, "caller": { "tombstone_ttl": "7s", "strategy": "round_robin" } }"#,
    )
    .unwrap();
    let engine = Engine::builder().config(config).start().unwrap();
    let caller = engine.caller_config();
    assert_eq!(caller.tombstone_ttl, Duration::from_secs(7));
    assert_eq!(caller.strategy, steadfast::Strategy::RoundRobin);
    engine.shutdown().await;

    let bad: EngineConfig = serde_json::from_str(r#"{ "fetch_fanout": 0 }"#).unwrap();
    match Engine::builder().config(bad).start() {
        Err(EngineError::InvalidConfig(ConfigError::Zero { field })) => {
            assert_eq!(field, "fetch_fanout")
        }
        other => panic!("expected a refused fanout, got {:?}", other.err()),
    }
}

#[actix_rt::test]
async fn a_config_document_and_variables_on_top_configure_the_engine() {
    let dir = std::env::temp_dir().join(format!("steadfast-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("steadfast.json");
    std::fs::write(
        &file,
        r#"{ "registry": "memory",
             "engine": { "caller": { "tombstone_ttl": "9s", "min_probe_interval": "2s" } } }"#,
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_CONFIG", path),
        ("STEADFAST_TOMBSTONE_TTL", "3s"),
        ("STEADFAST_SEED", "11"),
    ]))
    .unwrap();
    assert_eq!(c.registry, Some(RegistryChoice::Memory));
    assert_eq!(
        c.engine.caller.tombstone_ttl,
        Duration::from_secs(3),
        "env wins"
    );
    assert_eq!(c.engine.caller.min_probe_interval, Duration::from_secs(2));
    assert_eq!(c.engine.seed, 11);
    let engine = c.builder().unwrap().start().unwrap();
    assert_eq!(engine.caller_config().tombstone_ttl, Duration::from_secs(3));
    assert_eq!(
        engine.caller_config().min_probe_interval,
        Duration::from_secs(2)
    );
    engine.shutdown().await;

    std::fs::write(&file, r#"{ "engine": { "fetch_timeot": "1s" } }"#).unwrap();
    match SteadfastConfig::from_vars(&vars(&[("STEADFAST_CONFIG", path)])) {
        Err(FromEnvError::Parse { source, .. }) => {
            assert!(source.to_string().contains("fetch_timeot"), "{source}")
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
    let missing = dir.join("absent.json");
    assert!(matches!(
        SteadfastConfig::from_vars(&vars(&[("STEADFAST_CONFIG", missing.to_str().unwrap())])),
        Err(FromEnvError::File { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_variables_are_refused_with_typed_errors() {
    match SteadfastConfig::from_vars(&vars(&[("STEADFAST_REGISTRY", "zookeeper://h:1")])) {
        Err(FromEnvError::Registry(bad)) => assert_eq!(bad.0, "zookeeper://h:1"),
        other => panic!("expected a refused registry, got {other:?}"),
    }
    match SteadfastConfig::from_vars(&vars(&[("STEADFAST_REGISTRY_CALL_TIMEOUT", "later")])) {
        Err(FromEnvError::Var(EnvError::Invalid { var, .. })) => {
            assert_eq!(var, "STEADFAST_REGISTRY_CALL_TIMEOUT")
        }
        other => panic!("expected a refused duration, got {other:?}"),
    }
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_REGISTRY", "memory"),
        ("STEADFAST_FETCH_TIMEOUT", "0s"),
    ]))
    .unwrap();
    assert!(matches!(
        c.builder(),
        Err(FromEnvError::Engine(ConfigError::Duration {
            field: "fetch_timeout",
            ..
        }))
    ));
}

#[test]
fn registry_urls_parse_into_member_lists_and_print_back() {
    let r: RegistryChoice = "etcd://10.0.0.1:2379, 10.0.0.2:2379".parse().unwrap();
    assert_eq!(
        r,
        RegistryChoice::Etcd(vec![
            "http://10.0.0.1:2379".into(),
            "http://10.0.0.2:2379".into()
        ])
    );
    assert_eq!(r.to_string(), "etcd://10.0.0.1:2379,10.0.0.2:2379");
    let s: RegistryChoice = "etcds://e:2379".parse().unwrap();
    assert_eq!(s, RegistryChoice::Etcd(vec!["https://e:2379".into()]));
    assert_eq!(
        " MEMORY ".parse::<RegistryChoice>(),
        Ok(RegistryChoice::Memory)
    );
    for bad in [
        "etcd://",
        "etcd://host",
        "etcd://h:99999",
        "etcd://:1",
        "h:1",
        "",
    ] {
        assert!(bad.parse::<RegistryChoice>().is_err(), "{bad:?} refused");
    }
    let c: SteadfastConfig = serde_json::from_str(r#"{ "registry": "etcd://h:1" }"#).unwrap();
    assert_eq!(
        c.registry,
        Some(RegistryChoice::Etcd(vec!["http://h:1".into()]))
    );
    assert!(serde_json::from_str::<SteadfastConfig>(r#"{ "registry": "etcd://h" }"#).is_err());
}

#[cfg(not(feature = "etcd"))]
#[test]
fn an_etcd_registry_needs_the_etcd_feature() {
    let c = SteadfastConfig::from_vars(&vars(&[("STEADFAST_REGISTRY", "etcd://h:1")])).unwrap();
    assert!(matches!(
        c.builder(),
        Err(FromEnvError::FeatureOff {
            feature: "etcd",
            ..
        })
    ));
}

#[cfg(feature = "http")]
#[test]
fn http_fetcher_variables_are_checked() {
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_HTTP_TIMEOUT", "750ms"),
        ("STEADFAST_HTTP_MAX_BODY_BYTES", "4096"),
    ]))
    .unwrap();
    assert_eq!(c.fetcher.timeout, Duration::from_millis(750));
    assert_eq!(c.fetcher.max_body_bytes, 4096);
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_REGISTRY", "memory"),
        ("STEADFAST_HTTP_CONNECT_TIMEOUT", "0s"),
    ]))
    .unwrap();
    assert!(matches!(c.builder(), Err(FromEnvError::Fetcher(_))));
}

/// Without the `http` feature an engine given no fetcher still starts; its
/// revisions stay unresolved and say why.
#[cfg(not(feature = "http"))]
#[actix_rt::test]
async fn without_http_an_engine_with_no_fetcher_says_why_its_revisions_are_unresolved() {
    use steadfast::{MemoryRegistry, Reference, Registry, ServiceInstance};
    // Everything in process: virtual time.
    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .seed(7)
        .start()
        .unwrap();
    let mut inst = ServiceInstance::new("greeter", "127.0.0.1", 20000);
    inst.set_revision("r1");
    registry.register(inst).await.unwrap();
    let dir = engine
        .subscribe(Reference::new("demo.Greeter", "tri", ["greeter"]))
        .await
        .unwrap();
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = dir.status().await.unwrap().to_string();
        if status.contains("no metadata fetcher configured") {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "status: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.shutdown().await;
}

#[cfg(feature = "etcd")]
#[actix_rt::test]
async fn steadfast_registry_etcd_registers_under_the_configured_prefix() {
    use steadfast_etcd::harness::{unique_prefix, EtcdServer};
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let endpoint = etcd.endpoint();
    let host_port = endpoint.trim_start_matches("http://");
    let prefix = unique_prefix();
    let url = format!("etcd://{host_port}");
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_REGISTRY", &url),
        ("STEADFAST_ETCD_PREFIX", &prefix),
        ("STEADFAST_ETCD_LEASE_TTL", "5s"),
    ]))
    .unwrap();
    assert_eq!(c.etcd.prefix, prefix);
    assert_eq!(c.etcd.lease_ttl, Duration::from_secs(5));
    let built = c.build().unwrap();
    let steadfast::ConfiguredRegistry::Etcd(handle) = built.registry.clone() else {
        panic!("an etcd registry");
    };
    let engine = built
        .builder
        .fetcher(steadfast_testkit::ScriptedFetcher::new())
        .start()
        .unwrap();
    let inst = steadfast::ServiceInstance::new("greeter", "127.0.0.1", 20001);
    engine.register(inst.clone()).await.unwrap();
    // The engine says which registry it uses, and the handle reads it
    // (under the configured prefix).
    let backend = engine.inspect().await.unwrap().registry.backend;
    assert_eq!(
        (backend.kind.as_str(), backend.endpoints),
        ("etcd", vec![endpoint.clone()])
    );
    assert_eq!(handle.client().endpoints(), std::slice::from_ref(&endpoint));
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let listed = handle.list_now("greeter").await.unwrap_or_default();
        if listed.iter().any(|i| i.id == inst.id) {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "never registered under {prefix}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = steadfast_etcd::EtcdRegistry::new(
        steadfast_etcd::EtcdConfig::new([endpoint]).with_prefix("/elsewhere"),
    )
    .unwrap();
    assert!(other
        .list_now("greeter")
        .await
        .unwrap_or_default()
        .is_empty());
    engine.shutdown().await;
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_credentials_and_tls_come_from_variables_and_never_leak() {
    use steadfast::etcd::PemSource;
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_REGISTRY", "etcd://h:1"),
        ("STEADFAST_ETCD_USER", "svc"),
        ("STEADFAST_ETCD_PASSWORD", "s3cret-pw"),
        ("STEADFAST_ETCD_CA_FILE", "/etc/etcd/ca.pem"),
        ("STEADFAST_ETCD_CERT_FILE", "/etc/etcd/client.pem"),
        ("STEADFAST_ETCD_KEY_FILE", "/etc/etcd/client-key.pem"),
    ]))
    .unwrap();
    let auth = c.etcd.auth.as_ref().expect("credentials set");
    assert_eq!(
        (auth.username.as_str(), auth.password.expose()),
        ("svc", "s3cret-pw")
    );
    let tls = c.etcd.tls.as_ref().expect("tls set");
    assert_eq!(tls.ca, Some(PemSource::File("/etc/etcd/ca.pem".into())));
    assert!(tls.client_cert.is_some() && tls.client_key.is_some());
    // Neither a dump of the config nor its Debug shows the password.
    let dumped = serde_json::to_string(&c).unwrap();
    assert!(!dumped.contains("s3cret-pw"), "{dumped}");
    assert!(dumped.contains("<redacted>"));
    assert!(!format!("{c:?}").contains("s3cret-pw"));
    // Credentials in the URL are refused, and the error does not echo them.
    let err = "etcd://svc:s3cret-pw@h:2379"
        .parse::<RegistryChoice>()
        .unwrap_err();
    assert!(!err.to_string().contains("s3cret-pw"), "{err}");
}

/// The variables of the operations guide's environment table.
fn documented_variables() -> std::collections::BTreeSet<String> {
    let doc = include_str!("../docs/operations.md");
    let section = doc
        .split("### Environment (`steadfast::from_env()`)")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .expect("the environment section");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_string()))
        .filter(|name| name.starts_with("STEADFAST_"))
        .collect()
}

#[test]
fn the_operations_guide_lists_every_variable_and_no_other() {
    let documented = documented_variables();
    let code: std::collections::BTreeSet<String> = steadfast::ENGINE_VARS
        .iter()
        .map(|v| v.var.to_string())
        .chain(
            steadfast::env::FACADE_VARS
                .iter()
                .map(|v| v.var.to_string()),
        )
        .chain(std::iter::once(steadfast::env::CONFIG_VAR.to_string()))
        .chain(steadfast::EXPORT_VARS.iter().map(|v| v.to_string()))
        .collect();
    let undocumented: Vec<_> = code.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&code).collect();
    assert!(
        undocumented.is_empty(),
        "read but not in docs/operations.md: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "in docs/operations.md but read by nothing: {unknown:?}"
    );
    // Each engine variable sets a field a config document has.
    let tree = serde_json::to_value(EngineConfig::default()).unwrap();
    for v in steadfast::ENGINE_VARS {
        let found = v
            .field
            .split('.')
            .try_fold(&tree, |node, key| node.get(key));
        assert!(
            found.is_some(),
            "{} sets {}, which no document has",
            v.var,
            v.field
        );
    }
}

/// A missing or misspelt `STEADFAST_REGISTRY` is refused, never a silent
/// in-process registry; the misspelling is named with its correction.
#[test]
fn without_steadfast_registry_from_env_refuses_and_unknown_names_are_reported() {
    let c = SteadfastConfig::from_vars(&vars(&[("STEADFAST_REGISTY", "etcd://h:1")])).unwrap();
    assert_eq!(c.registry, None);
    let e = c.builder().err().expect("refused");
    assert!(matches!(e, FromEnvError::NoRegistry), "{e}");
    assert!(
        e.to_string().contains("memory"),
        "names the explicit choice: {e}"
    );
    let unknown = steadfast::unknown_vars([
        "STEADFAST_REGISTY".to_string(),
        "STEADFAST_FETCH_TIMEOUT".to_string(),
        "STEADFAST_EXPORT_PORT".to_string(),
        "STEADFAST_WHOLLY_UNRELATED_NAME".to_string(),
        "PATH".to_string(),
    ]);
    assert_eq!(
        unknown,
        vec![
            steadfast::UnknownVar {
                name: "STEADFAST_REGISTY".into(),
                closest: Some("STEADFAST_REGISTRY"),
            },
            steadfast::UnknownVar {
                name: "STEADFAST_WHOLLY_UNRELATED_NAME".into(),
                closest: None,
            },
        ]
    );
}

/// The configuration hands back the registry and fetcher it built, and the
/// engine's inspect report names the registry it uses.
#[actix_rt::test]
async fn the_built_configuration_hands_back_its_registry_and_inspect_names_it() {
    let c = SteadfastConfig::from_vars(&vars(&[("STEADFAST_REGISTRY", "memory")])).unwrap();
    let built = c.build().unwrap();
    let steadfast::ConfiguredRegistry::Memory(registry) = built.registry.clone() else {
        panic!("a memory registry");
    };
    let engine = built.builder.start().unwrap();
    let report = engine.inspect().await.unwrap();
    assert_eq!(report.registry.backend.kind, "memory");
    assert!(report.registry.backend.endpoints.is_empty());
    // The handle is the registry the engine uses.
    let m = common::metadata("greeter", 20000, "r1");
    registry.put(common::instance(&m, 8001));
    let listed = engine.instances("greeter").await.unwrap();
    assert_eq!(listed.instances.len(), 1);
    engine.shutdown().await;
}

#[test]
fn export_host_and_port_come_from_the_environment() {
    let spec = steadfast::ExportSpec::from_vars(
        "greeter",
        8080,
        &vars(&[("STEADFAST_EXPORT_HOST", "10.0.0.7")]),
    )
    .unwrap()
    .http_service("demo.Greeter");
    assert_eq!((spec.host.as_str(), spec.port), ("10.0.0.7", 8080));
    assert_eq!(spec.services[0].port, 8080, "one port stated once");
    let spec = steadfast::ExportSpec::from_vars(
        "greeter",
        8080,
        &vars(&[("POD_IP", "10.1.2.3"), ("STEADFAST_EXPORT_PORT", "30080")]),
    )
    .unwrap();
    assert_eq!((spec.host.as_str(), spec.port), ("10.1.2.3", 30080));
    assert!(matches!(
        steadfast::ExportSpec::from_vars("greeter", 8080, &vars(&[])),
        Err(EnvError::Missing {
            var: "STEADFAST_EXPORT_HOST",
            ..
        })
    ));
}

/// Every facade row sets the field it names: a sample value for it alone
/// changes that field of the read config and nothing else.
#[cfg(all(feature = "etcd", feature = "nacos", feature = "http"))]
#[test]
fn every_facade_variable_sets_the_field_its_row_names() {
    use steadfast::Takes;
    let base = serde_json::to_value(SteadfastConfig::default()).unwrap();
    for row in steadfast::env::FACADE_VARS {
        let sample = match row.takes {
            Takes::Duration => "7s",
            Takes::Number => "4096",
            Takes::PemFile | Takes::Path => "/sample.pem",
            _ => "memory",
        };
        let mut set = vec![(row.var, sample)];
        let user = row.var.replace("_PASSWORD", "_USER");
        if row.takes == Takes::Secret {
            set.push((user.as_str(), "svc"));
        }
        let c = SteadfastConfig::from_vars(&vars(&set)).unwrap();
        if row.takes == Takes::Secret {
            let password = match row.var {
                "STEADFAST_ETCD_PASSWORD" => c.etcd.auth.as_ref().map(|a| a.password.expose()),
                "STEADFAST_NACOS_PASSWORD" => c.nacos.auth.as_ref().map(|a| a.password.expose()),
                other => panic!("a secret row {other} this test does not know"),
            };
            assert_eq!(password, Some("memory"), "{}", row.var);
            continue;
        }
        let read = serde_json::to_value(&c).unwrap();
        let at = |doc: &serde_json::Value| {
            row.field
                .split('.')
                .try_fold(doc.clone(), |node, key| node.get(key).cloned())
        };
        assert_ne!(at(&read), at(&base), "{} left {} alone", row.var, row.field);
        // Put back the base's value at the deepest part of the path the
        // base has (an unset option is `null` there); the rest must match.
        let keys: Vec<&str> = row.field.split('.').collect();
        let pointer = (1..=keys.len())
            .rev()
            .map(|n| format!("/{}", keys[..n].join("/")))
            .find(|p| base.pointer(p).is_some())
            .expect("the row's section is in the document");
        let mut rest = read.clone();
        *rest.pointer_mut(&pointer).unwrap() = base.pointer(&pointer).unwrap().clone();
        rest["engine"]["seed"] = base["engine"]["seed"].clone();
        let was = base.clone();
        assert_eq!(rest, was, "{} changed more than {}", row.var, row.field);
    }
}

/// A variable applied on top of a config file keeps the file's secrets
/// (the document is patched, never written back out through the redacting
/// serializer), and a refused secret is never echoed.
#[cfg(feature = "etcd")]
#[test]
fn variables_on_top_of_a_file_keep_its_secrets_and_never_echo_them() {
    let dir = std::env::temp_dir().join(format!("steadfast-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("steadfast.json");
    std::fs::write(
        &file,
        r#"{ "registry": "etcd://h:1",
             "etcd": { "auth": { "username": "svc", "password": "file-pw" } } }"#,
    )
    .unwrap();
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_CONFIG", file.to_str().unwrap()),
        ("STEADFAST_ETCD_PREFIX", "/prod"),
        ("STEADFAST_ETCD_CA_FILE", "/etc/ca.pem"),
    ]))
    .unwrap();
    assert_eq!(c.etcd.prefix, "/prod");
    let auth = c.etcd.auth.as_ref().expect("the file's credentials");
    assert_eq!(
        (auth.username.as_str(), auth.password.expose()),
        ("svc", "file-pw")
    );
    // A password without a user is refused, naming the variable, not the value.
    let err =
        SteadfastConfig::from_vars(&vars(&[("STEADFAST_ETCD_PASSWORD", "lonely-pw")])).unwrap_err();
    assert!(
        matches!(
            &err,
            FromEnvError::Var(EnvError::Invalid {
                var: "STEADFAST_ETCD_PASSWORD",
                ..
            })
        ),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("lonely-pw"), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each facade variable lands in the field its name says.
#[cfg(all(feature = "etcd", feature = "http"))]
#[test]
fn every_facade_variable_lands_in_its_named_field() {
    use steadfast::etcd::PemSource;
    let c = SteadfastConfig::from_vars(&vars(&[
        ("STEADFAST_REGISTRY", "etcd://h:1"),
        ("STEADFAST_ETCD_PREFIX", "/p"),
        ("STEADFAST_ETCD_LEASE_TTL", "11s"),
        ("STEADFAST_ETCD_REQUEST_TIMEOUT", "12s"),
        ("STEADFAST_ETCD_OPERATION_TIMEOUT", "13s"),
        ("STEADFAST_ETCD_USER", "u"),
        ("STEADFAST_ETCD_PASSWORD", "pw"),
        ("STEADFAST_ETCD_CA_FILE", "/ca"),
        ("STEADFAST_ETCD_CERT_FILE", "/cert"),
        ("STEADFAST_ETCD_KEY_FILE", "/key"),
        ("STEADFAST_ETCD_PROXY", "http://proxy:1"),
        ("STEADFAST_HTTP_CONNECT_TIMEOUT", "14s"),
        ("STEADFAST_HTTP_TIMEOUT", "15s"),
        ("STEADFAST_HTTP_MAX_BODY_BYTES", "16"),
        ("STEADFAST_HTTP_BASE_PATH", "/b"),
    ]))
    .unwrap();
    let s = Duration::from_secs;
    assert_eq!(
        c.registry,
        Some(RegistryChoice::Etcd(vec!["http://h:1".into()]))
    );
    let e = &c.etcd;
    assert_eq!(e.prefix, "/p");
    assert_eq!(
        (e.lease_ttl, e.request_timeout, e.operation_timeout),
        (s(11), s(12), s(13))
    );
    let auth = e.auth.as_ref().unwrap();
    assert_eq!(
        (auth.username.as_str(), auth.password.expose()),
        ("u", "pw")
    );
    let tls = e.tls.as_ref().unwrap();
    let file = |p: &str| Some(PemSource::File(p.into()));
    assert_eq!(
        (&tls.ca, &tls.client_cert, &tls.client_key),
        (&file("/ca"), &file("/cert"), &file("/key"))
    );
    assert_eq!(e.proxy.as_deref(), Some("http://proxy:1"));
    let h = &c.fetcher;
    assert_eq!((h.connect_timeout, h.timeout), (s(14), s(15)));
    assert_eq!((h.max_body_bytes, h.base_path.as_str()), (16, "/b"));
}

/// `nacos://` names the servers by their HTTP addresses (as Dubbo writes
/// them), with an optional namespace and group; it prints back the same.
#[test]
fn a_nacos_registry_url_parses_prints_back_and_refuses_bad_shapes() {
    let r: RegistryChoice = "nacos://10.0.0.1:8848, 10.0.0.2:8848?namespace=dev&group=G1"
        .parse()
        .unwrap();
    assert_eq!(
        r,
        RegistryChoice::Nacos {
            servers: vec!["10.0.0.1:8848".into(), "10.0.0.2:8848".into()],
            namespace: Some("dev".into()),
            group: Some("G1".into()),
        }
    );
    assert_eq!(
        r.to_string(),
        "nacos://10.0.0.1:8848,10.0.0.2:8848?namespace=dev&group=G1"
    );
    assert_eq!(r.to_string().parse::<RegistryChoice>().unwrap(), r);
    let plain: RegistryChoice = "nacos://h:8848".parse().unwrap();
    assert_eq!(plain.to_string(), "nacos://h:8848");
    for bad in [
        "nacos://",
        "nacos://h",
        "nacos://h:x",
        "nacos://h:1?zone=a",
        "nacos://h:1?namespace=",
        "nacos://h:1?group=a&b",
        "nacos://h:1?namespace=a%20b",
    ] {
        assert!(bad.parse::<RegistryChoice>().is_err(), "{bad:?} refused");
    }
    let err = "nacos://nacos:s3cret@h:8848"
        .parse::<RegistryChoice>()
        .unwrap_err();
    assert!(!err.to_string().contains("s3cret"), "{err}");
    // The gRPC port is the HTTP port + 1000; one past the range is refused
    // (without the `nacos` feature, the feature is what is missing).
    let c =
        SteadfastConfig::from_vars(&vars(&[("STEADFAST_REGISTRY", "nacos://h:65000")])).unwrap();
    #[cfg(feature = "nacos")]
    assert!(matches!(c.build(), Err(FromEnvError::Registry(_))));
    #[cfg(not(feature = "nacos"))]
    assert!(matches!(
        c.build(),
        Err(FromEnvError::FeatureOff {
            feature: "nacos",
            ..
        })
    ));
}
