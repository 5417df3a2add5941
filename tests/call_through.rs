//! The call-through story as a test (embedded registry, providers as tasks,
//! real loopback sockets, a few seconds of real traffic): one provider
//! killed mid-traffic and restarted, the other restarted gracefully, every
//! call through the actix-web consumer's `Caller` succeeds, none needs more
//! than one retry.

#[path = "../examples/call_through/story.rs"]
mod story;

use std::sync::Arc;
use std::time::Duration;

use steadfast::{MemoryRegistry, Registry};

#[actix_rt::test]
async fn a_killed_and_a_gracefully_restarted_provider_fail_no_call() {
    let registry: Arc<dyn Registry> = Arc::new(MemoryRegistry::new());
    let consumer = story::start_consumer(registry.clone()).await.unwrap();
    let mut fleet = story::TaskFleet::new(registry).unwrap();
    let timing = story::Timing {
        phase: Duration::from_millis(400),
        settle: Duration::from_secs(10),
        concurrency: 4,
    };
    let summary = story::run(&mut fleet, &consumer.url, timing, |s| {
        eprintln!("[story] {s}")
    })
    .await
    .unwrap();
    let refused = fleet.refused;
    fleet.finish().await;
    let stats = consumer.caller.stats();
    consumer.server.stop(true).await;
    consumer.engine.shutdown().await;
    eprintln!("{summary:?}\n{stats:?}\nclosing 503s answered by b1: {refused}");

    assert!(summary.calls >= 100, "real traffic ran: {summary:?}");
    assert_eq!(summary.failed, 0, "failures: {:?}", summary.failures);
    assert!(
        summary.retried >= 1,
        "the kill was met by calls, and retried: {summary:?}"
    );
    assert!(
        summary.max_attempts <= 2,
        "at most one retry per call: {summary:?}"
    );
    for boot in ["a1", "a2", "b1", "b2"] {
        assert!(
            summary.by_boot.get(boot).is_some_and(|n| *n > 0),
            "{boot} served: {summary:?}"
        );
    }
    assert_eq!(stats.failed, 0);
    assert!(
        stats.retries >= summary.retried,
        "the Caller counted every retry the calls saw: {stats:?}"
    );
}
