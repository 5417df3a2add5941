//! Tests of [`ScriptedFetcher`]: table, failures, counters and blocking.
//! Time is paused, so "hangs" are shown with timeouts that cost no real time.

use std::sync::Arc;
use std::time::Duration;

use steadfast_core::{check_metadata, FetchError, MetadataFetcher, MetadataInfo};
use tokio::task::yield_now;
use tokio::time::timeout;

use crate::{instance_for, scripted_error, InstanceBuilder, MetadataBuilder, ScriptedFetcher};

fn info(app: &str, service: &str) -> MetadataInfo {
    MetadataBuilder::new(app).service(service, "tri", 1).build()
}

/// Lets spawned tasks run until they park.
async fn settle() {
    for _ in 0..10 {
        yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn serves_by_revision_and_counts() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let a = instance_for(&md, "a", 1);
    let b = instance_for(&md, "b", 1);

    assert_eq!(f.fetch(&a, &md.revision).await, Ok(md.clone()));
    assert_eq!(f.fetch(&b, &md.revision).await, Ok(md.clone()));
    assert_eq!(
        f.fetch(&a, "nope").await,
        Err(FetchError::UnknownRevision("nope".into()))
    );
    assert_eq!(f.calls(&md.revision), 2);
    assert_eq!(f.calls("nope"), 1);
    assert_eq!(f.calls("never"), 0);
    assert_eq!(f.calls_to("a:1"), 2);
    assert_eq!(f.calls_to("b:1"), 1);
    assert_eq!(f.total_calls(), 3);
    assert_eq!(f.in_flight(), 0);

    f.forget(&md.revision);
    assert_eq!(
        f.fetch(&a, &md.revision).await,
        Err(FetchError::UnknownRevision(md.revision.clone()))
    );
}

#[tokio::test(start_paused = true)]
async fn fail_next_spends_a_budget_per_revision() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    let other = info("app", "T");
    f.serve(md.clone());
    f.serve(other.clone());
    let i = instance_for(&md, "h", 1);

    f.fail_next(&md.revision, 2);
    assert_eq!(f.fetch(&i, &md.revision).await, Err(scripted_error()));
    assert_eq!(f.fetch(&i, &other.revision).await, Ok(other.clone()));
    assert_eq!(f.fetch(&i, &md.revision).await, Err(scripted_error()));
    assert_eq!(f.fetch(&i, &md.revision).await, Ok(md.clone()));

    f.fail_next_with(&md.revision, 1, FetchError::ServerError(503));
    assert_eq!(
        f.fetch(&i, &md.revision).await,
        Err(FetchError::ServerError(503))
    );
    assert!(f.fetch(&i, &md.revision).await.is_ok());

    f.fail_next(&md.revision, 3);
    f.fail_next(&md.revision, 0);
    assert!(f.fetch(&i, &md.revision).await.is_ok(), "budget replaced");
    // Budgets apply to unserved revisions too.
    f.fail_next("ghost", 1);
    assert_eq!(f.fetch(&i, "ghost").await, Err(scripted_error()));
    assert!(matches!(
        f.fetch(&i, "ghost").await,
        Err(FetchError::UnknownRevision(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn fail_always_until_healed() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let i = instance_for(&md, "h", 1);

    f.fail_always(&md.revision);
    for _ in 0..3 {
        assert_eq!(f.fetch(&i, &md.revision).await, Err(scripted_error()));
    }
    f.heal(&md.revision);
    assert_eq!(f.fetch(&i, &md.revision).await, Ok(md.clone()));

    f.fail_always_with(&md.revision, FetchError::Malformed("bad".into()));
    assert_eq!(
        f.fetch(&i, &md.revision).await,
        Err(FetchError::Malformed("bad".into()))
    );
}

#[tokio::test(start_paused = true)]
async fn failed_instance_fails_every_revision_without_spending_budgets() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let down = instance_for(&md, "down", 1);
    let up = instance_for(&md, "up", 1);

    f.fail_instance("down:1");
    f.fail_next(&md.revision, 1);
    assert_eq!(f.fetch(&down, &md.revision).await, Err(scripted_error()));
    assert_eq!(f.fetch(&down, "other").await, Err(scripted_error()));
    assert_eq!(
        f.fetch(&up, &md.revision).await,
        Err(scripted_error()),
        "budget left"
    );
    assert_eq!(f.fetch(&up, &md.revision).await, Ok(md.clone()));

    f.heal_instance("down:1");
    assert_eq!(f.fetch(&down, &md.revision).await, Ok(md.clone()));
    assert_eq!(f.calls_to("down:1"), 3);
}

#[tokio::test(start_paused = true)]
async fn served_info_is_returned_as_is() {
    let f = ScriptedFetcher::new();
    let wrong = info("other-app", "S");
    f.serve_under("r1", wrong.clone());
    let i = InstanceBuilder::new("app", "h", 1).revision("r1").build();
    let got = f.fetch(&i, "r1").await.unwrap();
    assert_eq!(got, wrong);
    assert!(matches!(
        check_metadata("app", "r1", &got),
        Err(FetchError::Mismatch { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn block_hangs_until_release_and_resolves_then() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    let i = instance_for(&md, "h", 1);
    f.block(&md.revision);

    let fut = f.fetch(&i, &md.revision);
    assert_eq!(f.blocked_now(&md.revision), 1, "counted at the call");
    assert_eq!(f.in_flight(), 1);
    let task = tokio::spawn(fut);
    let second = tokio::spawn(f.fetch(&i, &md.revision));
    settle().await;
    assert_eq!(f.blocked_now(&md.revision), 2);
    assert!(!task.is_finished());

    // The script is consulted when the fetch resumes: serving now counts.
    f.serve(md.clone());
    f.release(&md.revision);
    assert_eq!(f.blocked_now(&md.revision), 0);
    assert_eq!(task.await.unwrap(), Ok(md.clone()));
    assert_eq!(second.await.unwrap(), Ok(md.clone()));
    assert_eq!(f.in_flight(), 0);
    assert_eq!(f.fetch(&i, &md.revision).await, Ok(md.clone()), "unblocked");
}

#[tokio::test(start_paused = true)]
async fn a_blocked_fetch_never_completes_on_its_own() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let i = instance_for(&md, "h", 1);
    f.block(&md.revision);
    let other = info("app", "T");
    f.serve(other.clone());

    let res = timeout(Duration::from_secs(3600), f.fetch(&i, &md.revision)).await;
    assert!(res.is_err(), "still hanging after an hour of paused time");
    assert_eq!(
        f.fetch(&i, &other.revision).await,
        Ok(other),
        "per revision"
    );
}

#[tokio::test(start_paused = true)]
async fn dropped_fetches_are_not_counted_as_blocked_or_in_flight() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let i = instance_for(&md, "h", 1);
    f.block(&md.revision);

    let unpolled = f.fetch(&i, &md.revision);
    let task = tokio::spawn(f.fetch(&i, &md.revision));
    settle().await;
    assert_eq!((f.blocked_now(&md.revision), f.in_flight()), (2, 2));

    drop(unpolled);
    assert_eq!((f.blocked_now(&md.revision), f.in_flight()), (1, 1));
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!((f.blocked_now(&md.revision), f.in_flight()), (0, 0));
    assert_eq!(f.calls(&md.revision), 2, "calls stay counted");

    // Unblocked futures count as in flight until polled or dropped too.
    f.release(&md.revision);
    let ready = f.fetch(&i, &md.revision);
    assert_eq!(f.in_flight(), 1);
    assert!(ready.await.is_ok());
    assert_eq!(f.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn release_frees_waiters_even_if_blocked_again_at_once() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let i = instance_for(&md, "h", 1);
    f.block(&md.revision);
    let old = tokio::spawn(f.fetch(&i, &md.revision));
    settle().await;

    f.release(&md.revision);
    f.block(&md.revision);
    let new = tokio::spawn(f.fetch(&i, &md.revision));
    assert_eq!(old.await.unwrap(), Ok(md.clone()));
    settle().await;
    assert_eq!(f.blocked_now(&md.revision), 1, "only the new waiter");
    assert!(!new.is_finished());

    f.release_all();
    assert_eq!(new.await.unwrap(), Ok(md));
}

#[tokio::test(start_paused = true)]
async fn failures_apply_when_a_blocked_fetch_resumes() {
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let i = instance_for(&md, "h", 1);
    f.block(&md.revision);
    let task = tokio::spawn(f.fetch(&i, &md.revision));
    settle().await;
    f.fail_next_with(&md.revision, 1, FetchError::Timeout);
    f.release(&md.revision);
    assert_eq!(task.await.unwrap(), Err(FetchError::Timeout));
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_script_and_work_as_trait_objects() {
    let f = ScriptedFetcher::new();
    let dyn_f: Arc<dyn MetadataFetcher> = Arc::new(f.clone());
    let md = info("app", "S");
    f.serve(md.clone());
    let i = instance_for(&md, "h", 1);
    assert_eq!(dyn_f.fetch(&i, &md.revision).await, Ok(md));
    assert_eq!(f.total_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn hangs_the_next_calls_then_serves_and_panics_on_request() {
    use futures::FutureExt;
    let f = ScriptedFetcher::new();
    let md = info("app", "S");
    f.serve(md.clone());
    let a = instance_for(&md, "a", 1);
    f.hang_next(&md.revision, 1);
    assert!(
        timeout(Duration::from_secs(3600), f.fetch(&a, &md.revision))
            .await
            .is_err()
    );
    assert_eq!(f.in_flight(), 0, "the dropped hang is no longer in flight");
    assert_eq!(f.fetch(&a, &md.revision).await, Ok(md.clone()));
    f.panic_next(1, true);
    let polled = std::panic::AssertUnwindSafe(f.fetch(&a, &md.revision))
        .catch_unwind()
        .await;
    assert!(polled.is_err(), "panics while polled");
    f.panic_next(1, false);
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(f.fetch(&a, &md.revision));
    }));
    assert!(called.is_err(), "panics at the call");
    assert_eq!(f.fetch(&a, &md.revision).await, Ok(md), "then serves again");
}
