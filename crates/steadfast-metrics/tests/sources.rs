//! The non-engine sources: client pools (summed, by state) and the HTTP
//! metadata fetcher (`source="rpc"`).

#![cfg(feature = "http")]

use steadfast_metrics::Metrics;
use steadfast_pool::{ClientFactory, ClientPool, PoolConfig};

struct Unit;

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

impl ClientFactory for Unit {
    type Client = ();
    type Error = Never;
    fn build(&self, _address: &str) -> Result<(), Never> {
        Ok(())
    }
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[actix_rt::test]
async fn pools_are_summed_by_state_and_the_http_fetcher_counts_as_rpc() {
    let a = ClientPool::new(Unit, PoolConfig::default());
    let b = ClientPool::new(Unit, PoolConfig::default());
    let (owner_a, owner_b) = (a.new_owner(), b.new_owner());
    a.sync_endpoints(
        owner_a,
        ["10.0.0.1:80".to_string(), "10.0.0.2:80".to_string()],
    );
    b.sync_endpoints(owner_b, ["10.0.0.3:80".to_string()]);
    let held = [
        a.acquire("10.0.0.1:80").unwrap(),
        a.acquire("10.0.0.2:80").unwrap(),
    ];
    let _c = b.acquire("10.0.0.3:80").unwrap();
    // An endpoint dropped while its call is in flight drains.
    a.sync_endpoints(owner_a, ["10.0.0.1:80".to_string()]);
    let http = steadfast_http::HttpMetadataFetcher::builder()
        .build()
        .unwrap();
    let text = Metrics::new()
        .pool(&a)
        .pool(&b)
        .fetcher(http)
        .encode()
        .await;
    assert_eq!(
        sample(&text, r#"steadfast_pool_clients{state="active"}"#),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"steadfast_pool_clients{state="draining"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "steadfast_pool_clients_built_total"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"steadfast_metadata_source_fetches_total{source="rpc",outcome="success"}"#
        ),
        Some(0.0),
        "{text}"
    );
    drop(held);
}

/// A Caller's calls, attempts, failures and budget refusals reach
/// `/metrics` under its reference, and go away with the Caller; the engine's
/// registry is named by `steadfast_registry_info`.
#[actix_rt::test]
async fn a_callers_counters_are_exported_per_reference_and_the_registry_is_named() {
    let engine = steadfast_actors::Engine::builder()
        .registry(steadfast_memory::MemoryRegistry::new())
        .fetcher(steadfast_testkit::ScriptedFetcher::new())
        .start()
        .unwrap();
    let reference = steadfast_core::Reference::new("demo.Web", "http", ["web-app"]);
    let dir = engine.subscribe(reference.clone()).await.unwrap();
    let caller = steadfast_web::Caller::builder(dir)
        .deadline(std::time::Duration::from_millis(50))
        .build();
    for _ in 0..2 {
        assert!(
            caller.get("x").await.is_err(),
            "no provider: the call fails"
        );
    }
    let metrics = Metrics::new().engine(&engine).caller(&caller);
    let text = metrics.encode().await;
    let key = reference.subscribe_key();
    let series = |name: &str| format!("steadfast_caller_{name}_total{{reference=\"{key}\"}}");
    assert_eq!(sample(&text, &series("calls")), Some(2.0), "{text}");
    assert_eq!(sample(&text, &series("failed")), Some(2.0), "{text}");
    assert_eq!(sample(&text, &series("attempts")), Some(0.0), "{text}");
    assert_eq!(sample(&text, &series("retries")), Some(0.0), "{text}");
    assert_eq!(
        sample(&text, &series("budget_refused")),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"steadfast_registry_info{kind="memory",endpoints=""}"#
        ),
        Some(1.0),
        "{text}"
    );
    drop(caller);
    let text = metrics.encode().await;
    assert!(!text.contains("steadfast_caller_calls_total"), "{text}");
    engine.shutdown().await;
}
