//! The registrar's probe on a hand-stepped clock: a small simulation of the
//! shell (timers, calls and probes answered after a latency by a registry
//! whose writes and reads are down until given instants).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;

const SEC: Duration = Duration::from_secs(1);
const LATENCY: Duration = Duration::from_millis(5);

fn inst(id: u16) -> ServiceInstance {
    ServiceInstance::new("app", "10.0.0.1", id)
}

#[derive(Debug)]
enum Due {
    Timer(RegistrationKey),
    Probe,
    Call(RegistrationKey, RegistrarToken),
    ProbeAnswer(RegistrarToken),
}

struct Sim {
    m: RegistrarMachine,
    rng: StdRng,
    t0: Instant,
    now: Instant,
    /// Timers and answers by (due, sequence): token or sequence -> what.
    due: BTreeMap<(Instant, u64), (RegistrarToken, Due)>,
    seq: u64,
    /// Writes fail with `Unavailable` before this instant.
    writes_down_until: Instant,
    /// Reads (probes) fail with `Unavailable` before this instant.
    reads_down_until: Instant,
    /// When each probe was sent, and whether it answered.
    probes: Vec<(Instant, Option<bool>)>,
    /// When each registry call was sent.
    calls: Vec<(Instant, RegistrationKey)>,
    /// When each key last settled registered.
    landed: BTreeMap<RegistrationKey, Instant>,
    /// Keys woken by each `RegistryAnswers`.
    woken: Vec<(Instant, usize)>,
}

impl Sim {
    fn new(config: RegistrarConfig, down_for: Duration) -> Self {
        let t0 = Instant::now();
        Self {
            m: RegistrarMachine::new(config),
            rng: StdRng::seed_from_u64(20),
            t0,
            now: t0,
            due: BTreeMap::new(),
            seq: 0,
            writes_down_until: t0 + down_for,
            reads_down_until: t0 + down_for,
            probes: Vec::new(),
            calls: Vec::new(),
            landed: BTreeMap::new(),
            woken: Vec::new(),
        }
    }

    fn at(&self, secs: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(secs)
    }

    fn push(&mut self, at: Instant, token: RegistrarToken, what: Due) {
        self.seq += 1;
        self.due.insert((at, self.seq), (token, what));
    }

    fn perform(&mut self, actions: Vec<RegistrarAction>) {
        let now = self.now;
        for a in actions {
            match a {
                RegistrarAction::Call { key, token, .. } => {
                    self.calls.push((now, key.clone()));
                    self.push(now + LATENCY, token, Due::Call(key, token));
                }
                RegistrarAction::ArmTimer { key, token, delay } => {
                    self.push(now + delay, token, Due::Timer(key));
                }
                RegistrarAction::ArmProbe { token, delay } => {
                    self.push(now + delay, token, Due::Probe);
                }
                RegistrarAction::Probe { token, .. } => {
                    self.probes.push((now, None));
                    self.push(now + LATENCY, token, Due::ProbeAnswer(token));
                }
                RegistrarAction::CancelTimer { token } => {
                    self.due.retain(|_, (t, what)| {
                        *t != token || !matches!(what, Due::Timer(_) | Due::Probe)
                    });
                }
                RegistrarAction::Settled { key, registered } => {
                    if registered {
                        self.landed.insert(key, now);
                    }
                }
                RegistrarAction::RegistryAnswers { woken, .. } => self.woken.push((now, woken)),
                RegistrarAction::Failed { .. } => {}
            }
        }
    }

    fn register(&mut self, id: u16) {
        let out = self.m.register(inst(id));
        self.perform(out);
    }

    /// Runs every timer and answer due up to `secs` after the start.
    fn run_until(&mut self, secs: f64) {
        let end = self.at(secs);
        while let Some(entry) = self.due.first_entry() {
            if entry.key().0 > end {
                break;
            }
            let ((at, _), (token, what)) = entry.remove_entry();
            self.now = at;
            let out = match what {
                Due::Timer(key) => self.m.on_timer(&key, token),
                Due::Probe => self.m.on_probe_timer(token),
                Due::Call(key, token) => {
                    let r = if at < self.writes_down_until {
                        Err(RegistryError::Unavailable("down".into()))
                    } else {
                        Ok(())
                    };
                    self.m.on_result(&key, token, r, at, &mut self.rng)
                }
                Due::ProbeAnswer(token) => {
                    let ok = at >= self.reads_down_until;
                    if let Some(p) = self.probes.iter_mut().rev().find(|p| p.1.is_none()) {
                        p.1 = Some(ok);
                    }
                    let r = if ok {
                        Ok(())
                    } else {
                        Err(RegistryError::Unavailable("down".into()))
                    };
                    self.m.on_probe_result(token, r, at, &mut self.rng)
                }
            };
            self.perform(out);
        }
        self.now = end;
    }

    fn probes_between(&self, from: f64, to: f64) -> Vec<Instant> {
        let (from, to) = (self.at(from), self.at(to));
        self.probes
            .iter()
            .map(|p| p.0)
            .filter(|t| *t >= from && *t < to)
            .collect()
    }

    fn calls_between(&self, from: f64, to: f64) -> usize {
        let (from, to) = (self.at(from), self.at(to));
        self.calls
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .count()
    }
}

/// Ten minutes down, five keys registered meanwhile (one a mapping), then
/// the registry answers at `600 s`; the latest landing after it, in s.
fn ten_minute_outage(config: RegistrarConfig) -> (Sim, f64) {
    let mut sim = Sim::new(config, 600 * SEC);
    sim.register(1);
    sim.run_until(100.0);
    sim.register(2);
    sim.run_until(300.0);
    sim.register(3);
    let out = sim.m.map("demo.Greeter", "app");
    sim.perform(out);
    sim.run_until(599.7);
    sim.register(4);
    sim.run_until(700.0);
    let back = sim.at(600.0);
    assert_eq!(sim.landed.len(), 5, "all landed: {:?}", sim.m.states());
    let latest = sim
        .landed
        .values()
        .map(|t| t.duration_since(back).as_secs_f64())
        .fold(0.0, f64::max);
    (sim, latest)
}

#[test]
fn after_a_ten_minute_outage_every_pending_intent_is_resent_within_two_seconds_of_the_probe() {
    let (sim, latest) = ten_minute_outage(RegistrarConfig::default());
    let (_, without) = ten_minute_outage(RegistrarConfig {
        recover: crate::recover::RecoverPolicy::default(),
        ..RegistrarConfig::default()
    });
    let during = sim.probes_between(0.0, 600.0);
    let first_ok = sim
        .probes
        .iter()
        .find(|p| p.1 == Some(true))
        .map(|p| p.0 + LATENCY)
        .expect("a probe answered");
    let writes = sim.calls_between(0.0, 600.0);
    eprintln!(
        "registrar, 10 min outage: last of 5 pending intents landed {latest:.3} s after the \
         registry answered with the probe ({:.3} s after the first probe that answered), \
         {without:.1} s without it; {} probes and {writes} register calls during the outage",
        sim.landed
            .values()
            .map(|t| t.saturating_duration_since(first_ok).as_secs_f64())
            .fold(0.0, f64::max),
        during.len(),
    );
    // Every pending intent is re-sent within 2 s of the first probe that
    // answered, and lands within 2 s of the registry answering.
    let resent: Vec<Instant> = sim
        .calls
        .iter()
        .filter(|(t, _)| *t >= sim.at(600.0))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(resent.len(), 5, "one call per pending key: {resent:?}");
    assert!(
        resent.iter().all(|t| *t <= first_ok + 2 * SEC),
        "{resent:?}"
    );
    assert!(
        latest <= 2.0,
        "landed {latest} s after the registry answered"
    );
    // Woken at once: the four that waited on a grown backoff (the one
    // registered 0.3 s before the end retries on its own 1 s step).
    assert_eq!(sim.woken, vec![(first_ok, 4)]);
    assert!(without > 2.0, "the backoff alone waits: {without} s");
    // No more than about one probe per second while down (one interval
    // plus up to 25 % jitter between them), and it ran throughout.
    assert!(
        during.windows(2).all(|w| w[1] - w[0] >= SEC),
        "probes less than 1 s apart"
    );
    assert!((400..=600).contains(&during.len()), "{}", during.len());
    // The probes are reads: the writes stay on their backoff (about two
    // per key per minute).
    assert!(writes <= 100, "{writes} register calls in the outage");
    // Nothing pending: no probe, no call, nothing armed.
    assert!(sim.probes_between(602.0, 700.0).is_empty());
    assert_eq!(sim.calls_between(602.0, 700.0), 0);
    assert_eq!((sim.m.pending(), sim.m.probing()), (0, false));
    assert!(sim.due.is_empty(), "{:?}", sim.due);
}

#[test]
fn nothing_pending_or_nothing_down_means_no_probe() {
    // The registry answers: registrations land, no probe ever.
    let mut sim = Sim::new(RegistrarConfig::default(), Duration::ZERO);
    for id in 0..3 {
        sim.register(id);
    }
    sim.run_until(600.0);
    assert_eq!(sim.landed.len(), 3);
    assert!(sim.probes.is_empty());
    // A refusal (the registry answered) is no outage: no probe either.
    let mut m = RegistrarMachine::new(RegistrarConfig::default());
    let mut rng = StdRng::seed_from_u64(1);
    let now = Instant::now();
    let key = RegistrationKey::of(&inst(1));
    let RegistrarAction::Call { token, .. } = m.register(inst(1))[0].clone() else {
        panic!("a call first");
    };
    let out = m.on_result(
        &key,
        token,
        Err(RegistryError::Rejected("no".into())),
        now,
        &mut rng,
    );
    assert!(
        !out.iter()
            .any(|a| matches!(a, RegistrarAction::ArmProbe { .. })),
        "{out:?}"
    );
    assert!(!m.probing());
}

#[test]
fn a_registry_that_reads_but_refuses_writes_gets_no_call_per_probe() {
    // Writes fail for 10 min while reads answer (a probe cannot tell the
    // write will pass): the keys stay on their backoff, and the probes
    // stop until a key fails again.
    let mut sim = Sim::new(RegistrarConfig::default(), 600 * SEC);
    sim.reads_down_until = sim.t0;
    for id in 0..10 {
        sim.register(id);
    }
    sim.run_until(600.0);
    let probes = sim.probes_between(0.0, 600.0).len();
    let writes = sim.calls_between(120.0, 600.0);
    let per_key_min = writes as f64 / 10.0 / 8.0;
    eprintln!(
        "registrar, writes refused 10 min, reads fine: {probes} probes, \
         {per_key_min:.2} calls per key per minute in steady state"
    );
    assert!(sim.woken.is_empty(), "no key woken: {:?}", sim.woken);
    assert!(per_key_min <= 2.1, "{per_key_min}");
    assert!(probes <= 400, "{probes} probes");
    sim.run_until(700.0);
    assert_eq!(sim.landed.len(), 10, "each lands on its own backoff");
}

#[test]
fn one_probe_at_a_time_and_a_woken_key_failing_again_waits_for_the_next_failed_probe() {
    let mut sim = Sim::new(RegistrarConfig::default(), 60 * SEC);
    for id in 0..50 {
        sim.register(id);
    }
    sim.run_until(59.0);
    // At most one probe in flight: each answered before the next is sent.
    let sent: Vec<_> = sim.probes.iter().map(|p| p.0).collect();
    assert!(sent.windows(2).all(|w| w[1] - w[0] >= SEC));
    // Reads come back at 60 s, writes only at 63 s: the woken keys fail
    // again once, are not woken by the next probes (which answer), and
    // land on their backoff.
    sim.writes_down_until = sim.at(63.0);
    sim.run_until(200.0);
    assert_eq!(sim.woken.len(), 1, "{:?}", sim.woken);
    assert_eq!(sim.woken[0].1, 50);
    let after = sim.calls_between(60.0, 63.0);
    assert_eq!(after, 50, "one re-send per key, not one per probe");
    assert_eq!(sim.landed.len(), 50);
    assert!(sim.due.is_empty());
}
