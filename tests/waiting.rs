//! Waiting on a directory (virtual time, through the whole engine with the
//! embedded registry and a scripted fetcher): `ready` / `select_ready` wake
//! on publishes and time out with a typed reason; `changes` streams the
//! latest state; and a waiter on unresolved metadata asks for a
//! demand-driven re-resolve, throttled to one per `min_probe_interval`
//! whatever the number of waiters, so a healed metadata service serves
//! within one interval instead of the grown 30 s backoff.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use steadfast::{
    CallerConfig, DirectoryStatus, EmptyReason, MetadataInfo, NoEndpointReason, Unresolved,
};
use tokio::time::Instant;

fn unresolved(status: &DirectoryStatus) -> Option<&Unresolved> {
    match status {
        DirectoryStatus::Empty(EmptyReason::Unresolved(u)) => Some(u),
        _ => None,
    }
}

/// One instance whose metadata fails for good, advanced until its retry
/// backoff reached the 30 s cap (the sixth failure) and 2 s into that wait.
async fn grown_backoff(fx: &Fixture) -> (MetadataInfo, steadfast::Directory) {
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    fx.fetcher.fail_always(&m.revision);
    let dir = fx.subscribe().await;
    fx.registry.put(instance(&m, 8001));
    let start = Instant::now();
    loop {
        let status = dir.status().await.expect("open");
        if unresolved(&status).is_some_and(|u| u.attempts >= 6) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{status:?}");
        advance(Duration::from_millis(100)).await;
    }
    advance(Duration::from_secs(2)).await;
    let status = dir.status().await.expect("open");
    assert_eq!(
        unresolved(&status).map(|u| u.attempts),
        Some(6),
        "{status:?}"
    );
    (m, dir)
}

#[actix_rt::test]
async fn a_caller_arriving_after_the_heal_is_served_within_50ms_not_the_30s_backoff() {
    let fx = Fixture::start();
    let (m, dir) = grown_backoff(&fx).await;
    let calls = fx.fetcher.calls(&m.revision);
    fx.fetcher.heal(&m.revision);
    let healed = Instant::now();
    let got = dir.select_ready(Duration::from_secs(5)).await;
    let took = healed.elapsed();
    println!(
        "select_ready after heal (backoff at 30 s): endpoint after {took:?} virtual, {} extra fetch(es), demand_probes {}",
        fx.fetcher.calls(&m.revision) - calls,
        fx.engine.stats().demand_probes
    );
    let endpoint = got.expect("an endpoint well before the 30 s retry");
    assert_eq!(endpoint.port(), 20000);
    assert!(took <= Duration::from_millis(50), "{took:?}");
    assert_eq!(fx.engine.stats().demand_probes, 1);
    assert_eq!(fx.engine.stats().demand_fetches, 1);
}

#[actix_rt::test]
async fn a_caller_already_waiting_when_it_heals_is_served_within_one_probe_interval() {
    let fx = Fixture::start();
    let (m, dir) = grown_backoff(&fx).await;
    let waiter = dir.clone();
    let task = actix_rt::spawn(async move {
        // A lease borrows its directory: the task hands back the port.
        let got = waiter.select_ready(Duration::from_secs(60)).await;
        (got.map(|lease| lease.port()), Instant::now())
    });
    advance(Duration::from_millis(300)).await;
    assert_eq!(
        fx.engine.stats().demand_probes,
        1,
        "the waiter asked at once"
    );
    fx.fetcher.heal(&m.revision);
    let healed = Instant::now();
    let (got, at) = task.await.expect("waiter");
    let took = at - healed;
    let interval = CallerConfig::default().min_probe_interval;
    println!(
        "waiting caller: endpoint {took:?} virtual after the heal (probe interval {interval:?})"
    );
    assert_eq!(got.expect("endpoint"), 20000);
    assert!(took <= interval + Duration::from_millis(50), "{took:?}");
}

#[actix_rt::test]
async fn a_thousand_waiters_cause_one_probe_per_interval() {
    let fx = Fixture::start();
    let (m, dir) = grown_backoff(&fx).await;
    let (calls, probes) = (
        fx.fetcher.calls(&m.revision),
        fx.engine.stats().demand_probes,
    );
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let d = dir.clone();
            actix_rt::spawn(async move {
                let got = d.select_ready(Duration::from_secs(60)).await;
                got.map(|lease| lease.port())
            })
        })
        .collect();
    let window = Duration::from_secs(10);
    advance(window).await;
    let s = fx.engine.stats();
    let (fetches, asked) = (
        fx.fetcher.calls(&m.revision) - calls,
        s.demand_probes - probes,
    );
    println!(
        "1000 waiters for {window:?}: {asked} demand probe(s), {fetches} metadata fetch(es), {} demand fetch(es)",
        s.demand_fetches
    );
    // One probe at once, then one per 1 s interval: 10 or 11 in 10 s.
    assert!((10..=11).contains(&asked), "{asked} probes");
    assert!(fetches <= asked as usize + 1, "{fetches} fetches");
    assert!(fetches >= 10, "the probes did fetch: {fetches}");
    fx.fetcher.heal(&m.revision);
    advance(Duration::from_millis(1100)).await;
    let mut served = 0;
    for t in tasks {
        if t.await.expect("waiter").is_ok() {
            served += 1;
        }
    }
    assert_eq!(served, 1000);
}

#[actix_rt::test]
async fn the_probe_interval_is_read_live() {
    let fx = Fixture::start();
    let (_m, dir) = grown_backoff(&fx).await;
    fx.engine.set_caller_config(CallerConfig {
        min_probe_interval: Duration::from_millis(200),
        ..CallerConfig::default()
    });
    let probes = fx.engine.stats().demand_probes;
    let got = dir.select_ready(Duration::from_secs(2)).await;
    let asked = fx.engine.stats().demand_probes - probes;
    println!("2 s wait at a 200 ms interval: {asked} probes");
    assert!((10..=11).contains(&asked), "{asked}");
    let why = got.expect_err("still failing");
    assert!(
        matches!(why.reason, NoEndpointReason::MetadataUnresolved(ref u) if u.attempts > 6),
        "{why:?}"
    );
}

#[actix_rt::test]
async fn timeouts_say_why_and_a_closed_directory_answers_at_once() {
    let fx = Fixture::start();
    let dir = fx.subscribe().await;
    // Nothing registered: the registry answered empty.
    let start = Instant::now();
    let why = dir
        .select_ready(Duration::from_millis(500))
        .await
        .expect_err("empty");
    assert_eq!(why.reason, NoEndpointReason::RegistryEmpty);
    assert!(start.elapsed() >= Duration::from_millis(500));
    assert_eq!(
        fx.engine.stats().demand_probes,
        0,
        "no probe: not unresolved"
    );
    let why = dir.ready(Duration::ZERO).await.expect_err("empty");
    assert_eq!(why.reason, NoEndpointReason::RegistryEmpty);
    // A deadline may be an instant as well.
    let at = Instant::now() + Duration::from_millis(300);
    let why = dir.ready(at).await.expect_err("empty");
    assert_eq!(why.reason, NoEndpointReason::RegistryEmpty);
    let woke = Instant::now();
    assert!(
        woke >= at && woke <= at + Duration::from_millis(5),
        "{woke:?}"
    );

    // Ready: answered at once.
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    fx.registry.put(instance(&m, 8001));
    let snap = dir.ready(Duration::from_secs(1)).await.expect("ready");
    assert_eq!(snap.len(), 1);
    let start = Instant::now();
    assert!(dir.select_ready(Duration::from_secs(1)).await.is_ok());
    assert_eq!(start.elapsed(), Duration::ZERO);

    // Unsubscribed: at once, whatever the deadline.
    assert_eq!(fx.engine.unsubscribe(&reference()).await, Ok(true));
    let start = Instant::now();
    let why = dir
        .select_ready(Duration::from_secs(60))
        .await
        .expect_err("closed");
    assert_eq!(why.reason, NoEndpointReason::NotSubscribed);
    assert_eq!(start.elapsed(), Duration::ZERO);
    fx.engine.shutdown().await;
}

#[actix_rt::test]
async fn a_waiter_wakes_on_the_publish_not_on_a_poll() {
    let fx = Fixture::start();
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    let waiter = dir.clone();
    let task = actix_rt::spawn(async move {
        let got = waiter.ready(Duration::from_secs(30)).await;
        (got, Instant::now())
    });
    advance(Duration::from_secs(7)).await;
    fx.registry.put(instance(&m, 8001));
    let put = Instant::now();
    let (got, at) = task.await.expect("waiter");
    assert!(got.expect("ready").status().is_ready());
    assert!(at - put <= Duration::from_millis(5), "{:?}", at - put);
}

#[actix_rt::test]
async fn changes_stream_the_latest_state_and_end_on_close() {
    let fx = Fixture::start();
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    settle().await;
    let mut changes = Box::pin(dir.changes());
    let (v0, s0) = changes.next().await.expect("the current state first");
    assert_eq!(s0, DirectoryStatus::Empty(EmptyReason::RegistryEmpty));
    // Three changes while nobody reads: the reader sees the latest, no backlog.
    for port in [8001, 8002, 8003] {
        fx.registry.put(instance(&m, port));
        settle().await;
    }
    let (v1, s1) = changes.next().await.expect("a change");
    assert!(v1 > v0 + 1, "coalesced: {v0} -> {v1}");
    assert!(s1.is_ready());
    assert_eq!(dir.snapshot().expect("open").version(), v1, "the latest");
    assert_eq!(dir.snapshot().expect("open").len(), 3);
    let next = actix_rt::spawn(async move {
        let mut n = 0;
        while changes.next().await.is_some() {
            n += 1;
        }
        n
    });
    settle().await;
    fx.engine.shutdown().await;
    let n = tokio::time::timeout(Duration::from_secs(1), next)
        .await
        .expect("the stream ends on close")
        .expect("task");
    assert!(n <= 1, "{n}");
}
