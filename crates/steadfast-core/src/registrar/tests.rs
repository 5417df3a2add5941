//! Hand-stepped clock tests of the failback registrar.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::backoff::BackoffPolicy;
use crate::recover::RecoverPolicy;

fn machine(jitter: f64) -> RegistrarMachine {
    RegistrarMachine::new(RegistrarConfig {
        recover: RecoverPolicy::new(BackoffPolicy {
            jitter,
            ..BackoffPolicy::default()
        }),
        ..RegistrarConfig::default()
    })
}

fn inst(id: u16) -> ServiceInstance {
    ServiceInstance::new("app", "10.0.0.1", id)
}

fn call(actions: &[RegistrarAction]) -> (RegistrarToken, RegistrarOp) {
    let calls: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            RegistrarAction::Call { token, op, .. } => Some((*token, op.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "expected one call: {actions:?}");
    calls[0].clone()
}

fn timer(actions: &[RegistrarAction]) -> (RegistrarToken, Duration) {
    let timers: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            RegistrarAction::ArmTimer { token, delay, .. } => Some((*token, *delay)),
            _ => None,
        })
        .collect();
    assert_eq!(timers.len(), 1, "expected one timer: {actions:?}");
    timers[0]
}

fn no_call(actions: &[RegistrarAction]) -> bool {
    !actions
        .iter()
        .any(|a| matches!(a, RegistrarAction::Call { .. }))
}

fn down() -> Result<(), RegistryError> {
    Err(RegistryError::Unavailable("down".into()))
}

#[test]
fn register_fails_twice_then_lands_once_and_stays_remembered() {
    let (mut m, mut rng, t0) = (machine(0.0), StdRng::seed_from_u64(1), Instant::now());
    let key = RegistrationKey::of(&inst(1));
    let (c, op) = call(&m.register(inst(1)));
    assert_eq!(op, RegistrarOp::Register(inst(1)));
    let (t, d) = timer(&m.on_result(&key, c, down(), t0, &mut rng));
    assert_eq!(d, Duration::from_secs(1));
    assert_eq!(m.pending(), 1, "one timer, no call");
    assert!(matches!(
        m.state(&key),
        Some(RegistrationState::Pending { attempts: 1, .. })
    ));
    let (c, _) = call(&m.on_timer(&key, t));
    assert!(m.on_timer(&key, t).is_empty(), "a timer fires once");
    let (t, d) = timer(&m.on_result(&key, c, down(), t0, &mut rng));
    assert_eq!(d, Duration::from_secs(2));
    let (c, _) = call(&m.on_timer(&key, t));
    let out = m.on_result(&key, c, Ok(()), t0, &mut rng);
    assert_eq!(
        out,
        vec![RegistrarAction::Settled {
            key: key.clone(),
            registered: true
        }]
    );
    assert_eq!(m.state(&key), Some(RegistrationState::Registered));
    assert!(
        m.on_result(&key, c, Ok(()), t0, &mut rng).is_empty(),
        "stale"
    );
    assert_eq!(m.pending(), 0);
    // The same intent again: already there, no call.
    assert!(no_call(&m.register(inst(1))));
}

#[test]
fn unregister_during_a_retry_wait_cancels_it_and_wins() {
    let (mut m, mut rng, t0) = (machine(0.0), StdRng::seed_from_u64(1), Instant::now());
    let key = RegistrationKey::of(&inst(1));
    let (c, _) = call(&m.register(inst(1)));
    let (t, _) = timer(&m.on_result(&key, c, down(), t0, &mut rng));
    let out = m.unregister(inst(1));
    assert!(out.contains(&RegistrarAction::CancelTimer { token: t }));
    let (c, op) = call(&out);
    assert_eq!(op, RegistrarOp::Unregister(inst(1)));
    assert!(
        m.on_timer(&key, t).is_empty(),
        "the cancelled timer is dead"
    );
    m.on_result(&key, c, Ok(()), t0, &mut rng);
    assert_eq!(m.state(&key), None, "unregistered and forgotten");
    assert!(m.is_empty());
}

#[test]
fn register_during_an_unregister_retry_wait_cancels_it_and_wins() {
    let (mut m, mut rng, t0) = (machine(0.0), StdRng::seed_from_u64(1), Instant::now());
    let key = RegistrationKey::of(&inst(1));
    let (c, _) = call(&m.register(inst(1)));
    m.on_result(&key, c, Ok(()), t0, &mut rng);
    let (c, op) = call(&m.unregister(inst(1)));
    assert_eq!(op, RegistrarOp::Unregister(inst(1)));
    let (t, _) = timer(&m.on_result(&key, c, down(), t0, &mut rng));
    let out = m.register(inst(1));
    assert!(out.contains(&RegistrarAction::CancelTimer { token: t }));
    let (c, op) = call(&out);
    assert_eq!(op, RegistrarOp::Register(inst(1)), "the latest intent");
    assert!(m.on_timer(&key, t).is_empty(), "no unregister left pending");
    m.on_result(&key, c, Ok(()), t0, &mut rng);
    assert_eq!(m.state(&key), Some(RegistrationState::Registered));
    assert_eq!(m.pending(), 0);
}

#[test]
fn a_new_intent_waits_for_the_call_in_flight_then_issues_the_latest_once() {
    let (mut m, mut rng, t0) = (machine(0.0), StdRng::seed_from_u64(1), Instant::now());
    let key = RegistrationKey::of(&inst(1));
    let (c, _) = call(&m.register(inst(1)));
    assert!(no_call(&m.unregister(inst(1))), "waits for the call");
    assert!(no_call(&m.register(inst(1))), "still waiting");
    assert!(no_call(&m.unregister(inst(1))), "still waiting");
    assert_eq!(m.pending(), 1);
    // The register landed; the latest intent (unregister) goes at once.
    let (c2, op) = call(&m.on_result(&key, c, Ok(()), t0, &mut rng));
    assert_eq!(op, RegistrarOp::Unregister(inst(1)));
    // Back to register while the unregister is in flight, and it fails:
    // the latest intent (register) is issued at once, no timer.
    assert!(no_call(&m.register(inst(1))));
    let out = m.on_result(&key, c2, down(), t0, &mut rng);
    let (_, op) = call(&out);
    assert_eq!(op, RegistrarOp::Register(inst(1)));
    assert!(!out
        .iter()
        .any(|a| matches!(a, RegistrarAction::ArmTimer { .. })));
}

#[test]
fn session_loss_reregisters_every_registered_key_spread_over_the_window() {
    let (mut m, mut rng, t0) = (machine(0.25), StdRng::seed_from_u64(3), Instant::now());
    for id in 0..1000 {
        let (c, _) = call(&m.register(inst(id)));
        m.on_result(&RegistrationKey::of(&inst(id)), c, Ok(()), t0, &mut rng);
    }
    // One unregistered key is not brought back.
    let (c, _) = call(&m.unregister(inst(0)));
    m.on_result(&RegistrationKey::of(&inst(0)), c, Ok(()), t0, &mut rng);
    let out = m.session_lost(&mut rng);
    assert!(no_call(&out), "nothing at once");
    let delays: Vec<Duration> = out
        .iter()
        .filter_map(|a| match a {
            RegistrarAction::ArmTimer { delay, .. } => Some(*delay),
            _ => None,
        })
        .collect();
    assert_eq!(delays.len(), 999);
    let spread = DEFAULT_SESSION_SPREAD;
    assert!(delays.iter().all(|d| *d <= spread));
    // Uniform: every second of the 5 s window gets about a fifth.
    for s in 0..5 {
        let n = delays
            .iter()
            .filter(|d| d.as_secs() == s && **d < spread)
            .count();
        assert!((150..=250).contains(&n), "second {s}: {n} of 999");
    }
    assert!(matches!(
        m.state(&RegistrationKey::of(&inst(1))),
        Some(RegistrationState::Pending { .. })
    ));
}

#[test]
fn session_loss_during_a_call_reissues_once_it_is_back_and_respreads_waiting_timers() {
    let (mut m, mut rng, t0) = (machine(0.0), StdRng::seed_from_u64(1), Instant::now());
    let (a, b) = (RegistrationKey::of(&inst(1)), RegistrationKey::of(&inst(2)));
    let (ca, _) = call(&m.register(inst(1)));
    let (cb, _) = call(&m.register(inst(2)));
    let (tb, _) = timer(&m.on_result(&b, cb, down(), t0, &mut rng));
    let out = m.session_lost(&mut rng);
    // a is in flight: nothing now; b's retry timer is replaced by one
    // within the spread (still one pending operation).
    assert!(no_call(&out), "{out:?}");
    assert!(out.contains(&RegistrarAction::CancelTimer { token: tb }));
    let (tb2, d) = timer(&out);
    assert!(d <= m.config().session_spread);
    let (_, op) = call(&m.on_result(&a, ca, Ok(()), t0, &mut rng));
    assert_eq!(op, RegistrarOp::Register(inst(1)), "re-issued");
    assert_eq!(m.pending(), 2);
    assert!(m.on_timer(&b, tb).is_empty(), "the replaced timer is dead");
    call(&m.on_timer(&b, tb2));
}

#[test]
fn a_final_error_gives_up_and_a_new_intent_revives_the_key() {
    let (mut m, mut rng, t0) = (machine(0.0), StdRng::seed_from_u64(1), Instant::now());
    let key = RegistrationKey::of(&inst(1));
    let (c, _) = call(&m.register(inst(1)));
    let out = m.on_result(
        &key,
        c,
        Err(RegistryError::Unsupported("x".into())),
        t0,
        &mut rng,
    );
    assert!(matches!(
        out.as_slice(),
        [RegistrarAction::Failed { retry: None, .. }]
    ));
    assert!(matches!(
        m.state(&key),
        Some(RegistrationState::GaveUp { .. })
    ));
    assert_eq!(m.pending(), 0);
    call(&m.register(inst(1)));
}

#[test]
fn close_cancels_every_timer_and_ignores_later_inputs() {
    let (mut m, mut rng, t0) = (machine(0.0), StdRng::seed_from_u64(1), Instant::now());
    let key = RegistrationKey::of(&inst(1));
    let (c, _) = call(&m.register(inst(1)));
    let (t, _) = timer(&m.on_result(&key, c, down(), t0, &mut rng));
    assert_eq!(m.close(), vec![RegistrarAction::CancelTimer { token: t }]);
    assert!(m.on_timer(&key, t).is_empty());
    assert!(m.register(inst(2)).is_empty());
    assert!(m.session_lost(&mut rng).is_empty());
}

#[test]
fn under_a_persistent_outage_calls_per_key_are_bounded_by_the_backoff() {
    let (mut m, mut rng, t0) = (machine(0.25), StdRng::seed_from_u64(9), Instant::now());
    let key = RegistrationKey::of(&inst(1));
    let (mut c, _) = call(&m.register(inst(1)));
    let mut now = t0;
    let mut calls = 1u32;
    let hour = Duration::from_secs(3600);
    loop {
        let (t, d) = timer(&m.on_result(&key, c, down(), now, &mut rng));
        now += d;
        if now.duration_since(t0) > hour {
            break;
        }
        c = call(&m.on_timer(&key, t)).0;
        calls += 1;
    }
    let per_min = f64::from(calls) / 60.0;
    eprintln!("registrar: {calls} register calls per key in 1 h of outage ({per_min:.2}/min)");
    // Capped at 30 s (+0-25 %): at most about 2 per minute.
    assert!(per_min <= 2.1, "{per_min}");
    assert!(per_min >= 1.5, "{per_min}");
}

#[test]
fn a_re_created_registrar_drives_every_intent_again_within_the_spread_instead_of_one_burst() {
    let mut m = machine(0.0);
    let mut rng = StdRng::seed_from_u64(3);
    let t0 = Instant::now();
    for id in 0..200 {
        let (token, _) = call(&m.register(inst(id)));
        let key = RegistrationKey::of(&inst(id));
        timer(&m.on_result(&key, token, down(), t0, &mut rng));
    }
    // One key settled, one with its call still in flight.
    let (token, _) = call(&m.register(inst(500)));
    let settled = RegistrationKey::of(&inst(500));
    m.on_result(&settled, token, Ok(()), t0, &mut rng);
    let (flying, _) = call(&m.register(inst(501)));
    // A call decided but never sent (the panic struck before it left).
    let (lost, _) = call(&m.register(inst(502)));
    let config = *m.config();
    let point = m.resume_point(|t| t != lost);
    let (mut m, out) = RegistrarMachine::resuming(config, point, &mut rng);
    assert!(no_call(&out), "no key calls at once after a restart");
    let delays: Vec<Duration> = out
        .iter()
        .filter_map(|a| match a {
            RegistrarAction::ArmTimer { delay, .. } => Some(*delay),
            _ => None,
        })
        .collect();
    assert_eq!(
        delays.len(),
        202,
        "one timer per key not in flight: the settled one, and the call never sent"
    );
    let spread = m.config().session_spread;
    assert!(delays.iter().all(|d| *d <= spread));
    let first_fifth = delays.iter().filter(|d| **d <= spread / 5).count();
    assert!(
        first_fifth < 80,
        "spread, not a burst: {first_fifth} in the first fifth"
    );
    assert_eq!(m.pending(), 203, "one pending operation per key");
    // The call in flight comes back under its old token: taken, and the
    // intent is issued once more (it may have raced the restart).
    let key = RegistrationKey::of(&inst(501));
    let (again, _) = call(&m.on_result(&key, flying, Ok(()), t0, &mut rng));
    assert!(again > flying, "new tokens come after the old ones");
}

#[test]
fn a_session_loss_replaces_a_grown_retry_timer_with_one_within_the_spread() {
    let mut m = machine(0.0);
    let mut rng = StdRng::seed_from_u64(5);
    let t0 = Instant::now();
    let key = RegistrationKey::of(&inst(1));
    let (mut token, _) = call(&m.register(inst(1)));
    let mut delay = Duration::ZERO;
    for _ in 0..6 {
        let (t, d) = timer(&m.on_result(&key, token, down(), t0, &mut rng));
        delay = d;
        token = call(&m.on_timer(&key, t)).0;
    }
    let (waiting, _) = timer(&m.on_result(&key, token, down(), t0, &mut rng));
    assert!(delay >= Duration::from_secs(30), "backoff grew to the cap");
    let out = m.session_lost(&mut rng);
    assert!(out.contains(&RegistrarAction::CancelTimer { token: waiting }));
    let (new, d) = timer(&out);
    assert!(d <= m.config().session_spread, "restored within the window");
    assert!(
        m.on_timer(&key, waiting).is_empty(),
        "the old timer is dead"
    );
    assert!(matches!(
        call(&m.on_timer(&key, new)).1,
        RegistrarOp::Register(_)
    ));
}

#[test]
fn unregister_all_unregisters_every_registered_key_once() {
    let mut m = machine(0.0);
    let mut rng = StdRng::seed_from_u64(9);
    let t0 = Instant::now();
    for id in 0..3 {
        let (token, _) = call(&m.register(inst(id)));
        m.on_result(&RegistrationKey::of(&inst(id)), token, Ok(()), t0, &mut rng);
    }
    // One already on its way out: not unregistered twice.
    let (gone, _) = call(&m.unregister(inst(2)));
    let out = m.unregister_all();
    let unregisters = out
        .iter()
        .filter(|a| {
            matches!(
                a,
                RegistrarAction::Call {
                    op: RegistrarOp::Unregister(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(unregisters, 2);
    m.on_result(&RegistrationKey::of(&inst(2)), gone, Ok(()), t0, &mut rng);
    assert_eq!(m.len(), 2, "the other two settle when their calls land");
}
