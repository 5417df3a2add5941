//! Measures the pool's hot path: one `acquire` + drop of the hold (lock,
//! in-flight count, two last-use stamps), on one thread and on two threads
//! sharing the pool.
//!
//! `cargo run --release -p steadfast-pool --example acquire_cost`

use std::time::Instant;

use steadfast_pool::{ClientFactory, ClientPool, PoolConfig};

/// Builds a unit client; closes by dropping.
struct Unit;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl ClientFactory for Unit {
    type Client = ();
    type Error = Never;
    fn build(&self, _address: &str) -> Result<(), Never> {
        Ok(())
    }
}

const N: u32 = 1_000_000;

fn run(pool: &ClientPool<Unit>, address: &str) -> f64 {
    let start = Instant::now();
    for _ in 0..N {
        let held = pool.acquire(address).expect("client");
        std::hint::black_box(&held);
    }
    start.elapsed().as_nanos() as f64 / f64::from(N)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let pool = ClientPool::new(Unit, PoolConfig::default());
    for n in 0..64 {
        drop(pool.acquire(&format!("10.0.0.{n}:8080")));
    }
    println!(
        "1 thread : {:.0} ns per acquire+release",
        run(&pool, "10.0.0.7:8080")
    );
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let pool = pool.clone();
            let handle = rt.handle().clone();
            std::thread::spawn(move || {
                let _guard = handle.enter();
                run(&pool, &format!("10.0.0.{t}:8080"))
            })
        })
        .collect();
    for (t, thread) in threads.into_iter().enumerate() {
        println!(
            "2 threads: thread {t} {:.0} ns per acquire+release",
            thread.join().expect("thread")
        );
    }
    println!("{:?}", pool.stats());
}
