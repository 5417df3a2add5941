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
