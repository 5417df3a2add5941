//! The gauges read from `Engine::inspect`: per app, per reference (state,
//! endpoints, ejections), the registry connection and the registrations.

use std::time::Duration;

use steadfast_actors::Engine;
use steadfast_core::Reference;
use steadfast_memory::MemoryRegistry;
use steadfast_metrics::Metrics;
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

/// The value of the sample `series` (name and labels exactly as written).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[actix_rt::test]
async fn per_app_and_per_reference_gauges_follow_the_engine() {
    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let fetcher = ScriptedFetcher::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(7)
        .start()
        .unwrap();
    // `ok` resolves; `bad` never does.
    let ok = MetadataBuilder::new("ok")
        .service("demo.Ok", "tri", 20000)
        .build();
    let bad = MetadataBuilder::new("bad")
        .service("demo.Bad", "tri", 20001)
        .build();
    fetcher.serve(ok.clone());
    fetcher.serve(bad.clone());
    fetcher.fail_always(&bad.revision);
    let r_ok = Reference::new("demo.Ok", "tri", ["ok"]);
    let r_bad = Reference::new("demo.Bad", "tri", ["bad"]);
    let d_ok = engine.subscribe(r_ok.clone()).await.unwrap();
    let _d_bad = engine.subscribe(r_bad.clone()).await.unwrap();
    registry.put(instance_for(&ok, "127.0.0.1", 8001));
    registry.put(instance_for(&ok, "127.0.0.1", 8002));
    registry.put(instance_for(&bad, "127.0.0.1", 8003));
    for _ in 0..500 {
        if d_ok.select().is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the bad revision stay unresolved for a while (retrying).
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let text = Metrics::new().engine(&engine).encode().await;
    let (k_ok, k_bad) = (r_ok.subscribe_key(), r_bad.subscribe_key());
    let v = |s: String| sample(&text, &s);
    assert_eq!(v("steadfast_inspect_up".into()), Some(1.0), "{text}");
    assert_eq!(
        v(r#"steadfast_app_instances{app="ok"}"#.into()),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        v(r#"steadfast_app_instances{app="bad"}"#.into()),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        v(r#"steadfast_app_unresolved_revisions{app="ok"}"#.into()),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        v(r#"steadfast_app_unresolved_revisions{app="bad"}"#.into()),
        Some(1.0),
        "{text}"
    );
    let age = v(r#"steadfast_app_oldest_unresolved_seconds{app="bad"}"#.into()).unwrap();
    assert!(
        (4.0..=6.0).contains(&age),
        "about 5 s unresolved: {age}\n{text}"
    );
    assert_eq!(
        v(format!(
            "steadfast_reference_endpoints{{reference=\"{k_ok}\"}}"
        )),
        Some(2.0)
    );
    assert_eq!(
        v(format!(
            "steadfast_reference_endpoints{{reference=\"{k_bad}\"}}"
        )),
        Some(0.0)
    );
    let state = |k: &str, s: &str| {
        v(format!(
            "steadfast_reference_state{{reference=\"{k}\",state=\"{s}\"}}"
        ))
    };
    assert_eq!(state(&k_ok, "ready"), Some(1.0), "{text}");
    assert_eq!(state(&k_ok, "empty:unresolved"), Some(0.0), "{text}");
    assert_eq!(state(&k_bad, "empty:unresolved"), Some(1.0), "{text}");
    assert_eq!(state(&k_bad, "ready"), Some(0.0), "{text}");
    assert_eq!(
        v("steadfast_registry_connected".into()),
        Some(1.0),
        "{text}"
    );
    assert!(
        v("steadfast_retry_timers_pending".into()).unwrap() >= 1.0,
        "{text}"
    );
    // Ejections: refused connections eject at once.
    for _ in 0..2 {
        if let Ok(lease) = d_ok.select() {
            lease.failure(steadfast_core::FailureClass::ConnectionRefused);
        }
    }
    let text = Metrics::new().engine(&engine).encode().await;
    let ejected = sample(
        &text,
        &format!("steadfast_reference_endpoints_ejected{{reference=\"{k_ok}\"}}"),
    );
    assert_eq!(
        ejected,
        Some(1.0),
        "at most half the directory is ejected\n{text}"
    );
    engine.shutdown().await;
}

#[actix_rt::test]
async fn a_shut_down_engine_leaves_its_gauges_out() {
    tokio::time::pause();
    let engine = Engine::builder()
        .registry(MemoryRegistry::new())
        .fetcher(ScriptedFetcher::new())
        .start()
        .unwrap();
    let metrics = Metrics::new()
        .engine(&engine)
        .inspect_timeout(Duration::from_millis(200));
    engine.shutdown().await;
    let text = metrics.encode().await;
    assert_eq!(sample(&text, "steadfast_inspect_up"), Some(0.0), "{text}");
    assert_eq!(
        sample(&text, "steadfast_registry_connected"),
        None,
        "{text}"
    );
}

#[actix_rt::test]
async fn registrations_pending_failback_are_counted() {
    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(ScriptedFetcher::new())
        .start()
        .unwrap();
    // Three failed attempts, then it lands on the registrar's backoff.
    registry.fail_next_registers(3);
    let info = MetadataBuilder::new("p")
        .service("demo.P", "tri", 20000)
        .build();
    engine
        .register(instance_for(&info, "127.0.0.1", 9001))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = Metrics::new().engine(&engine).encode().await;
    assert_eq!(
        sample(&text, r#"steadfast_registrations{state="pending"}"#),
        Some(1.0),
        "{text}"
    );
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = Metrics::new().engine(&engine).encode().await;
    assert_eq!(
        sample(&text, r#"steadfast_registrations{state="registered"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"steadfast_registrations{state="pending"}"#),
        Some(0.0),
        "{text}"
    );
    engine.shutdown().await;
}
