//! Hand-stepped-clock tests of the shared prober: load independent of the
//! number of watches, the live cadence and its retries, dead endpoints,
//! waits for "etcd answered", and cadences no value can make spin.

use rand::SeedableRng;

use super::*;

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn policy() -> ProberPolicy {
    ProberPolicy {
        live_interval: Some(SECS(2)),
        failures: 2,
        jitter: 0.0,
    }
}

fn machine(endpoints: usize, policy: ProberPolicy) -> ProberMachine {
    ProberMachine::new(endpoints, policy, StdRng::seed_from_u64(3))
}

fn header(rev: i64) -> ResponseHeader {
    ResponseHeader {
        cluster_id: 1,
        member_id: 1,
        revision: rev,
        raft_term: 2,
    }
}

/// Runs `m` from `t0` for `span`, every probe answering at once with
/// `ok(target)`; returns the probes sent.
fn run(
    m: &mut ProberMachine,
    t0: Instant,
    span: Duration,
    ok: impl Fn(ProbeTarget) -> bool,
) -> Vec<(Duration, ProbeTarget)> {
    let mut sent = Vec::new();
    let mut guard = 0;
    while let Some(t) = m.next_wake() {
        guard += 1;
        assert!(guard < 100_000, "the prober spins");
        if t > t0 + span {
            break;
        }
        for o in m.on_timer(t) {
            sent.push((t - t0, o.target));
            let e = match o.target {
                ProbeTarget::Endpoint(e) => e,
                ProbeTarget::Current => 0,
            };
            let h = header(5);
            m.on_result(o.seq, e, ok(o.target).then_some(&h), t, t);
        }
    }
    sent
}

#[test]
fn k_live_watches_on_one_endpoint_cost_one_probe_per_interval_whatever_k() {
    let t0 = Instant::now();
    let mut counts = Vec::new();
    for k in [1usize, 10, 100, 1000] {
        let mut m = machine(1, policy());
        for _ in 0..k {
            let id = m.subscribe();
            m.set_want(id, Want::Live(0), t0);
        }
        let sent = run(&mut m, t0, SECS(60), |_| true);
        counts.push(sent.len());
    }
    assert_eq!(counts, vec![30, 30, 30, 30], "one probe per 2 s, any K");
    // Two endpoints with watches: one probe per endpoint per interval.
    let mut m = machine(3, policy());
    for e in [0, 0, 2, 2, 2] {
        let id = m.subscribe();
        m.set_want(id, Want::Live(e), t0);
    }
    let sent = run(&mut m, t0, SECS(10), |_| true);
    let on = |e| {
        sent.iter()
            .filter(|(_, t)| *t == ProbeTarget::Endpoint(e))
            .count()
    };
    assert_eq!((on(0), on(1), on(2)), (5, 0, 5));
}

#[test]
fn live_probes_follow_the_cadence_retry_on_the_schedule_and_declare_a_frozen_endpoint_dead() {
    let t0 = Instant::now();
    let mut m = machine(2, policy());
    let id = m.subscribe();
    m.set_want(id, Want::Live(1), t0);
    assert_eq!(m.next_wake(), Some(t0 + SECS(2)));
    let [o] = m.on_timer(t0 + SECS(2))[..] else {
        panic!("one probe due")
    };
    assert_eq!(o.target, ProbeTarget::Endpoint(1));
    assert_eq!(m.next_wake(), None, "nothing timed while the probe flies");
    let out = m.on_result(o.seq, 1, Some(&header(7)), t0 + SECS(2), t0 + SECS(2));
    assert_eq!(out, Outcome::default());
    assert_eq!(m.verdicts().last_ok(1).map(|p| p.header.revision), Some(7));
    assert_eq!(m.next_wake(), Some(t0 + SECS(4)));
    // Frozen from 4 s: the probe times out at 5 s, is retried at 5.5 s (a
    // quarter of the interval), times out again at 6.5 s: dead, demoted.
    let o = m.on_timer(t0 + SECS(4))[0];
    let out = m.on_result(o.seq, 1, None, t0 + SECS(4), t0 + SECS(5));
    assert_eq!(out, Outcome::default(), "one failure is not enough");
    assert_eq!(m.next_wake(), Some(t0 + MS(5500)));
    let o = m.on_timer(t0 + MS(5500))[0];
    let out = m.on_result(o.seq, 1, None, t0 + MS(5500), t0 + MS(6500));
    assert_eq!(out.demote, Some(1));
    assert!(out.declared_dead);
    assert_eq!(m.verdicts().dead, vec![0, 1]);
    // A result nobody waits for changes nothing.
    let before = m.verdicts().clone();
    assert_eq!(
        m.on_result(999, 1, None, t0, t0 + SECS(7)),
        Outcome::default()
    );
    assert_eq!(m.verdicts(), &before);
    // The watch moves away: no more probes of endpoint 1, nothing timed.
    m.set_want(id, Want::Nothing, t0 + SECS(7));
    assert_eq!(m.next_wake(), None);
    assert!(m.idle());
}

#[test]
fn waits_probe_the_current_endpoint_at_the_shortest_cadence_and_one_success_answers_all() {
    let t0 = Instant::now();
    let mut m = machine(2, policy());
    let watches: Vec<SubId> = (0..5).map(|_| m.subscribe()).collect();
    for id in &watches {
        m.set_want(*id, Want::Answer(SECS(1)), t0);
    }
    assert_eq!(m.next_wake(), Some(t0 + SECS(1)));
    // The keepers of a registry wait too, at 250 ms: the sooner cadence wins.
    let keepers = m.subscribe();
    m.set_want(keepers, Want::Answer(MS(250)), t0);
    assert_eq!(m.next_wake(), Some(t0 + MS(250)));
    let [o] = m.on_timer(t0 + MS(250))[..] else {
        panic!("one probe for every waiter")
    };
    assert_eq!(o.target, ProbeTarget::Current);
    let out = m.on_result(o.seq, 0, None, t0 + MS(250), t0 + MS(300));
    assert_eq!(out.demote, Some(0), "a failed probe demotes the endpoint");
    assert!(out.answer_failed);
    assert_eq!(m.next_wake(), Some(t0 + MS(550)));
    let o = m.on_timer(t0 + MS(550))[0];
    let out = m.on_result(o.seq, 1, Some(&header(3)), t0 + MS(550), t0 + MS(560));
    assert_eq!(out, Outcome::default());
    assert_eq!(m.verdicts().answered, 1);
    assert!(m.idle(), "every wait is satisfied: no more probes");
    assert_eq!(m.next_wake(), None);
    // A wait registered after the answer waits for the next one.
    m.set_want(watches[0], Want::Answer(SECS(1)), t0 + SECS(1));
    assert_eq!(m.next_wake(), Some(t0 + SECS(2)));
    m.unsubscribe(watches[0], t0 + SECS(1));
    assert!(m.idle());
}

#[test]
fn no_cadence_value_makes_the_prober_spin() {
    let t0 = Instant::now();
    let absurd = ProberPolicy {
        live_interval: Some(Duration::ZERO),
        failures: 0,
        jitter: f64::NAN,
    };
    let mut m = machine(1, absurd);
    let (a, b) = (m.subscribe(), m.subscribe());
    m.set_want(a, Want::Live(0), t0);
    m.set_want(b, Want::Answer(Duration::ZERO), t0);
    let sent = run(&mut m, t0, SECS(1), |_| false);
    // At most one probe of each kind per MIN_CADENCE.
    assert!(
        !sent.is_empty() && sent.len() <= 2 * 100 + 2,
        "{}",
        sent.len()
    );
    let huge = ProberPolicy {
        live_interval: Some(Duration::MAX),
        failures: u32::MAX,
        jitter: 5.0,
    };
    let mut m = machine(1, huge);
    let id = m.subscribe();
    m.set_want(id, Want::Live(0), t0);
    let waiter = m.subscribe();
    m.set_want(waiter, Want::Answer(Duration::MAX), t0);
    let wake = m.next_wake().expect("scheduled, not overflowed");
    assert!(wake > t0 + SECS(3600));
    assert_eq!(m.on_timer(t0 + SECS(3600)), vec![]);
}
