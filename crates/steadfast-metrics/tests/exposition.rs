//! The exposition of a running engine: counters that follow what happened,
//! Prometheus naming, bounded labels, the /metrics scope and the probe.

#![cfg(feature = "http")]

use std::time::Duration;

use steadfast_actors::Engine;
use steadfast_core::Reference;
use steadfast_memory::MemoryRegistry;
use steadfast_metrics::{metrics_scope, Counted, Metrics, CONTENT_TYPE};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";

struct Fx {
    engine: Engine,
    registry: MemoryRegistry,
    fetcher: ScriptedFetcher,
    counted: Counted<ScriptedFetcher>,
}

fn start() -> Fx {
    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let fetcher = ScriptedFetcher::new();
    let counted = Counted::new("report", fetcher.clone());
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(counted.clone())
        .seed(7)
        .start()
        .expect("engine starts");
    Fx {
        engine,
        registry,
        fetcher,
        counted,
    }
}

/// The value of the sample `series` (name and labels exactly as written).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn wait_ready(dir: &steadfast_actors::Directory) {
    for _ in 0..500 {
        if dir.select().is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("directory never became ready: {:?}", dir.status().await);
}

#[actix_rt::test]
async fn counters_follow_fetches_failures_and_cache_hits() {
    let fx = start();
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    fx.fetcher.serve(info.clone());
    fx.fetcher.fail_next(&info.revision, 2);
    let metrics = Metrics::new()
        .engine(&fx.engine)
        .fetcher(fx.counted.clone());
    let before = metrics.encode().await;
    assert_eq!(
        sample(&before, "steadfast_metadata_fetch_attempts_total"),
        Some(0.0),
        "{before}"
    );

    let dir = fx
        .engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    fx.registry.put(instance_for(&info, "127.0.0.1", 8001));
    wait_ready(&dir).await;
    // The reference again after its resolver stopped: the revision is
    // answered from the engine's shared metadata cache.
    let reference = Reference::new(IFACE, "tri", [APP]);
    assert!(fx.engine.unsubscribe(&reference).await.unwrap());
    drop(dir);
    let again = fx.engine.subscribe(reference).await.unwrap();
    wait_ready(&again).await;

    let text = metrics.encode().await;
    let attempts = sample(&text, "steadfast_metadata_fetch_attempts_total").unwrap();
    assert!(
        attempts >= 3.0,
        "2 failures then a success: {attempts}\n{text}"
    );
    let failures = sample(
        &text,
        "steadfast_metadata_fetch_failures_total{kind=\"unreachable\"}",
    )
    .or_else(|| {
        sample(
            &text,
            "steadfast_metadata_fetch_failures_total{kind=\"server_error\"}",
        )
    });
    let total_failures: f64 = text
        .lines()
        .filter(|l| l.starts_with("steadfast_metadata_fetch_failures_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(total_failures, 2.0, "{failures:?}\n{text}");
    assert_eq!(
        sample(
            &text,
            "steadfast_metadata_source_fetches_total{source=\"report\",outcome=\"success\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "steadfast_metadata_source_fetches_total{source=\"cache\",outcome=\"success\"}"
        )
        .unwrap()
            >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("# TYPE steadfast_metadata_fetch_attempts counter"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE steadfast_retry_timers_pending gauge"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn labels_are_bounded_no_revision_or_instance() {
    let fx = start();
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    fx.fetcher.serve(info.clone());
    let dir = fx
        .engine
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    for port in 8001..8011 {
        fx.registry.put(instance_for(&info, "127.0.0.1", port));
    }
    wait_ready(&dir).await;
    let text = Metrics::new()
        .engine(&fx.engine)
        .directory(&dir)
        .encode()
        .await;
    let allowed = [
        "app",
        "reference",
        "state",
        "kind",
        "source",
        "outcome",
        "le",
        // steadfast_registry_info only: one series per engine.
        "endpoints",
    ];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, labels)) = line.split_once('{') else {
            continue;
        };
        let labels = labels.split('}').next().unwrap_or("");
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let key = pair.split('=').next().unwrap_or("");
            assert!(allowed.contains(&key), "unexpected label {key} in {line}");
        }
        assert!(!line.contains(&info.revision), "revision in {line}");
        assert!(!line.contains("8001"), "instance in {line}");
    }
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn select_probe_fills_the_histogram_without_holding_the_reference() {
    let fx = start();
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    fx.fetcher.serve(info.clone());
    let reference = Reference::new(IFACE, "tri", [APP]);
    let dir = fx.engine.subscribe(reference.clone()).await.unwrap();
    fx.registry.put(instance_for(&info, "127.0.0.1", 8001));
    wait_ready(&dir).await;
    let metrics = Metrics::new().engine(&fx.engine).directory(&dir);
    metrics.encode().await;
    let text = metrics.encode().await;
    let key = reference.subscribe_key();
    let count = sample(
        &text,
        &format!("steadfast_select_duration_seconds_count{{reference=\"{key}\"}}"),
    );
    assert_eq!(
        count,
        Some(2.0 * steadfast_metrics::PROBE_SELECTS as f64),
        "{text}"
    );
    // The probe's handle does not keep the reference subscribed: once the
    // caller's handle is gone, the linger (30 s) unsubscribes it.
    drop(dir);
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    metrics.encode().await;
    assert_eq!(fx.engine.stats().linger_unsubscribes, 1);
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn scope_serves_the_exposition() {
    let fx = start();
    let metrics = Metrics::new().engine(&fx.engine);
    let app = actix_web::test::init_service(
        actix_web::App::new().service(metrics_scope("/metrics", metrics)),
    )
    .await;
    let req = actix_web::test::TestRequest::get()
        .uri("/metrics")
        .to_request();
    let resp = actix_web::test::call_service(&app, req).await;
    assert_eq!(resp.status(), 200);
    let ct = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(ct, CONTENT_TYPE);
    let body = actix_web::test::read_body(resp).await;
    let text = std::str::from_utf8(&body).unwrap();
    assert!(text.contains("steadfast_actors "), "{text}");
    fx.engine.shutdown().await;
}
