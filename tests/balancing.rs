//! Balancing through the whole engine: `Directory::select()` leases,
//! outcome feedback, passive ejection and readmission on virtual time, the
//! directory's strategy override and the live settings, the typed reasons
//! for no endpoint; and the target on real loopback servers: after one of
//! two providers dies, at most 1 user-visible pick of it once its first
//! failure is reported.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use steadfast::{CallerConfig, FailureClass, NoEndpointReason, Strategy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Two providers, ready: R1 on service port 20000 (:8001), R2 on 20001 (:8002).
async fn two(fx: &Fixture) -> steadfast::Directory {
    let m1 = metadata(APP, 20000, "t1");
    let m2 = metadata(APP, 20001, "t2");
    fx.fetcher.serve(m1.clone());
    fx.fetcher.serve(m2.clone());
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, 8001));
    fx.registry.put(instance(&m2, 8002));
    wait_for(&dir, "two endpoints", Duration::from_millis(100), |v| {
        v.endpoints.len() == 2
    })
    .await;
    dir
}

/// A new record of R2 (weight 500, same incarnation), once the directory
/// shows it.
async fn heavier_r2(fx: &Fixture, dir: &steadfast::Directory) {
    let m2 = metadata(APP, 20001, "t2");
    let mut heavier = instance(&m2, 8002);
    heavier.weight = 500;
    fx.registry.put(heavier);
    wait_for(dir, "weight 500", Duration::from_millis(100), |v| {
        v.endpoints.iter().any(|u| u.weight() == 500)
    })
    .await;
}

fn ports_of(dir: &steadfast::Directory, n: usize) -> (usize, usize) {
    let mut c = (0, 0);
    for _ in 0..n {
        match dir.select().expect("a pick").port() {
            20000 => c.0 += 1,
            _ => c.1 += 1,
        }
    }
    c
}

#[actix_rt::test]
async fn a_refused_endpoint_is_routed_around_until_its_ejection_ends() {
    let fx = Fixture::start();
    let dir = two(&fx).await;
    assert_eq!(dir.strategy(), Strategy::PeakEwma, "the default");
    let lease = loop {
        let l = dir.select().unwrap();
        if l.port() == 20001 {
            break l;
        }
    };
    assert_eq!(lease.stats().in_flight(), 1);
    let url = lease.endpoint().clone();
    let report = lease.failure(FailureClass::ConnectionRefused);
    assert!(report.ejection.is_some());
    assert_eq!(url.stats().in_flight(), 0);
    assert_eq!(dir.ejected(), 1);
    assert_eq!(ports_of(&dir, 500), (500, 0), "routed around");
    assert_eq!(dir.snapshot().unwrap().len(), 2, "never evicted");
    advance(Duration::from_secs(29)).await;
    assert_eq!(ports_of(&dir, 200).1, 0, "still ejected at 29 s");
    advance(Duration::from_millis(1100)).await;
    assert_eq!(dir.ejected(), 0);
    // Readmitted after 30 s (weighted random shows it; peak EWMA would
    // still prefer the other while the failure's latency decays).
    dir.set_strategy(Some(Strategy::WeightedRandom));
    assert!(ports_of(&dir, 400).1 > 50, "readmitted after 30 s");
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn five_failures_in_a_row_eject_and_a_weight_change_keeps_the_ejection() {
    let fx = Fixture::start();
    let dir = two(&fx).await;
    // Weighted random keeps picking the failing one (peak EWMA would avoid
    // it after its first failure).
    dir.set_strategy(Some(Strategy::WeightedRandom));
    let mut trips = 0;
    for _ in 0..200 {
        let l = dir.select().unwrap();
        if l.port() == 20001 {
            trips += usize::from(l.failure(FailureClass::Server).ejection.is_some());
        } else {
            l.success_in(Duration::from_millis(5));
        }
        if dir.ejected() == 1 {
            break;
        }
    }
    assert_eq!((trips, dir.ejected()), (1, 1));
    // A new record of the same instance (weight changed) replaces the URL:
    // its statistics, ejection included, carry over.
    heavier_r2(&fx, &dir).await;
    assert_eq!(ports_of(&dir, 300), (300, 0), "still ejected");
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn calls_in_flight_across_a_weight_change_count_on_the_new_record() {
    let fx = Fixture::start();
    let dir = two(&fx).await;
    dir.set_strategy(Some(Strategy::RoundRobin));
    let held: Vec<_> = (0..6)
        .map(|_| dir.select().unwrap())
        .filter(|l| l.port() == 20001)
        .collect();
    assert_eq!(held.len(), 3);
    let in_flight = |dir: &steadfast::Directory| {
        let snap = dir.snapshot().unwrap();
        let ep = snap.iter().find(|e| e.port() == 20001).unwrap().clone();
        (ep.weight(), ep.stats().in_flight())
    };
    assert_eq!(in_flight(&dir), (100, 3));
    // A new record of the same instance (weight changed) replaces the URL:
    // the calls out on the old one are counted on the new one, and end there.
    heavier_r2(&fx, &dir).await;
    assert_eq!(in_flight(&dir), (500, 3), "the calls in flight moved");
    let mut held = held.into_iter();
    held.next().unwrap().success_in(Duration::from_millis(7));
    assert_eq!(in_flight(&dir), (500, 2));
    drop(held);
    assert_eq!(
        in_flight(&dir),
        (500, 0),
        "each call ended once, on the new record"
    );
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn the_strategy_is_the_engines_live_setting_unless_the_directory_overrides_it() {
    let fx = Fixture::start();
    let dir = two(&fx).await;
    fx.engine.set_caller_config(CallerConfig {
        strategy: Strategy::RoundRobin,
        ..CallerConfig::default()
    });
    assert_eq!(dir.strategy(), Strategy::RoundRobin);
    let seq: Vec<u16> = (0..4).map(|_| dir.select().unwrap().port()).collect();
    assert!(
        seq[0] != seq[1] && seq[0] == seq[2] && seq[1] == seq[3],
        "{seq:?}"
    );
    dir.set_strategy(Some(Strategy::LeastInFlight));
    assert_eq!(dir.strategy(), Strategy::LeastInFlight);
    // Hold a call on one: least-in-flight picks the other every time.
    let held = dir.select().unwrap();
    let busy = held.port();
    assert!((0..100).all(|_| dir.select().unwrap().port() != busy));
    drop(held);
    dir.set_strategy(None);
    assert_eq!(dir.strategy(), Strategy::RoundRobin);
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn select_says_why_there_is_no_endpoint() {
    let fx = Fixture::start();
    let mut caller = CallerConfig::default();
    caller.outlier.max_ejection_percent = 100;
    fx.engine.set_caller_config(caller);
    let m1 = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m1.clone());
    let dir = fx.subscribe().await;
    assert_eq!(
        dir.select().unwrap_err().reason,
        NoEndpointReason::RegistryEmpty
    );
    fx.registry.put(instance(&m1, 8001));
    wait_for(&dir, "ready", Duration::from_millis(100), |v| {
        v.status.is_ready()
    })
    .await;
    let r = dir.select().unwrap().failure(FailureClass::Closing);
    assert!(r.closing_sent, "the directory is told");
    assert_eq!(
        dir.select().unwrap_err().reason,
        NoEndpointReason::AllEjected { endpoints: 1 },
        "100 % may be ejected: nothing left"
    );
    fx.engine.unsubscribe(dir.reference()).await.unwrap();
    assert_eq!(
        dir.select().unwrap_err().reason,
        NoEndpointReason::NotSubscribed
    );
    fx.engine.shutdown().await;
}

/// A loopback HTTP server answering `200 ok` to every connection, until
/// its task is aborted (the listener closes: connects are refused).
async fn server() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 512];
            let _ = tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await;
        }
    });
    (port, task)
}

/// One call to `addr`: a GET under a 2 s deadline, classed on failure.
async fn call(addr: String) -> Result<(), FailureClass> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(&addr).await?;
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out.starts_with(b"HTTP/1.1 200"))
    };
    match tokio::time::timeout(Duration::from_secs(2), io).await {
        Err(_) => Err(FailureClass::Timeout),
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(FailureClass::Server),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(FailureClass::ConnectionRefused)
        }
        Ok(Err(_)) => Err(FailureClass::Server),
    }
}

#[actix_rt::test]
async fn target_after_a_provider_dies_at_most_one_pick_of_it_once_its_failure_is_reported() {
    // Real time and real sockets (loopback): the clock is not paused.
    let fx = Fixture::start_full(|b, _| b);
    let (p1, _s1) = server().await;
    let (p2, s2) = server().await;
    let (m1, m2) = (metadata(APP, p1, "t1"), metadata(APP, p2, "t2"));
    fx.fetcher.serve(m1.clone());
    fx.fetcher.serve(m2.clone());
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m1, p1));
    fx.registry.put(instance(&m2, p2));
    wait_for(&dir, "two endpoints", Duration::from_secs(5), |v| {
        v.endpoints.len() == 2
    })
    .await;
    for _ in 0..40 {
        let l = dir.select().unwrap();
        assert_eq!(call(l.address()).await, Ok(()));
        l.success();
    }
    // "SIGKILL": the listener closes; the registry record stays.
    s2.abort();
    let _ = s2.await;
    let reported = Arc::new(AtomicBool::new(false));
    let (dead_after, failures, ok) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let (dir, reported) = (dir.clone(), reported.clone());
            let (dead_after, failures, ok) = (dead_after.clone(), failures.clone(), ok.clone());
            tokio::spawn(async move {
                for _ in 0..50 {
                    let lease = dir.select().expect("a pick");
                    let dead = lease.port() == p2;
                    if dead && reported.load(Ordering::SeqCst) {
                        dead_after.fetch_add(1, Ordering::SeqCst);
                    }
                    match call(lease.address()).await {
                        Ok(()) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                            lease.success();
                        }
                        Err(class) => {
                            failures.fetch_add(1, Ordering::SeqCst);
                            lease.failure(class);
                            reported.store(true, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for c in callers {
        c.await.unwrap();
    }
    let dead_after = dead_after.load(Ordering::SeqCst);
    println!(
        "target picks of the dead endpoint after its first reported failure = {dead_after} \
         (<= 1) {}; {} failed call(s), {} ok of 400",
        if dead_after <= 1 { "PASS" } else { "MISS" },
        failures.load(Ordering::SeqCst),
        ok.load(Ordering::SeqCst)
    );
    assert!(
        reported.load(Ordering::SeqCst),
        "the dead endpoint was tried"
    );
    assert!(dead_after <= 1, "{dead_after} picks of the dead endpoint");
    assert_eq!(
        dir.snapshot().unwrap().len(),
        2,
        "routed around, not evicted"
    );
    assert_eq!(dir.ejected(), 1);
    fx.engine.shutdown().await;
}
