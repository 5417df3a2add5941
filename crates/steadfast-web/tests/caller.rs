//! The Caller over real loopback sockets: actix-web providers, the embedded
//! registry, the engine in the test's actix System. Real time (sockets
//! cannot run on a paused clock): every wait is bounded, and every
//! wall-clock bound is no tighter than the deadline of what it measures
//! (the tests share two cores with other CPU-heavy work) and printed.

mod support;

use std::time::Duration;

use reqwest::Method;
use steadfast_core::{CallRetryPolicy, GiveUp, RetryBudgetConfig};
use steadfast_pool::{ClientPool, PoolConfig};
use steadfast_web::ReqwestFactory;
use steadfast_web::{CallError, Caller};
use support::{dead_port, resetter, wait_endpoints, wait_until, Mode, Provider, World};

#[actix_rt::test]
async fn a_call_reaches_the_provider_at_the_url_built_from_the_endpoint() {
    let world = World::start();
    let dir = world.subscribe().await;
    let p = Provider::start(Mode::Serve);
    world.register(p.port, "api/v1");
    wait_endpoints(&dir, 1).await;
    let caller = Caller::new(dir);
    let answer = caller.get("/greet/ann?loud=1").await.expect("answer");
    assert_eq!(answer.attempts, 1);
    assert_eq!(answer.endpoint.port(), p.port);
    let body = answer.response.text().await.expect("body");
    // Service path, then the call's path; the call's query, then the
    // service's non-internal params, encoded (no `timestamp`, `interface`
    // nor any `steadfast.*`).
    assert_eq!(
        body,
        format!("{} /api/v1/greet/ann?loud=1&lang=en%20GB", p.port)
    );
    let s = caller.stats();
    assert_eq!((s.calls, s.attempts, s.retries, s.failed), (1, 1, 0, 0));
}

#[actix_rt::test]
async fn a_dead_endpoint_is_retried_on_another_one_and_ejected() {
    let world = World::start();
    let dir = world.subscribe().await;
    let live = Provider::start(Mode::Serve);
    let dead = dead_port();
    world.register(live.port, "");
    world.register(dead, "");
    wait_endpoints(&dir, 2).await;
    let caller = Caller::new(dir);
    for _ in 0..30 {
        let answer = caller.get("x").await.expect("every call succeeds");
        assert!(answer.attempts <= 2, "at most one retry per call");
        assert_eq!(answer.endpoint.port(), live.port);
    }
    let s = caller.stats();
    assert_eq!(s.failed, 0);
    // The refused connection ejects the dead endpoint at once: at most the
    // first call that picked it retried.
    assert!(s.retries <= 1, "{s:?}");
    assert_eq!(live.hits(), 30);
}

#[actix_rt::test]
async fn a_retry_waits_for_another_endpoint_and_never_repeats_the_closing_one() {
    let world = World::start();
    let dir = world.subscribe().await;
    let closing = Provider::start(Mode::Closing);
    world.register(closing.port, "");
    wait_endpoints(&dir, 1).await;
    let caller = Caller::builder(dir.clone())
        .deadline(Duration::from_secs(3))
        .build();
    let call = actix_rt::spawn({
        let caller = caller.clone();
        async move { caller.get("x").await }
    });
    // The first attempt gets the closing 503; only then does another
    // endpoint appear, and the call goes there.
    wait_until("the closing answer", || closing.hits() == 1).await;
    let other = Provider::start(Mode::Serve);
    world.register(other.port, "");
    let answer = call.await.expect("joined").expect("answered by the other");
    assert_eq!(answer.attempts, 2);
    assert_eq!(answer.endpoint.port(), other.port);
    assert_eq!(closing.hits(), 1, "the closing endpoint is never retried");
}

#[actix_rt::test]
async fn with_no_other_endpoint_the_retry_waits_a_bounded_time_then_gives_up() {
    let world = World::start();
    let dir = world.subscribe().await;
    let closing = Provider::start(Mode::Closing);
    world.register(closing.port, "");
    wait_endpoints(&dir, 1).await;
    // The wait for another endpoint ends at the deadline when that comes
    // first...
    let caller = Caller::builder(dir.clone())
        .deadline(Duration::from_millis(400))
        .build();
    let started = tokio::time::Instant::now();
    let err = caller.get("x").await.expect_err("no other endpoint");
    let took = started.elapsed();
    eprintln!("gave up at the 400 ms deadline after {took:?} (bound 2 s)");
    assert!(
        matches!(&err, CallError::GaveUp { attempts: 1, why: GiveUp::NoOtherEndpoint, last }
            if matches!(**last, CallError::Closing { .. })),
        "{err:?}"
    );
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(closing.hits(), 1);
    assert_eq!(caller.stats().failed, 1);
    assert_eq!(caller.stats().retries, 0, "no retry ran");
    // ... and at the policy's `other_endpoint_wait` under a long deadline:
    // a dead single endpoint fails its callers fast.
    let world = World::start();
    let dir = world.subscribe().await;
    world.register(dead_port(), "");
    wait_endpoints(&dir, 1).await;
    let deadline = Duration::from_secs(10);
    let caller = Caller::builder(dir)
        .deadline(deadline)
        .retry_policy(CallRetryPolicy {
            other_endpoint_wait: Duration::from_millis(300),
            ..CallRetryPolicy::default()
        })
        .build();
    let started = tokio::time::Instant::now();
    let err = caller.get("x").await.expect_err("no other endpoint");
    let took = started.elapsed();
    // Fast: at the 300 ms wait, well before half the call's deadline.
    let bound = deadline / 2;
    eprintln!("gave up at the 300 ms wait after {took:?} (bound {bound:?})");
    assert!(
        matches!(
            &err,
            CallError::GaveUp {
                why: GiveUp::NoOtherEndpoint,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        took >= Duration::from_millis(250) && took < bound,
        "{took:?}"
    );
}

#[actix_rt::test]
async fn a_reset_is_retried_for_get_but_not_for_post() {
    let world = World::start();
    let dir = world.subscribe().await;
    let (port, connections) = resetter();
    world.register(port, "");
    wait_endpoints(&dir, 1).await;
    let caller = Caller::builder(dir.clone())
        .deadline(Duration::from_secs(3))
        .build();
    // POST: the request may have run; no retry.
    let err = caller
        .send(Method::POST, "x", |r| r.body("once"))
        .await
        .expect_err("reset");
    assert!(
        matches!(
            err,
            CallError::Transport {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let after_post = connections.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(after_post, 1, "a POST is sent once");
    // GET: idempotent, retried on another endpoint once one is there.
    let call = actix_rt::spawn({
        let caller = caller.clone();
        async move { caller.get("x").await }
    });
    wait_until("the GET reaching the resetter", || {
        connections.load(std::sync::atomic::Ordering::SeqCst) > after_post
    })
    .await;
    // While the resetter is the only endpoint (not ejected: one `Server`
    // failure), the retry waits for another one instead of repeating it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
    let live = Provider::start(Mode::Serve);
    world.register(live.port, "");
    let answer = call.await.expect("joined").expect("retried elsewhere");
    assert_eq!(answer.attempts, 2);
    assert_eq!(answer.endpoint.port(), live.port);
}

#[actix_rt::test]
async fn a_spent_budget_refuses_the_retry() {
    let world = World::start();
    let dir = world.subscribe().await;
    world.register(dead_port(), "");
    wait_endpoints(&dir, 1).await;
    // A wait for another endpoint would last until the deadline: the
    // refusal must come before it.
    let deadline = Duration::from_secs(10);
    let caller = Caller::builder(dir)
        .budget(RetryBudgetConfig::none())
        .deadline(deadline)
        .retry_policy(CallRetryPolicy {
            other_endpoint_wait: deadline,
            ..CallRetryPolicy::default()
        })
        .build();
    let started = tokio::time::Instant::now();
    let err = caller.get("x").await.expect_err("refused");
    let took = started.elapsed();
    eprintln!("budget refusal after {took:?} (a wait would last {deadline:?})");
    assert!(
        matches!(&err, CallError::GaveUp { attempts: 1, why: GiveUp::Budget, last }
            if matches!(**last, CallError::Connect { .. })),
        "{err:?}"
    );
    assert!(err.is_retryable(), "a later call may succeed");
    assert!(took < deadline, "no wait for another endpoint: {took:?}");
    let s = caller.stats();
    assert_eq!((s.budget_refused, s.retries, s.failed), (1, 0, 1));
}

#[actix_rt::test]
async fn no_endpoint_within_the_deadline_says_why() {
    let world = World::start();
    let dir = world.subscribe().await;
    let caller = Caller::builder(dir)
        .deadline(Duration::from_millis(200))
        .build();
    let err = caller.get("x").await.expect_err("nothing registered");
    assert!(matches!(err, CallError::NoEndpoint(_)), "{err:?}");
    assert_eq!(caller.stats().attempts, 0);
}

#[actix_rt::test]
async fn a_client_closed_while_in_use_is_retried_on_another_endpoint() {
    let world = World::start();
    let dir = world.subscribe().await;
    let slow = Provider::start(Mode::Slow);
    world.register(slow.port, "");
    wait_endpoints(&dir, 1).await;
    let pool = ClientPool::new(
        ReqwestFactory::default(),
        PoolConfig {
            drain_timeout: Duration::from_millis(100),
            ..PoolConfig::default()
        },
    );
    let caller = Caller::builder(dir.clone())
        .pool(pool.clone())
        .deadline(Duration::from_secs(5))
        .build();
    let call = actix_rt::spawn({
        let caller = caller.clone();
        async move { caller.get("x").await }
    });
    wait_until("the slow call in flight", || slow.hits() == 1).await;
    // The endpoint leaves: its client drains, is force-closed after 100 ms
    // while the call still runs, and the call goes to the new endpoint.
    let live = Provider::start(Mode::Serve);
    world.register(live.port, "");
    world.unregister(slow.port);
    let answer = call.await.expect("joined").expect("retried elsewhere");
    assert_eq!(answer.attempts, 2);
    assert_eq!(answer.endpoint.port(), live.port);
    assert!(pool.stats().forced_closes >= 1, "{:?}", pool.stats());
}

#[actix_rt::test]
async fn a_post_whose_client_is_closed_while_in_use_is_not_sent_again() {
    let world = World::start();
    let dir = world.subscribe().await;
    let slow = Provider::start(Mode::Slow);
    world.register(slow.port, "");
    wait_endpoints(&dir, 1).await;
    let pool = ClientPool::new(
        ReqwestFactory::default(),
        PoolConfig {
            drain_timeout: Duration::from_millis(100),
            ..PoolConfig::default()
        },
    );
    let caller = Caller::builder(dir.clone())
        .pool(pool.clone())
        .deadline(Duration::from_secs(5))
        .build();
    let call = actix_rt::spawn({
        let caller = caller.clone();
        async move { caller.send(Method::POST, "x", |r| r).await }
    });
    wait_until("the slow call in flight", || slow.hits() == 1).await;
    let live = Provider::start(Mode::Serve);
    world.register(live.port, "");
    world.unregister(slow.port);
    // The provider may have run the POST: cut at the forced close, it is
    // not repeated on the new endpoint.
    match call.await.expect("joined") {
        Err(e @ CallError::ClosedWhileInUse { .. }) => assert!(!e.is_retryable()),
        other => panic!("expected closed while in use, got {other:?}"),
    }
    assert_eq!(live.hits(), 0, "the POST was not sent again");
    assert_eq!(caller.stats().retries, 0);
}

#[actix_rt::test]
async fn reading_a_stalled_body_is_bounded_by_the_deadline() {
    let world = World::start();
    let dir = world.subscribe().await;
    let stall = Provider::start(Mode::StallBody);
    world.register(stall.port, "");
    wait_endpoints(&dir, 1).await;
    let caller = Caller::builder(dir.clone())
        .deadline(Duration::from_millis(300))
        .build();
    let answer = caller.get("x").await.expect("headers arrive at once");
    let started = std::time::Instant::now();
    let body = answer.response.text().await;
    let took = started.elapsed();
    let err = body.expect_err("the body never ends");
    eprintln!("stalled body cut by the 300 ms deadline after {took:?} (bound 2 s)");
    assert!(err.is_timeout(), "{err:?}");
    assert!(took < Duration::from_secs(2), "bounded, took {took:?}");
}

#[actix_rt::test]
async fn the_pool_follows_the_directory() {
    let world = World::start();
    let dir = world.subscribe().await;
    let (a, b) = (Provider::start(Mode::Serve), Provider::start(Mode::Serve));
    world.register(a.port, "");
    world.register(b.port, "");
    wait_endpoints(&dir, 2).await;
    // Round-robin, so that both endpoints get a client.
    dir.set_strategy(Some(steadfast_core::Strategy::RoundRobin));
    let pool = ClientPool::new(ReqwestFactory::default(), PoolConfig::default());
    let caller = Caller::builder(dir.clone()).pool(pool.clone()).build();
    for _ in 0..20 {
        caller.get("x").await.expect("answer");
    }
    let before = pool.stats();
    assert_eq!((before.active, before.built), (2, 2), "{before:?}");
    world.unregister(a.port);
    wait_endpoints(&dir, 1).await;
    // The client of the endpoint that left drains and closes (nothing in
    // flight): only b's stays active.
    wait_until("a's client drained", || {
        let s = pool.stats();
        s.active == 1 && s.draining == 0 && s.drained == 1
    })
    .await;
    assert!(b.hits() > 0 && a.hits() > 0, "both were called");
    // The last clone dropping ends the feed: the pool forgets the owner,
    // so b's client drains too.
    drop(caller);
    wait_until("b's client drained", || {
        let s = pool.stats();
        s.active == 0 && s.drained == 2
    })
    .await;
}

#[actix_rt::test]
async fn a_hung_endpoint_costs_one_attempt_timeout_then_the_call_goes_elsewhere() {
    let world = World::start();
    let dir = world.subscribe().await;
    let hung = Provider::start(Mode::Slow);
    world.register(hung.port, "");
    wait_endpoints(&dir, 1).await;
    // A wait for another endpoint after the hung POST would last until the
    // deadline: the POST's error must come before it.
    let deadline = Duration::from_secs(10);
    let caller = Caller::builder(dir.clone())
        .deadline(deadline)
        .attempt_timeout(Duration::from_millis(300))
        .retry_policy(CallRetryPolicy {
            other_endpoint_wait: deadline,
            ..CallRetryPolicy::default()
        })
        .build();
    // A POST that hangs is not repeated: the attempt timeout is final for it.
    let started = tokio::time::Instant::now();
    let err = caller
        .send(Method::POST, "x", |r| r.body("once"))
        .await
        .expect_err("hung");
    assert!(
        matches!(
            err,
            CallError::AttemptTimeout {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    let took = started.elapsed();
    eprintln!(
        "hung POST failed after {took:?} (attempt timeout 300 ms; a wait would last {deadline:?})"
    );
    assert!(took < deadline, "no wait for another endpoint: {took:?}");
    let call = actix_rt::spawn({
        let caller = caller.clone();
        async move { caller.get("x").await }
    });
    wait_until("the GET hanging", || hung.hits() == 2).await;
    let live = Provider::start(Mode::Serve);
    world.register(live.port, "");
    let answer = call.await.expect("joined").expect("answered elsewhere");
    assert_eq!((answer.attempts, answer.endpoint.port()), (2, live.port));
    assert_eq!(hung.hits(), 2, "the hung endpoint got one attempt per call");
}

#[actix_rt::test]
async fn a_provider_crash_mid_traffic_fails_no_call_and_costs_at_most_one_retry_each() {
    let world = World::start();
    let dir = world.subscribe().await;
    let (a, b) = (Provider::start(Mode::Serve), Provider::start(Mode::Serve));
    world.register(a.port, "");
    world.register(b.port, "");
    wait_endpoints(&dir, 2).await;
    dir.set_strategy(Some(steadfast_core::Strategy::RoundRobin));
    let caller = Caller::builder(dir.clone())
        .deadline(Duration::from_secs(3))
        .build();
    // 4 concurrent loops of 60 calls; `a` dies (its record stays in the
    // registry, as after a SIGKILL) once 40 calls went through.
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let caller = caller.clone();
            actix_rt::spawn(async move {
                let mut attempts = Vec::new();
                for _ in 0..60 {
                    attempts.push(caller.get("x").await.map(|a| a.attempts));
                }
                attempts
            })
        })
        .collect();
    wait_until("40 calls", || caller.stats().calls >= 40).await;
    a.stop().await;
    let mut results = Vec::new();
    for l in loops {
        results.extend(l.await.expect("joined"));
    }
    assert_eq!(results.len(), 240);
    let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert!(
        results.iter().all(|r| matches!(r, Ok(1 | 2))),
        "at most one retry per call"
    );
    let s = caller.stats();
    assert_eq!((s.calls, s.failed), (240, 0));
    assert!(a.hits() > 0 && b.hits() > 0, "both served before the crash");
    eprintln!(
        "crash mid-traffic: {s:?}, a served {}, b served {}",
        a.hits(),
        b.hits()
    );
}
