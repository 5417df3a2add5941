//! Hand-stepped tests of subscribe-failure tracking (#3624) and session
//! loss in the subscription machine.

use std::time::{Duration, Instant};

use super::tests::{config, insts, reset};
use super::*;

fn opens(acts: &[SubscriptionAction]) -> Vec<Token> {
    acts.iter()
        .filter_map(|a| match a {
            SubscriptionAction::OpenWatch { token, .. } => Some(*token),
            _ => None,
        })
        .collect()
}

fn reopen_timers(acts: &[SubscriptionAction]) -> Vec<(String, Token, Duration)> {
    acts.iter()
        .filter_map(|a| match a {
            SubscriptionAction::ArmTimer {
                app,
                token,
                delay,
                kind: TimerKind::Reopen,
            } => Some((app.clone(), *token, *delay)),
            _ => None,
        })
        .collect()
}

fn failing(acts: &[SubscriptionAction]) -> Vec<(To, Option<u32>)> {
    acts.iter()
        .filter_map(|a| match a {
            SubscriptionAction::SubscribeFailing { to, failure, .. } => {
                Some((*to, failure.as_ref().map(|f| f.attempts)))
            }
            _ => None,
        })
        .collect()
}

fn down() -> Result<(), RegistryError> {
    Err(RegistryError::Unavailable("refused".into()))
}

#[test]
fn a_failing_subscribe_is_tracked_not_duplicated_and_cleared_by_the_first_state() {
    let mut m = SubscriptionMachine::new(config(), 1);
    let t0 = Instant::now();
    let w = opens(&m.subscribe("a", 1, t0));
    assert_eq!(w.len(), 1);
    // A second subscriber while the open is in flight: no second open.
    assert!(opens(&m.subscribe("a", 2, t0)).is_empty());
    let acts = m.on_watch_opened("a", w[0], down(), t0);
    assert_eq!(failing(&acts), vec![(To::All, Some(1))]);
    let f = m.subscribe_failure("a").expect("tracked");
    assert_eq!((f.since, f.attempts), (t0, 1));
    assert_eq!(f.last_error, RegistryError::Unavailable("refused".into()));
    let timers = reopen_timers(&acts);
    assert_eq!(timers.len(), 1, "one pending retry per app");
    // A third subscriber while it waits: told at once, no extra open.
    let acts = m.subscribe("a", 3, t0);
    assert!(opens(&acts).is_empty());
    assert_eq!(failing(&acts), vec![(To::One(3), Some(1))]);
    // The retry fails again, then succeeds.
    let t1 = t0 + timers[0].2;
    let w = opens(&m.on_timer("a", timers[0].1, t1));
    let acts = m.on_watch_opened("a", w[0], down(), t1);
    assert_eq!(failing(&acts), vec![(To::All, Some(2))]);
    assert_eq!(
        m.subscribe_failure("a").unwrap().since,
        t0,
        "since the first"
    );
    let (_, tok, d) = reopen_timers(&acts)[0].clone();
    let t2 = t1 + d;
    let w = opens(&m.on_timer("a", tok, t2));
    m.on_watch_opened("a", w[0], Ok(()), t2);
    assert_eq!(
        m.subscribe_failure("a").unwrap().attempts,
        2,
        "until a state"
    );
    let acts = m.on_stream_item("a", w[0], Ok(reset(&insts(&[1]), 1)), t2);
    assert_eq!(failing(&acts), vec![(To::All, None)]);
    assert_eq!(m.subscribe_failure("a"), None);
}

#[test]
fn the_last_unsubscribe_and_close_cancel_the_pending_retry() {
    let mut m = SubscriptionMachine::new(config(), 1);
    let t0 = Instant::now();
    let w = opens(&m.subscribe("a", 1, t0));
    let acts = m.on_watch_opened("a", w[0], down(), t0);
    let (_, tok, _) = reopen_timers(&acts)[0].clone();
    let acts = m.unsubscribe("a", 1, t0);
    assert!(acts.contains(&SubscriptionAction::Cancel { token: tok }));
    assert!(m
        .on_timer("a", tok, t0 + Duration::from_secs(60))
        .is_empty());
    // Shutdown likewise.
    let w = opens(&m.subscribe("b", 1, t0));
    let acts = m.on_watch_opened("b", w[0], down(), t0);
    let (_, tok, _) = reopen_timers(&acts)[0].clone();
    assert!(m
        .close()
        .contains(&SubscriptionAction::Cancel { token: tok }));
    assert!(m
        .on_timer("b", tok, t0 + Duration::from_secs(60))
        .is_empty());
}

#[test]
fn a_session_loss_reopens_every_watch_spread_over_the_window_with_a_full_read() {
    let spread = Duration::from_secs(5);
    let mut m = SubscriptionMachine::new(config(), 3).with_session_spread(spread);
    let t0 = Instant::now();
    let apps: Vec<String> = (0..500).map(|i| format!("app{i}")).collect();
    for app in &apps {
        let w = opens(&m.subscribe(app, 1, t0));
        m.on_watch_opened(app, w[0], Ok(()), t0);
        m.on_stream_item(app, w[0], Ok(reset(&insts(&[1]), 1)), t0);
    }
    let acts = m.session_lost(t0);
    assert!(opens(&acts).is_empty(), "nothing re-opened at once");
    let timers = reopen_timers(&acts);
    assert_eq!(timers.len(), 500);
    assert!(timers.iter().all(|(_, _, d)| *d <= spread));
    for s in 0..5 {
        let n = timers.iter().filter(|(_, _, d)| d.as_secs() == s).count();
        assert!((60..=140).contains(&n), "second {s}: {n} of 500");
    }
    assert!(apps.iter().all(|a| m.stale_since(a) == Some(t0)));
    // Each re-open starts with a full re-read that applies what was missed.
    let (app, tok, d) = timers[0].clone();
    let t1 = t0 + d;
    let w = opens(&m.on_timer(&app, tok, t1));
    assert_eq!(w.len(), 1);
    m.on_watch_opened(&app, w[0], Ok(()), t1);
    let acts = m.on_stream_item(&app, w[0], Ok(reset(&insts(&[1, 2]), 2)), t1);
    assert!(acts
        .iter()
        .any(|a| matches!(a, SubscriptionAction::Deliver { .. })));
    assert_eq!(m.stale_since(&app), None);
}
