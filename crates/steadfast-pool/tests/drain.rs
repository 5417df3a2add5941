//! Draining on tokio's paused clock: a dropped endpoint's client takes no
//! new calls, closes when its calls end, and is force-closed (its calls see
//! `closed()`) at the drain timeout.

mod common;

use common::{secs, settle, TestFactory};
use steadfast_pool::{ClientPool, PoolConfig, PooledClient};

fn pool(factory: &TestFactory) -> ClientPool<TestFactory> {
    ClientPool::new(
        factory.clone(),
        PoolConfig {
            drain_timeout: secs(30),
            ..PoolConfig::default()
        },
    )
}

#[tokio::test(start_paused = true)]
async fn dropped_endpoint_closes_once_its_last_call_ends() {
    let factory = TestFactory::default();
    let pool = pool(&factory);
    let owner = pool.new_owner();
    pool.sync_endpoints(owner, ["a:1".to_string(), "b:1".to_string()]);
    let call = pool.acquire("a:1").unwrap();
    drop(pool.acquire("b:1").unwrap());
    pool.sync_endpoints(owner, ["b:1".to_string()]);
    settle().await;
    assert_eq!(pool.stats().draining, 1);
    // No new call on the draining client: a fresh one, which (its address
    // being listed by no owner) serves this one call and drains with it.
    let fresh = pool.acquire("a:1").unwrap();
    assert_eq!(fresh.serial, 3);
    assert_eq!(pool.stats().refused_acquires, 1);
    drop(fresh);
    settle().await;
    assert_eq!(factory.closed(), vec![3], "the late client drained");
    tokio::time::sleep(secs(10)).await;
    assert_eq!(
        factory.closed(),
        vec![3],
        "closed while a call was in flight"
    );
    drop(call);
    settle().await;
    assert_eq!(factory.closed(), vec![3, 1]);
    let stats = pool.stats();
    assert_eq!(
        (stats.drained, stats.forced_closes, stats.draining),
        (2, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn draining_client_still_in_use_is_force_closed_at_the_drain_timeout() {
    let factory = TestFactory::default();
    let pool = pool(&factory);
    let owner = pool.new_owner();
    pool.sync_endpoints(owner, ["a:1".to_string()]);
    let call = pool.acquire("a:1").unwrap();
    let start = tokio::time::Instant::now();
    pool.drop_owner(owner);
    assert!(!call.is_closed());
    tokio::time::timeout(secs(31), call.closed())
        .await
        .expect("the forced close is signalled to the call");
    assert_eq!(start.elapsed(), secs(30));
    assert!(call.is_closed());
    assert_eq!(call.closed_error().address, "a:1");
    assert!(call.closed_error().is_retryable());
    settle().await;
    assert_eq!(factory.closed(), vec![1]);
    assert_eq!(pool.stats().forced_closes, 1);
    drop(call);
    settle().await;
    assert_eq!(pool.stats().drained, 0);
}

#[tokio::test(start_paused = true)]
async fn until_closed_cuts_a_call_at_the_forced_close() {
    let factory = TestFactory::default();
    let pool = pool(&factory);
    let owner = pool.new_owner();
    pool.sync_endpoints(owner, ["a:1".to_string(), "b:1".to_string()]);
    let cut = pool.acquire("a:1").unwrap();
    let quick = pool.acquire("b:1").unwrap();
    pool.drop_owner(owner);
    let start = tokio::time::Instant::now();
    // A call that would run for an hour is cut at the 30 s drain timeout.
    let err = cut
        .until_closed(tokio::time::sleep(secs(3600)))
        .await
        .expect_err("cut by the forced close");
    assert_eq!(err.address, "a:1");
    assert_eq!(start.elapsed(), secs(30));
    // Already closed: refused at once.
    assert!(cut.until_closed(async {}).await.is_err());
    // A client that is not closed runs its call to the end.
    drop(quick);
    let other = pool.acquire("c:1").unwrap();
    assert_eq!(other.until_closed(async { 7 }).await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn a_client_never_closed_never_resolves_closed() {
    let factory = TestFactory::default();
    let pool = pool(&factory);
    let call = pool.acquire("a:1").unwrap();
    assert!(tokio::time::timeout(secs(600), call.closed())
        .await
        .is_err());
}

#[test]
fn pooled_clients_and_pools_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PooledClient<common::TestClient>>();
    send_sync::<ClientPool<TestFactory>>();
    fn send<T: Send>(_: &T) {}
    let factory = TestFactory::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let pool = pool(&factory);
    let call = pool.acquire("a:1").unwrap();
    send(&call.closed());
}
