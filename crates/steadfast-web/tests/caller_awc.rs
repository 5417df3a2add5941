//! The awc Caller (feature `awc`) over real loopback sockets: the same
//! story as the reqwest Caller's tests, on actix-web's own client.

#![cfg(feature = "awc")]

mod support;

use std::time::Duration;

use steadfast_web::{Awc, CallError, Caller};
use support::{dead_port, wait_endpoints, wait_until, Mode, Provider, World};

#[actix_rt::test]
async fn an_awc_call_reaches_the_provider_at_the_built_url() {
    let world = World::start();
    let dir = world.subscribe().await;
    let p = Provider::start(Mode::Serve);
    world.register(p.port, "api");
    wait_endpoints(&dir, 1).await;
    let caller = Caller::builder(dir).client::<Awc>().build();
    let mut answer = caller.get("greet?x=1").await.expect("answer");
    assert_eq!(answer.attempts, 1);
    let body = answer.response.body().await.expect("body");
    assert_eq!(
        body,
        format!("{} /api/greet?x=1&lang=en%20GB", p.port).as_bytes()
    );
}

#[actix_rt::test]
async fn an_awc_call_retries_a_dead_endpoint_and_a_closing_one_elsewhere() {
    let world = World::start();
    let dir = world.subscribe().await;
    world.register(dead_port(), "");
    wait_endpoints(&dir, 1).await;
    let caller = Caller::builder(dir.clone())
        .deadline(Duration::from_secs(3))
        .client::<Awc>()
        .build();
    let call = actix_rt::spawn({
        let caller = caller.clone();
        async move {
            caller
                .get("x")
                .await
                .map(|a| (a.attempts, a.endpoint.port()))
        }
    });
    wait_until("the refused attempt", || caller.stats().attempts == 1).await;
    let closing = Provider::start(Mode::Closing);
    world.register(closing.port, "");
    wait_until("the closing answer", || closing.hits() == 1).await;
    let live = Provider::start(Mode::Serve);
    world.register(live.port, "");
    let (attempts, port) = call.await.expect("joined").expect("answered");
    assert_eq!((attempts, port), (3, live.port));
    assert_eq!(closing.hits(), 1);
    let s = caller.stats();
    assert_eq!((s.calls, s.attempts, s.retries, s.failed), (1, 3, 2, 0));
}

#[actix_rt::test]
async fn an_awc_post_is_not_retried_after_a_reset() {
    let world = World::start();
    let dir = world.subscribe().await;
    let (port, connections) = support::resetter();
    world.register(port, "");
    wait_endpoints(&dir, 1).await;
    let caller = Caller::builder(dir).client::<Awc>().build();
    let err = caller
        .send(awc::http::Method::POST, "x", |r| r.send_body("once"))
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
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}
