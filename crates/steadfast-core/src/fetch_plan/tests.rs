//! Unit tests of the candidate policy on a hand-stepped clock, and a
//! property test of its bounds.

use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt};
use proptest::prelude::*;

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn starts(actions: &[FetchAction]) -> Vec<usize> {
    actions
        .iter()
        .filter_map(|a| match a {
            FetchAction::Start { candidate, .. } => Some(*candidate),
            _ => None,
        })
        .collect()
}

fn fresh(n: usize, t0: Instant) -> (FetchPlan, Vec<FetchAction>) {
    FetchPlan::start(&FetchPolicy::default(), (0..n).collect(), false, t0)
}

#[test]
fn nine_of_ten_hung_resolve_within_one_hedge_delay() {
    let t0 = Instant::now();
    let (mut p, a) = fresh(10, t0);
    assert_eq!(
        a,
        vec![
            FetchAction::Start {
                candidate: 0,
                hedged: false
            },
            FetchAction::WakeAt(t0 + ms(250))
        ]
    );
    let a = p.on_wake(t0 + ms(250));
    assert_eq!(starts(&a), (1..10).collect::<Vec<_>>());
    assert_eq!(a.last(), Some(&FetchAction::WakeAt(t0 + ms(5000))));
    let a = p.on_success(9, t0 + ms(251));
    assert_eq!(a.last(), Some(&FetchAction::Resolved(9)));
    let slow: Vec<(usize, bool)> = a
        .iter()
        .filter_map(|a| match a {
            FetchAction::Abandoned { candidate, slow } => Some((*candidate, *slow)),
            _ => None,
        })
        .collect();
    assert_eq!(slow.len(), 9);
    assert_eq!(
        slow.iter().filter(|(_, s)| *s).collect::<Vec<_>>(),
        vec![&(0, true)],
        "only the first one was pending a whole hedge delay"
    );
    assert!(p.is_done());
    assert!(p.on_wake(t0 + ms(5000)).is_empty(), "nothing after the end");
}

#[test]
fn all_hung_fail_with_a_timeout_at_the_one_deadline() {
    let t0 = Instant::now();
    let (mut p, _) = fresh(10, t0);
    p.on_wake(t0 + ms(250));
    assert_eq!(
        p.on_wake(t0 + ms(4999)),
        vec![FetchAction::WakeAt(t0 + ms(5000))],
        "an early wake just waits on"
    );
    let a = p.on_wake(t0 + ms(5000));
    assert_eq!(a.len(), 11);
    assert!(a
        .iter()
        .take(10)
        .all(|a| matches!(a, FetchAction::TimedOut(_))));
    assert_eq!(a[10], FetchAction::Failed(FetchError::Timeout));
}

#[test]
fn a_fast_failure_moves_on_at_once() {
    let t0 = Instant::now();
    let (mut p, _) = fresh(3, t0);
    let err = || FetchError::Unreachable("refused".into());
    let a = p.on_failure(0, err(), t0 + ms(1));
    assert_eq!(
        a,
        vec![FetchAction::Start {
            candidate: 1,
            hedged: false
        }]
    );
    assert_eq!(starts(&p.on_failure(1, err(), t0 + ms(2))), vec![2]);
    assert_eq!(
        p.on_failure(2, err(), t0 + ms(3)),
        vec![FetchAction::Failed(err())]
    );
}

#[test]
fn a_retry_tries_at_most_two_candidates() {
    let t0 = Instant::now();
    let policy = FetchPolicy::default();
    // Fast failures.
    let (mut p, a) = FetchPlan::start(&policy, (0..10).collect(), true, t0);
    assert_eq!(starts(&a), vec![0]);
    let e = FetchError::ServerError(503);
    assert_eq!(starts(&p.on_failure(0, e.clone(), t0)), vec![1]);
    assert_eq!(p.on_failure(1, e.clone(), t0), vec![FetchAction::Failed(e)]);
    // Hangs: the hedge adds the second one, the deadline ends both.
    let (mut p, _) = FetchPlan::start(&policy, (0..10).collect(), true, t0);
    let a = p.on_wake(t0 + ms(250));
    assert_eq!(
        a,
        vec![
            FetchAction::Start {
                candidate: 1,
                hedged: true
            },
            FetchAction::WakeAt(t0 + ms(5000))
        ]
    );
    let a = p.on_wake(t0 + ms(5000));
    assert_eq!(
        a,
        vec![
            FetchAction::TimedOut(0),
            FetchAction::TimedOut(1),
            FetchAction::Failed(FetchError::Timeout)
        ]
    );
}

#[test]
fn a_transient_error_is_reported_over_a_persistent_one() {
    let t0 = Instant::now();
    let (mut p, _) = fresh(3, t0);
    p.on_failure(0, FetchError::Unreachable("x".into()), t0);
    p.on_failure(1, FetchError::Malformed("y".into()), t0);
    let a = p.on_failure(2, FetchError::TooLarge { limit: 1 }, t0);
    assert_eq!(
        a,
        vec![FetchAction::Failed(FetchError::Unreachable("x".into()))]
    );
}

#[test]
fn no_candidates_fail_at_once_and_stray_answers_are_ignored() {
    let t0 = Instant::now();
    let (mut p, a) = fresh(0, t0);
    assert_eq!(a, vec![FetchAction::Failed(FetchError::NoCandidates)]);
    assert!(p.on_success(0, t0).is_empty());
    let (mut p, _) = fresh(3, t0);
    assert!(p.on_success(2, t0).is_empty(), "never started");
    assert!(p.on_failure(7, FetchError::Timeout, t0).is_empty());
    assert!(!p.is_done());
    assert_eq!(p.pending().collect::<Vec<_>>(), vec![0]);
}

#[test]
fn absurd_policies_never_panic() {
    let t0 = Instant::now();
    let policy = FetchPolicy {
        deadline: Duration::MAX,
        hedge_delay: Duration::MAX,
        fanout: 0,
        retry_calls: usize::MAX,
        ..FetchPolicy::default()
    };
    let (p, a) = FetchPlan::start(&policy, vec![3, 3, 1], false, t0);
    assert_eq!(p.budget(), 1, "a zero fanout still tries one");
    assert_eq!(p.deadline(), t0 + MAX_FETCH_DEADLINE);
    assert_eq!(
        a.last(),
        Some(&FetchAction::WakeAt(t0 + MAX_FETCH_DEADLINE))
    );
    let (p, _) = FetchPlan::start(&policy, vec![3, 3, 1], true, t0);
    assert_eq!(p.budget(), 2, "duplicates are tried once");
    let zero = FetchPolicy {
        deadline: Duration::ZERO,
        hedge_delay: Duration::ZERO,
        ..FetchPolicy::default()
    };
    let (mut p, _) = FetchPlan::start(&zero, vec![0, 1], false, t0);
    assert_eq!(p.deadline(), t0 + ms(1));
    assert!(matches!(
        p.on_wake(t0 + ms(1)).last(),
        Some(FetchAction::Failed(_))
    ));
}

fn inst(id: &str) -> ServiceInstance {
    ServiceInstance::new("app", id, 1)
}

#[test]
fn memory_tries_recent_failures_last_and_rotates_through_them() {
    let t0 = Instant::now();
    let policy = FetchPolicy::default();
    let mut m = FetchMemory::new(&policy);
    let c: Vec<ServiceInstance> = ["a", "b", "c", "d"].iter().map(|h| inst(h)).collect();
    assert_eq!(m.order(&c, t0), vec![0, 1, 2, 3]);
    m.instance_failed(&c[1].id, t0 + ms(2));
    m.instance_failed(&c[0].id, t0 + ms(3));
    assert_eq!(m.order(&c, t0 + ms(4)), vec![2, 3, 1, 0]);
    m.instance_answered(&c[0].id);
    assert_eq!(m.order(&c, t0 + ms(4)), vec![0, 2, 3, 1]);
    let later = t0 + ms(2) + policy.instance_memory + ms(1);
    assert_eq!(m.order(&c, later), vec![0, 1, 2, 3], "forgotten");

    let key = ("app".to_string(), "r1".to_string());
    assert!(!m.is_retry(&key, t0));
    m.flight_failed(&key, t0);
    assert!(m.is_retry(&key, t0 + policy.revision_memory));
    assert!(!m.is_retry(&key, t0 + policy.revision_memory + ms(1)));
    m.flight_resolved(&key);
    assert!(!m.is_retry(&key, t0));
}

struct Panics(bool);

impl MetadataFetcher for Panics {
    fn fetch(
        &self,
        _: &ServiceInstance,
        _: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        if self.0 {
            panic!("at the call");
        }
        async { panic!("while polled") }.boxed()
    }
}

#[test]
fn panics_of_a_fetcher_become_errors() {
    for (at_call, msg) in [(true, "at the call"), (false, "while polled")] {
        let r = fetch_contained(&Panics(at_call), &inst("a"), "r")
            .now_or_never()
            .expect("ready");
        assert_eq!(r, Err(FetchError::Panicked(msg.into())));
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Ok(usize),
    Fail(usize, bool),
    Wake(u64),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        (0usize..12).prop_map(Ev::Ok),
        (0usize..12, any::<bool>()).prop_map(|(i, t)| Ev::Fail(i, t)),
        (0u64..3000).prop_map(Ev::Wake),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Whatever the answers and wakes: never more starts than the budget nor
    /// more pending than allowed, exactly one end, no start after it, and
    /// the end comes by the deadline.
    #[test]
    fn bounds_hold_under_random_events(
        n in 0usize..12,
        retry in any::<bool>(),
        events in prop::collection::vec(ev(), 0..40),
    ) {
        let t0 = Instant::now();
        let policy = FetchPolicy::default();
        let (mut p, first) = FetchPlan::start(&policy, (0..n).collect(), retry, t0);
        let budget = policy.budget(retry).min(n);
        let mut now = t0;
        let mut all = first.clone();
        let mut pending: std::collections::BTreeSet<usize> = starts(&first).into_iter().collect();
        let mut ends = usize::from(p.is_done());
        let mut wake = None;
        for e in events.into_iter().chain([Ev::Wake(10_000)]) {
            let a = match e {
                Ev::Ok(i) => p.on_success(i, now),
                Ev::Fail(i, t) => {
                    let err = if t { FetchError::Timeout } else { FetchError::Malformed("x".into()) };
                    p.on_failure(i, err, now)
                }
                Ev::Wake(d) => {
                    now += ms(d);
                    if wake.is_some_and(|w| now >= w) || now >= p.deadline() { p.on_wake(now) } else { Vec::new() }
                }
            };
            if ends > 0 {
                prop_assert!(starts(&a).is_empty(), "start after the end: {a:?}");
            }
            for x in &a {
                match x {
                    FetchAction::Start { candidate, .. } => { pending.insert(*candidate); }
                    FetchAction::WakeAt(t) => wake = Some(*t),
                    FetchAction::Resolved(_) | FetchAction::Failed(_) => ends += 1,
                    _ => {}
                }
            }
            if let Ev::Ok(i) | Ev::Fail(i, _) = e { pending.remove(&i); }
            prop_assert!(p.pending().count() <= budget.max(1));
            all.extend(a);
        }
        prop_assert_eq!(ends, 1, "exactly one end: {:?}", all);
        prop_assert!(starts(&all).len() <= budget.max(usize::from(n > 0)));
        if let Some(w) = wake { prop_assert!(w <= p.deadline()); }
    }
}
