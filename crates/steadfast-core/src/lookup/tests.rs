//! Lookup cache machine tests on a hand-stepped clock.

use std::error::Error as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::event::Version;
use crate::instance::{Instance, RevisionInterner};
use crate::model::ServiceInstance;

const CALL: Duration = Duration::from_secs(5);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

fn listing(app: &str, revision: u64, n: u16) -> Listing {
    let instances = (0..n)
        .map(|i| {
            let si = ServiceInstance::new(app, "10.0.0.1", 8000 + i);
            Arc::new(Instance::from_record(si, &mut RevisionInterner::default()))
        })
        .collect();
    Listing {
        version: Version::at(revision),
        instances,
    }
}

fn cache(config: LookupConfig) -> LookupCache {
    LookupCache::new(config, CALL, 7)
}

fn calls(actions: &[LookupAction]) -> Vec<Token> {
    actions
        .iter()
        .filter_map(|a| match a {
            LookupAction::Call { token, .. } => Some(*token),
            _ => None,
        })
        .collect()
}

fn answers(actions: &[LookupAction]) -> Vec<(WaiterId, Result<InstancesAnswer, LookupError>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            LookupAction::Answer { waiter, result } => Some((*waiter, result.clone())),
            _ => None,
        })
        .collect()
}

/// Queries once and expects exactly one answer.
fn ask(c: &mut LookupCache, app: &str, now: Instant) -> Result<InstancesAnswer, LookupError> {
    let out = c.query(app, 0, now);
    assert!(calls(&out).is_empty(), "no call expected: {out:?}");
    let mut a = answers(&out);
    assert_eq!(a.len(), 1, "{out:?}");
    a.remove(0).1
}

/// Looks `app` up cold and completes the call with `result`.
fn fill(c: &mut LookupCache, app: &str, now: Instant, result: Result<Listing, RegistryError>) {
    let out = c.query(app, 0, now);
    let token = calls(&out)[0];
    c.on_result(app, token, result, now);
}

fn down() -> RegistryError {
    RegistryError::Unavailable("connection refused".into())
}

#[test]
fn a_fresh_copy_answers_at_once_from_the_cache() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    let out = c.query("a", 1, t0);
    assert_eq!(
        out,
        vec![LookupAction::Call {
            app: "a".into(),
            token: 1,
            deadline: CALL
        }],
        "every call carries the deadline"
    );
    let out = c.on_result("a", 1, Ok(listing("a", 3, 2)), t0 + ms(10));
    let a = answers(&out);
    let got = a[0].1.clone().unwrap();
    assert_eq!(
        (got.freshness, got.source),
        (Freshness::Fresh, Source::Registry)
    );
    assert_eq!((got.version, got.instances.len()), (Version::at(3), 2));
    let hit = ask(&mut c, "a", t0 + secs(30)).unwrap();
    assert_eq!(
        (hit.freshness, hit.source),
        (Freshness::Fresh, Source::Cache)
    );
}

#[test]
fn go_micro_a_registry_down_with_a_copy_serves_it_stale_with_its_age() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    fill(&mut c, "a", t0, Ok(listing("a", 1, 1)));
    let t1 = t0 + secs(70); // past the TTL (at most 66 s)
    let out = c.query("a", 2, t1);
    let token = calls(&out)[0];
    let out = c.on_result("a", token, Err(down()), t1 + secs(1));
    let got = answers(&out)[0].1.clone().unwrap();
    assert_eq!(got.freshness, Freshness::Stale { age: secs(71) });
    assert_eq!(got.source, Source::Cache);
    // Inside the throttle: the stale copy at once, its age growing, no call.
    let again = ask(&mut c, "a", t1 + secs(3)).unwrap();
    assert_eq!(again.freshness, Freshness::Stale { age: secs(73) });
}

#[test]
fn go_micro_b_a_thousand_concurrent_callers_on_a_cold_key_share_one_call() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    let mut out = Vec::new();
    for w in 0..1000 {
        out.extend(c.query("a", w, t0 + Duration::from_micros(w)));
    }
    let tokens = calls(&out);
    assert_eq!(tokens.len(), 1, "exactly one registry call");
    assert!(answers(&out).is_empty(), "all wait for it");
    let out = c.on_result("a", tokens[0], Ok(listing("a", 5, 3)), t0 + ms(20));
    let a = answers(&out);
    assert_eq!(a.len(), 1000, "every caller is answered");
    let mut ids: Vec<_> = a.iter().map(|(w, _)| *w).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1000, "each exactly once");
    assert!(a
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|x| x.version == Version::at(5))));
}

#[test]
fn go_micro_c_no_copy_and_registry_down_one_call_per_interval_the_rest_throttled() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    let (mut n_calls, mut throttled, mut unavailable, mut not_found) = (0, 0, 0, 0);
    // A caller every 100 ms for 60 s; each call fails at once.
    for i in 0..600u64 {
        let now = t0 + ms(100 * i);
        let out = c.query("a", i, now);
        for token in calls(&out) {
            n_calls += 1;
            for (_, r) in answers(&c.on_result("a", token, Err(down()), now)) {
                match r {
                    Err(LookupError::Unavailable { cause, .. }) => {
                        assert_eq!(cause, down());
                        unavailable += 1
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        for (_, r) in answers(&out) {
            match r {
                Err(LookupError::Throttled {
                    retry_after, cause, ..
                }) => {
                    assert!(retry_after > Duration::ZERO && retry_after <= secs(5));
                    assert_eq!(cause, Some(down()));
                    throttled += 1;
                }
                Err(LookupError::NotFound { .. }) => not_found += 1,
                other => panic!("{other:?}"),
            }
        }
    }
    println!(
        "lookup machine, registry down, no copy, 600 callers over 60 s: {n_calls} registry \
         calls, {unavailable} Unavailable, {throttled} Throttled, {not_found} NotFound"
    );
    assert_eq!(n_calls, 12, "one call per 5 s interval");
    assert_eq!((unavailable, throttled, not_found), (12, 588, 0));
}

#[test]
fn the_cold_start_race_cannot_happen() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    let out = c.query("a", 1, t0);
    let token = calls(&out)[0];
    let done = t0 + ms(3);
    let out = c.on_result("a", token, Ok(listing("a", 1, 1)), done);
    assert_eq!(answers(&out).len(), 1);
    // In the same instant, before anything else ran: stored, not NotFound.
    let next = ask(&mut c, "a", done).expect("the stored result");
    assert_eq!(next.source, Source::Cache);
    assert_eq!(next.instances.len(), 1);
}

#[test]
fn one_apps_failure_does_not_change_anothers_freshness() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    fill(&mut c, "a", t0, Ok(listing("a", 1, 1)));
    fill(&mut c, "b", t0, Ok(listing("b", 1, 1)));
    let t1 = t0 + secs(70);
    fill(&mut c, "a", t1, Err(down()));
    assert!(!ask(&mut c, "a", t1).unwrap().freshness.is_fresh());
    // b expired too, but its own refresh is not throttled by a's failure.
    let out = c.query("b", 9, t1);
    let token = calls(&out)[0];
    let got = answers(&c.on_result("b", token, Ok(listing("b", 2, 1)), t1))[0]
        .1
        .clone()
        .unwrap();
    assert!(got.freshness.is_fresh());
    // A never-seen app is asked at once, not throttled.
    assert_eq!(calls(&c.query("c", 10, t1)).len(), 1);
}

#[test]
fn ttl_jitter_spreads_expiries() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig {
        capacity: 2000,
        ..LookupConfig::default()
    });
    let mut expiries = Vec::new();
    for i in 0..1000 {
        let app = format!("app-{i}");
        fill(&mut c, &app, t0, Ok(listing(&app, 1, 1)));
        expiries.push(c.expires_at(&app).unwrap() - t0);
    }
    expiries.sort_unstable();
    let (lo, hi) = (expiries[0], expiries[999]);
    println!("1000 apps looked up at once expire between {lo:?} and {hi:?}");
    assert!(lo >= secs(54) && hi <= secs(66), "within ±10 %");
    assert!(hi - lo > secs(10), "spread over the window");
    let in_one_second = expiries.iter().filter(|e| e.as_secs() == 60).count();
    assert!(
        in_one_second < 150,
        "no step: {in_one_second} in one second"
    );
    // Without jitter every entry expires after exactly the TTL.
    let mut flat = cache(LookupConfig {
        ttl_jitter: 0.0,
        ..LookupConfig::default()
    });
    fill(&mut flat, "a", t0, Ok(listing("a", 1, 1)));
    assert_eq!(flat.expires_at("a"), Some(t0 + secs(60)));
}

#[test]
fn max_staleness_refuses_a_too_old_copy() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig {
        max_staleness: Some(secs(120)),
        ..LookupConfig::default()
    });
    fill(&mut c, "a", t0, Ok(listing("a", 1, 1)));
    fill(&mut c, "a", t0 + secs(100), Err(down()));
    let ok = ask(&mut c, "a", t0 + secs(101)).unwrap();
    assert_eq!(ok.freshness, Freshness::Stale { age: secs(101) });
    let out = c.query("a", 3, t0 + secs(130));
    let token = calls(&out)[0];
    let out = c.on_result("a", token, Err(down()), t0 + secs(130));
    match answers(&out)[0].1.clone() {
        Err(e @ LookupError::TooStale { .. }) => {
            assert!(matches!(
                e,
                LookupError::TooStale { age, max_staleness, .. }
                    if age == secs(130) && max_staleness == secs(120)
            ));
            assert!(e.source().is_some(), "the registry error is the cause");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn not_found_only_on_the_registrys_word_and_cached_for_the_negative_ttl() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig {
        ttl_jitter: 0.0,
        ..LookupConfig::default()
    });
    let out = c.query("gone", 1, t0);
    let token = calls(&out)[0];
    let out = c.on_result("gone", token, Ok(listing("gone", 4, 0)), t0);
    assert!(matches!(
        answers(&out)[0].1,
        Err(LookupError::NotFound {
            freshness: Freshness::Fresh,
            ..
        })
    ));
    // Cached 5 s: no call.
    assert!(matches!(
        ask(&mut c, "gone", t0 + secs(4)),
        Err(LookupError::NotFound { .. })
    ));
    // Then asked again; the app has appeared.
    let out = c.query("gone", 2, t0 + secs(5));
    let token = calls(&out)[0];
    let out = c.on_result("gone", token, Ok(listing("gone", 5, 1)), t0 + secs(5));
    assert!(answers(&out)[0].1.is_ok());
}

#[test]
fn a_hung_call_is_failed_after_its_deadline_and_its_waiters_released() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    let out = c.query("a", 1, t0);
    let lost = calls(&out)[0];
    assert!(c.query("a", 2, t0 + secs(3)).is_empty(), "joins the flight");
    let out = c.query("a", 3, t0 + CALL + FLIGHT_GRACE);
    let a = answers(&out);
    assert_eq!(a.len(), 2, "both waiters released");
    assert!(a.iter().all(|(_, r)| matches!(
        r,
        Err(LookupError::Unavailable {
            cause: RegistryError::Timeout,
            ..
        })
    )));
    let fresh = calls(&out);
    assert_eq!(fresh.len(), 1, "a new call for the new caller");
    assert!(
        c.on_result("a", lost, Ok(listing("a", 1, 1)), t0 + secs(7))
            .is_empty(),
        "the late result of the lost call is dropped"
    );
    let out = c.on_result("a", fresh[0], Ok(listing("a", 2, 1)), t0 + secs(7));
    assert_eq!(answers(&out)[0].0, 3);
}

#[test]
fn capacity_evicts_the_least_recently_queried_idle_app() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig {
        capacity: 2,
        ..LookupConfig::default()
    });
    fill(&mut c, "a", t0, Ok(listing("a", 1, 1)));
    fill(&mut c, "b", t0, Ok(listing("b", 1, 1)));
    ask(&mut c, "a", t0).unwrap(); // a is now the most recent
    let out = c.query("c", 5, t0);
    assert!(out.contains(&LookupAction::Evicted { app: "b".into() }));
    assert_eq!(c.len(), 2);
    // c is in flight: never evicted, even when it is the oldest.
    let out = c.query("d", 6, t0);
    assert!(out.contains(&LookupAction::Evicted { app: "a".into() }));
    assert!(c.in_flight("c"));
}

#[test]
fn an_older_listing_does_not_roll_the_copy_back() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    fill(&mut c, "a", t0, Ok(listing("a", 9, 2)));
    let t1 = t0 + secs(70);
    let out = c.query("a", 1, t1);
    let out = c.on_result("a", calls(&out)[0], Ok(listing("a", 4, 1)), t1);
    let got = answers(&out)[0].1.clone().unwrap();
    assert_eq!((got.version, got.instances.len()), (Version::at(9), 2));
    assert!(got.freshness.is_fresh(), "the registry answered");
}

#[test]
fn close_releases_every_waiter() {
    let t0 = Instant::now();
    let mut c = cache(LookupConfig::default());
    calls(&c.query("a", 1, t0));
    let out = c.close();
    assert_eq!(answers(&out), vec![(1, Err(LookupError::ShutDown))]);
}

#[test]
fn errors_say_what_happened_and_keep_their_cause() {
    let e = LookupError::Unavailable {
        app: "a".into(),
        cause: RegistryError::Timeout,
    };
    assert_eq!(
        e.source().map(|s| s.to_string()),
        Some("registry call timed out".into())
    );
    let t = LookupError::Throttled {
        app: "a".into(),
        retry_after: ms(1500),
        cause: Some(down()),
    };
    assert!(t.to_string().contains("1500 ms") && t.source().is_some());
    let n = LookupError::NotFound {
        app: "a".into(),
        freshness: Freshness::Stale { age: secs(2) },
    };
    assert!(n.to_string().contains("stale (2000 ms old)"), "{n}");
}

#[test]
fn an_unvalidated_nan_or_infinite_jitter_neither_panics_nor_spreads_wildly() {
    let t0 = Instant::now();
    // Infinity is clamped to the maximum spread; it must just not panic.
    let mut c = cache(LookupConfig {
        ttl_jitter: f64::INFINITY,
        ..LookupConfig::default()
    });
    fill(&mut c, "a", t0, Ok(listing("a", 1, 1)));
    // NaN and negatives spread nothing: the TTL is exactly the base.
    for jitter in [f64::NAN, f64::NEG_INFINITY, -3.0] {
        let mut c = cache(LookupConfig {
            ttl_jitter: jitter,
            ..LookupConfig::default()
        });
        fill(&mut c, "a", t0, Ok(listing("a", 1, 1)));
        let ttl = LookupConfig::default().ttl;
        let got = ask(&mut c, "a", t0 + ttl - ms(1)).unwrap();
        assert_eq!(got.freshness, Freshness::Fresh, "jitter {jitter}");
    }
}
