//! The pool shell's reaper on tokio's paused clock: idle scans, rescue,
//! close failures, removal by identity, long calls.

mod common;

use std::time::Duration;

use common::{secs, settle, CloseScript, TestFactory};
use steadfast_pool::{ClientPool, PoolConfig};

fn config(scan: u64, idle: u64) -> PoolConfig {
    PoolConfig {
        scan_interval: secs(scan),
        idle_timeout: secs(idle),
        drain_timeout: secs(30),
        close_timeout: secs(5),
    }
}

#[tokio::test(start_paused = true)]
async fn idle_client_with_a_call_in_flight_is_skipped_then_reaped_next_round_after_the_call_ends() {
    let factory = TestFactory::default();
    // Rounds every 120 s, idle after 60 s.
    let pool = ClientPool::new(factory.clone(), config(120, 60));
    let call = pool.acquire("a:1").unwrap();
    tokio::time::sleep(secs(125)).await; // round at 120 s
    assert!(factory.closed().is_empty(), "a client in use was reaped");
    assert_eq!(pool.stats().reaped, 0);
    assert_eq!(pool.stats().rescued, 0, "skipped by the scan, not rescued");
    drop(call); // the call ends at 125 s
    tokio::time::sleep(secs(120)).await; // round at 240 s
    settle().await;
    assert_eq!(factory.closed(), vec![1]);
    assert_eq!(pool.stats().reaped, 1);
    assert_eq!(pool.stats().active, 0);
}

#[tokio::test(start_paused = true)]
async fn client_used_between_scan_and_close_is_rescued() {
    let factory = TestFactory::default();
    // A's close takes 4 s: B is used meanwhile, before its own close.
    factory.script("a:1", CloseScript::Slow(secs(4)));
    let pool = ClientPool::new(factory.clone(), config(200, 180));
    drop(pool.acquire("a:1").unwrap());
    drop(pool.acquire("b:1").unwrap());
    tokio::time::sleep(secs(201)).await; // round at 200 s: A closing
    assert_eq!(factory.close_started(), vec![1]);
    let b = pool.acquire("b:1").unwrap();
    assert_eq!(b.serial, 2, "B is still pooled");
    tokio::time::sleep(secs(1)).await;
    drop(b); // used and released at 202 s, while A still closes
    tokio::time::sleep(secs(20)).await;
    assert_eq!(factory.closed(), vec![1], "B was used after the scan: kept");
    let stats = pool.stats();
    assert_eq!((stats.reaped, stats.rescued, stats.active), (1, 1, 1));
    assert_eq!(pool.acquire("b:1").unwrap().serial, 2);
}

#[tokio::test(start_paused = true)]
async fn close_failure_does_not_stop_the_rest() {
    let factory = TestFactory::default();
    factory.script("a:1", CloseScript::Fail);
    factory.script("b:1", CloseScript::Panic);
    factory.script("c:1", CloseScript::Hang);
    let pool = ClientPool::new(factory.clone(), config(60, 30));
    for address in ["a:1", "b:1", "c:1", "d:1"] {
        drop(pool.acquire(address).unwrap());
    }
    // Round at 60 s; C's close is cut by the 5 s close timeout.
    tokio::time::sleep(secs(70)).await;
    // One by one, in the order of the address stripes.
    let mut started = factory.close_started();
    started.sort_unstable();
    assert_eq!(started, vec![1, 2, 3, 4], "every close was tried");
    assert_eq!(factory.closed(), vec![4], "D closed after three failures");
    let stats = pool.stats();
    assert_eq!(
        (stats.reaped, stats.close_failures, stats.active),
        (4, 3, 0)
    );
    // A failed close still removes its client: a fresh one is built.
    assert_eq!(pool.acquire("a:1").unwrap().serial, 5);
}

#[tokio::test(start_paused = true)]
async fn stale_close_callback_does_not_evict_a_rebuilt_client() {
    let factory = TestFactory::default();
    factory.script("a:1", CloseScript::Slow(secs(3)));
    let pool = ClientPool::new(factory.clone(), config(60, 30));
    drop(pool.acquire("a:1").unwrap());
    tokio::time::sleep(secs(61)).await; // old client 1 is closing (3 s)
    assert_eq!(factory.close_started(), vec![1]);
    let rebuilt = pool.acquire("a:1").unwrap();
    assert_eq!(
        rebuilt.serial, 2,
        "a closing client is refused, a fresh one built"
    );
    assert_eq!(pool.stats().refused_acquires, 1);
    drop(rebuilt);
    tokio::time::sleep(secs(5)).await; // the old close has finished
    assert_eq!(factory.closed(), vec![1]);
    assert_eq!(
        pool.acquire("a:1").unwrap().serial,
        2,
        "the old client's close evicted the rebuilt one"
    );
    assert_eq!(pool.stats().built, 2);
}

#[tokio::test(start_paused = true)]
async fn call_longer_than_the_idle_timeout_is_never_reaped_mid_flight() {
    let factory = TestFactory::default();
    // Rounds every 60 s, idle after 180 s; the call runs 0 .. 200 s.
    let pool = ClientPool::new(factory.clone(), config(60, 180));
    let call = pool.acquire("a:1").unwrap();
    tokio::time::sleep(secs(200)).await;
    assert!(!call.is_closed());
    drop(call);
    // Rounds at 240, 300, 360 s: idle 40, 100, 160 s since the call ENDED.
    tokio::time::sleep(secs(190)).await;
    assert!(
        factory.closed().is_empty(),
        "reaped right after a long call"
    );
    assert_eq!(pool.stats().active, 1);
    tokio::time::sleep(secs(60)).await; // round at 420 s: idle 220 s
    assert_eq!(factory.closed(), vec![1]);
}

#[tokio::test(start_paused = true)]
async fn zero_idle_timeout_disables_reaping() {
    let factory = TestFactory::default();
    let pool = ClientPool::new(factory.clone(), config(60, 0));
    drop(pool.acquire("a:1").unwrap());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(factory.closed().is_empty());
    assert_eq!(pool.stats().active, 1);
}

#[tokio::test(start_paused = true)]
async fn reaper_ends_when_the_last_handle_drops() {
    let factory = TestFactory::default();
    let pool = ClientPool::new(factory.clone(), config(60, 180));
    let second = pool.clone();
    drop(pool.acquire("a:1").unwrap());
    drop(pool);
    settle().await;
    assert_eq!(
        std::sync::Arc::strong_count(&factory.log),
        2,
        "one handle left"
    );
    drop(second);
    settle().await;
    assert_eq!(
        std::sync::Arc::strong_count(&factory.log),
        1,
        "the reaper (and the pool) still hold the factory"
    );
}
