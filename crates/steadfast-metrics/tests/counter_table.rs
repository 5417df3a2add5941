//! The counter tables: every row of `ENGINE_COUNTERS` and `ETCD_COUNTERS` is exported, under
//! its declared type and name, with the value the snapshot holds.

use std::collections::HashSet;
use std::time::Duration;

use steadfast_actors::{Engine, ENGINE_COUNTERS};
use steadfast_core::Reference;
use steadfast_core::{CounterKind, CounterValue};
#[cfg(feature = "etcd")]
use steadfast_etcd::{EtcdConfig, EtcdRegistry, ETCD_COUNTERS};
use steadfast_memory::MemoryRegistry;
use steadfast_metrics::Metrics;
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

/// The samples of family `name` (`name` or `name{...}` series), summed.
fn family_sum(text: &str, series: &str) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = l.strip_prefix(series) else {
            continue;
        };
        let value = match rest.strip_prefix('{') {
            Some(labelled) => labelled.rsplit_once("} ").map(|(_, v)| v),
            None => rest.strip_prefix(' '),
        };
        if let Some(v) = value.and_then(|v| v.parse::<f64>().ok()) {
            found = true;
            sum += v;
        }
    }
    found.then_some(sum)
}

#[actix_rt::test]
async fn every_counter_of_the_table_is_exported_with_its_value() {
    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let fetcher = ScriptedFetcher::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(3)
        .start()
        .expect("engine starts");
    let info = MetadataBuilder::new("greeter")
        .service("demo.Greeter", "tri", 20000)
        .build();
    fetcher.serve(info.clone());
    fetcher.fail_next(&info.revision, 1);
    let dir = engine
        .subscribe(Reference::new("demo.Greeter", "tri", ["greeter"]))
        .await
        .expect("subscribed");
    registry.put(instance_for(&info, "127.0.0.1", 8001));
    for _ in 0..500 {
        if dir.select().is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(dir.select().is_ok(), "the directory serves");

    let names: HashSet<&str> = ENGINE_COUNTERS.iter().map(|c| c.name).collect();
    assert_eq!(
        names.len(),
        ENGINE_COUNTERS.len(),
        "family names are unique"
    );
    let fields: HashSet<&str> = ENGINE_COUNTERS.iter().map(|c| c.field).collect();
    assert_eq!(fields.len(), ENGINE_COUNTERS.len(), "fields are unique");

    let text = Metrics::new().engine(&engine).encode().await;
    let snapshot = engine.stats();
    let values = snapshot.values();
    assert_eq!(values.len(), ENGINE_COUNTERS.len());
    let mut nonzero = 0;
    for (spec, value) in values {
        let (ty, series) = match spec.kind {
            CounterKind::Gauge => ("gauge", format!("steadfast_{}", spec.name)),
            _ => ("counter", format!("steadfast_{}_total", spec.name)),
        };
        let type_line = format!("# TYPE steadfast_{} {ty}", spec.name);
        assert!(
            text.lines().any(|l| l == type_line),
            "{} ({}) is declared in the table but not exported as {type_line:?}",
            spec.field,
            spec.name
        );
        let got = family_sum(&text, &series)
            .unwrap_or_else(|| panic!("{} has no sample {series}", spec.field));
        let want = match value {
            CounterValue::Level(v) => v as f64,
            CounterValue::Count(v) => v as f64,
        };
        // The encode itself may move a gauge (an inspect in flight), never
        // a counter backwards.
        match value {
            CounterValue::Count(_) => assert!(got >= want, "{}: {got} < {want}", spec.field),
            CounterValue::Level(_) => {}
        }
        if want > 0.0 {
            nonzero += 1;
        }
    }
    assert!(nonzero >= 3, "the engine did work the table shows");
    assert!(snapshot.fetch_attempts >= 2, "a failure, then the answer");
    assert!(snapshot.fetch_failures >= 1);
    engine.shutdown().await;
}

#[test]
fn the_operations_guide_lists_every_counter_of_the_tables() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
    let doc = std::fs::read_to_string(path).expect("docs/operations.md");
    let mut tables: Vec<&steadfast_core::CounterSpec> = ENGINE_COUNTERS.iter().collect();
    #[cfg(feature = "etcd")]
    tables.extend(ETCD_COUNTERS);
    #[cfg(feature = "nacos")]
    tables.extend(steadfast_nacos::NACOS_COUNTERS);
    for spec in tables {
        let (ty, series) = match spec.kind {
            CounterKind::Gauge => ("gauge", format!("steadfast_{}", spec.name)),
            _ => ("counter", format!("steadfast_{}_total", spec.name)),
        };
        let row = format!("| `{series}` | {ty} |");
        assert!(
            doc.lines().any(|l| l.starts_with(&row)),
            "docs/operations.md has no row {row:?} for {}",
            spec.field
        );
    }
}

/// The etcd backend's table: every row is exported under its declared name
/// with the snapshot's value (a registry that never reached a server: the
/// rows are there, at zero), and names are unique across both tables.
#[cfg(feature = "etcd")]
#[actix_rt::test]
async fn every_etcd_counter_of_its_table_is_exported() {
    // A port nothing listens on: the registry is built, never used.
    let registry =
        EtcdRegistry::new(EtcdConfig::new(["http://127.0.0.1:9"])).expect("registry builds");
    let text = Metrics::new().etcd(&registry).encode().await;
    let all: HashSet<&str> = ENGINE_COUNTERS
        .iter()
        .chain(ETCD_COUNTERS)
        .map(|c| c.name)
        .collect();
    assert_eq!(
        all.len(),
        ENGINE_COUNTERS.len() + ETCD_COUNTERS.len(),
        "family names are unique across the tables"
    );
    let values = registry.stats().values();
    assert_eq!(values.len(), ETCD_COUNTERS.len());
    for (spec, value) in values {
        assert_eq!(spec.kind, CounterKind::Counter, "{}", spec.field);
        let type_line = format!("# TYPE steadfast_{} counter", spec.name);
        assert!(
            text.lines().any(|l| l == type_line),
            "{} is declared in the etcd table but not exported: {text}",
            spec.field
        );
        let series = format!("steadfast_{}_total", spec.name);
        let got = family_sum(&text, &series)
            .unwrap_or_else(|| panic!("{} has no sample {series}", spec.field));
        assert_eq!(value, CounterValue::Count(got as u64), "{}", spec.field);
    }
}

/// The Nacos backend's table: every row is exported under its declared
/// name with the snapshot's value, and names are unique across the tables.
#[cfg(all(feature = "nacos", feature = "etcd"))]
#[actix_rt::test]
async fn every_nacos_counter_of_its_table_is_exported() {
    use steadfast_nacos::{NacosConfig, NacosRegistry, NACOS_COUNTERS};
    // Never used: the rows are there, at zero.
    let registry = NacosRegistry::new(NacosConfig::new(["127.0.0.1:9"]));
    let text = Metrics::new().nacos(&registry).encode().await;
    let all: HashSet<&str> = ENGINE_COUNTERS
        .iter()
        .chain(ETCD_COUNTERS)
        .chain(NACOS_COUNTERS)
        .map(|c| c.name)
        .collect();
    assert_eq!(
        all.len(),
        ENGINE_COUNTERS.len() + ETCD_COUNTERS.len() + NACOS_COUNTERS.len(),
        "family names are unique across the tables"
    );
    let values = registry.stats().values();
    assert_eq!(values.len(), NACOS_COUNTERS.len());
    for (spec, value) in values {
        let series = format!("steadfast_{}_total", spec.name);
        let got = family_sum(&text, &series)
            .unwrap_or_else(|| panic!("{} has no sample {series}: {text}", spec.field));
        assert_eq!(value, CounterValue::Count(got as u64), "{}", spec.field);
    }
}
