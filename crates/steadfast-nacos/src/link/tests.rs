//! The link machine stepped by hand.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;

fn config(servers: &[&str]) -> NacosConfig {
    let mut c = NacosConfig::new(servers.iter().copied());
    c.backoff.jitter = 0.0;
    c
}

fn connect_target(actions: &[LinkAction]) -> Option<&str> {
    actions.iter().find_map(|a| match a {
        LinkAction::Connect(s) => Some(s.as_str()),
        _ => None,
    })
}

#[test]
fn connects_at_once_then_checks_health_and_resyncs_on_their_cadence() {
    let t0 = Instant::now();
    let mut rng = StdRng::seed_from_u64(1);
    let c = config(&["a:1"]);
    let mut m = LinkMachine::new(&c, t0);
    assert_eq!(m.poll_timeout(), Some(t0));
    assert_eq!(connect_target(&m.handle_timeout(t0)), Some("a:1"));
    assert_eq!(m.poll_timeout(), None, "nothing while connecting");
    assert_eq!(m.on_connected(t0), vec![LinkAction::Redo]);
    let at = m.poll_timeout().unwrap();
    assert_eq!(at, t0 + c.health_interval);
    assert_eq!(m.handle_timeout(at), vec![LinkAction::CheckHealth]);
    assert!(m.on_health(true, at, &mut rng).is_empty());
    let resync = t0 + c.resync_interval;
    let mut now = at;
    let mut resyncs = 0;
    for _ in 0..100 {
        let next = m.poll_timeout().unwrap();
        assert!(next > now);
        now = next;
        for a in m.handle_timeout(now) {
            match a {
                LinkAction::CheckHealth => assert!(m.on_health(true, now, &mut rng).is_empty()),
                LinkAction::Resync => resyncs += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        if now >= resync {
            break;
        }
    }
    assert_eq!(resyncs, 1);
}

#[test]
fn failed_health_checks_drop_the_connection_and_move_to_the_next_server() {
    let t0 = Instant::now();
    let mut rng = StdRng::seed_from_u64(2);
    let c = config(&["a:1", "b:2", "c:3"]);
    let mut m = LinkMachine::new(&c, t0);
    m.handle_timeout(t0);
    m.on_connected(t0);
    let at = m.poll_timeout().unwrap();
    m.handle_timeout(at);
    assert!(m.on_health(true, at, &mut rng).is_empty());
    // A frozen server: checks time out.
    let mut now = m.poll_timeout().unwrap();
    assert_eq!(m.handle_timeout(now), vec![LinkAction::CheckHealth]);
    assert!(
        m.on_health(false, now, &mut rng).is_empty(),
        "one failure is tolerated"
    );
    now = m.poll_timeout().unwrap();
    assert!(now - at < c.health_interval * 2, "rechecked sooner");
    assert_eq!(m.handle_timeout(now), vec![LinkAction::CheckHealth]);
    assert_eq!(
        m.on_health(false, now, &mut rng),
        vec![LinkAction::ReportStale]
    );
    assert!(!m.is_up());
    // Stale within 10 s of the freeze (the config's bound).
    assert!(now - at <= Duration::from_secs(10));
    // The next server, at once.
    assert_eq!(m.poll_timeout(), Some(now));
    assert_eq!(connect_target(&m.handle_timeout(now)), Some("b:2"));
}

#[test]
fn failures_back_off_through_every_server_and_a_flapping_connection_never_spins() {
    let t0 = Instant::now();
    let mut rng = StdRng::seed_from_u64(3);
    let c = config(&["a:1", "b:2"]);
    let mut m = LinkMachine::new(&c, t0);
    let mut now = t0;
    let mut tried = Vec::new();
    let mut reports = 0;
    for _ in 0..6 {
        now = m.poll_timeout().unwrap();
        tried.push(connect_target(&m.handle_timeout(now)).unwrap().to_string());
        reports += m.on_connect_failed(now, &mut rng).len();
    }
    assert_eq!(tried, ["a:1", "b:2", "a:1", "b:2", "a:1", "b:2"]);
    assert_eq!(reports, 1, "a start-up outage is reported once");
    let gap = m.poll_timeout().unwrap() - now;
    assert!(gap >= Duration::from_millis(1600), "backed off: {gap:?}");
    assert!(gap <= c.backoff.max);
    // Connections that break right after they are made (no health check
    // answered) back off too: 50 losses span at least 50 x initial.
    let mut m = LinkMachine::new(&c, t0);
    let mut now = t0;
    for _ in 0..50 {
        now = m.poll_timeout().unwrap();
        m.handle_timeout(now);
        m.on_connected(now);
        assert_eq!(m.on_lost(now, &mut rng), vec![LinkAction::ReportStale]);
    }
    assert!(now - t0 >= c.backoff.initial * 40, "spun: {:?}", now - t0);
    assert_eq!(m.connects(), 50);
}

#[test]
fn a_token_is_renewed_before_it_expires_and_retried_after_a_failed_renewal() {
    let t0 = Instant::now();
    let mut rng = StdRng::seed_from_u64(4);
    let c = config(&["a:1"]);
    let mut m = LinkMachine::new(&c, t0);
    m.handle_timeout(t0);
    m.on_connected(t0);
    m.on_logged_in(t0, Duration::from_secs(100));
    let mut now = t0;
    let mut logins = Vec::new();
    while now < t0 + Duration::from_secs(120) {
        now = m.poll_timeout().unwrap();
        for a in m.handle_timeout(now) {
            match a {
                LinkAction::CheckHealth => {
                    m.on_health(true, now, &mut rng);
                }
                LinkAction::Login => {
                    logins.push(now - t0);
                    if logins.len() == 1 {
                        m.on_login_failed(now);
                    } else {
                        m.on_logged_in(now, Duration::from_secs(100));
                    }
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        logins[0],
        Duration::from_secs(90),
        "a tenth of its life early"
    );
    assert_eq!(
        logins[1],
        Duration::from_secs(90) + c.health_interval,
        "retried"
    );
    assert_eq!(logins.len(), 2, "{logins:?}");
}
