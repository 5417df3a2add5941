//! Several threads acquire and release while the reaper scans every 2 ms
//! and the endpoint sets churn: no close of a client ever starts while a
//! call holds it (the acquire-vs-close race the states exist for). Real
//! time, a few hundred milliseconds, bounded loops.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use steadfast_pool::{ClientFactory, ClientPool, PoolConfig};

const ADDRESSES: [&str; 3] = ["a:1", "b:1", "c:1"];

/// Clients are serial numbers; a close checks nobody holds the serial.
#[derive(Clone, Default)]
struct Watchful {
    next: Arc<Mutex<u64>>,
    holding: Arc<Mutex<HashMap<u64, u32>>>,
    violation: Arc<AtomicBool>,
    closes: Arc<Mutex<u64>>,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl ClientFactory for Watchful {
    type Client = u64;
    type Error = Never;
    fn build(&self, _address: &str) -> Result<u64, Never> {
        let mut next = self.next.lock().unwrap();
        *next += 1;
        Ok(*next)
    }
    fn close(&self, client: u64) -> BoxFuture<'static, Result<(), Never>> {
        if self
            .holding
            .lock()
            .unwrap()
            .get(&client)
            .copied()
            .unwrap_or(0)
            > 0
        {
            self.violation.store(true, Ordering::SeqCst);
        }
        *self.closes.lock().unwrap() += 1;
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_close_starts_while_a_call_holds_the_client() {
    let factory = Watchful::default();
    let pool = ClientPool::new(
        factory.clone(),
        PoolConfig {
            scan_interval: Duration::from_millis(2),
            idle_timeout: Duration::from_millis(1),
            drain_timeout: Duration::from_secs(60),
            close_timeout: Duration::from_secs(1),
        },
    );
    let owner = pool.new_owner();
    let mut tasks = Vec::new();
    for t in 0..4usize {
        let pool = pool.clone();
        let factory = factory.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..400usize {
                let address = ADDRESSES[(t + i) % ADDRESSES.len()];
                let hold = pool.acquire(address).unwrap();
                let serial = *hold.client();
                *factory.holding.lock().unwrap().entry(serial).or_default() += 1;
                if i % 7 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                } else {
                    tokio::task::yield_now().await;
                }
                *factory.holding.lock().unwrap().get_mut(&serial).unwrap() -= 1;
                drop(hold);
                if i % 5 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }));
    }
    // Endpoint churn: each address dropped and re-listed now and then.
    let churn = {
        let pool = pool.clone();
        tokio::spawn(async move {
            for i in 0..100usize {
                let listed: Vec<String> = ADDRESSES
                    .iter()
                    .enumerate()
                    .filter(|(n, _)| (i + n) % 3 != 0)
                    .map(|(_, a)| a.to_string())
                    .collect();
                pool.sync_endpoints(owner, listed);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("bounded")
            .expect("task");
    }
    tokio::time::timeout(Duration::from_secs(20), churn)
        .await
        .expect("bounded")
        .expect("churn");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let stats = pool.stats();
    assert!(
        !factory.violation.load(Ordering::SeqCst),
        "a client was closed while in use: {stats:?}"
    );
    assert!(
        *factory.closes.lock().unwrap() > 10,
        "the test exercised closes: {stats:?}"
    );
    assert!(stats.reaped + stats.drained > 10, "{stats:?}");
    assert_eq!(stats.forced_closes, 0);
}
