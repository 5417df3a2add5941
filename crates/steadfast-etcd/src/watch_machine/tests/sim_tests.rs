//! Simulations with exact time and no IO: `Sim` plays etcd (up, refusing,
//! frozen) against watch machines and the client's shared prober machine,
//! wired as the driver wires them (the watch says what it needs, the prober
//! probes, its verdicts go back to the watch). Freeze and outage figures,
//! and several watches of one client sharing one prober.

use super::*;
use crate::prober_machine::{ProbeTarget, ProberMachine, ProberPolicy, SubId, Verdicts, Want};

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn config() -> crate::EtcdConfig {
    crate::EtcdConfig::new(["http://e:1"])
}

/// What etcd does at a given moment in a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Etcd {
    Up,
    /// SIGKILLed: connections refused, streams broken.
    Refusing,
    /// SIGSTOPped: connections accepted, nothing answered.
    Frozen,
}

/// One watch of the simulated client.
struct W {
    m: WatchMachine,
    sub: SubId,
    want: Want,
    seen: Verdicts,
    io: Option<(Next, Instant)>,
    reports: Vec<Duration>,
    snapshots: Vec<Duration>,
}

/// Drives `n` watches of one client and its prober against a scripted
/// etcd: requests complete at once when etcd is up or refusing, and hang
/// when frozen until it thaws (success) or their deadline passes.
struct Sim<F: Fn(Duration) -> Etcd> {
    ws: Vec<W>,
    p: ProberMachine,
    /// Probes in flight: seq, sent.
    probes: Vec<(u64, Instant)>,
    /// Probes sent so far.
    sent: usize,
    t0: Instant,
    etcd: F,
}

impl<F: Fn(Duration) -> Etcd> Sim<F> {
    fn new(n: usize, seed: u64, etcd: F) -> Self {
        let c = config();
        let timing = WatchTiming::from_config(&c);
        let mut p = ProberMachine::new(
            1,
            ProberPolicy::from_config(&c),
            StdRng::seed_from_u64(seed),
        );
        let t0 = Instant::now();
        let ws = (0..n as u64)
            .map(|i| {
                let (mut m, _) = machine_with(timing);
                m.live = Liveness::new(timing, StdRng::seed_from_u64(seed * 1000 + i));
                live_at(&mut m, 7, vec![kv(&inst("a"), 3)], t0);
                W {
                    m,
                    sub: p.subscribe(),
                    want: Want::Nothing,
                    seen: Verdicts::default(),
                    io: Some((Next::Continue, t0)),
                    reports: vec![],
                    snapshots: vec![],
                }
            })
            .collect();
        let mut sim = Self {
            ws,
            p,
            probes: vec![],
            sent: 0,
            t0,
            etcd,
        };
        for i in 0..n {
            sim.sync_want(i, t0);
        }
        sim
    }

    fn state(&self, t: Instant) -> Etcd {
        (self.etcd)(t - self.t0)
    }

    /// When a request sent at `sent` with `deadline` completes, and whether
    /// it succeeds.
    fn complete(&self, sent: Instant, deadline: Duration) -> (Instant, bool) {
        let mut t = sent;
        while t <= sent + deadline {
            match self.state(t) {
                Etcd::Up => return (t, true),
                Etcd::Refusing => return (t, false),
                Etcd::Frozen => t += MS(10),
            }
        }
        (sent + deadline, false)
    }

    /// When the open stream breaks (etcd killed), if before `limit`.
    fn stream_break(&self, from: Instant, limit: Instant) -> Option<Instant> {
        let mut t = from;
        while t < limit {
            if self.state(t) == Etcd::Refusing {
                return Some(t);
            }
            t += MS(10);
        }
        None
    }

    fn sync_want(&mut self, i: usize, t: Instant) {
        let want = match self.ws[i].m.probe_need() {
            ProbeNeed::Nothing => Want::Nothing,
            ProbeNeed::Liveness => Want::Live(0),
            ProbeNeed::Answer => Want::Answer(config().recover_probe_interval),
        };
        if want != self.ws[i].want {
            self.ws[i].want = want;
            self.p.set_want(self.ws[i].sub, want, t);
        }
    }

    /// When watch `i`'s IO completes, and whether it succeeds.
    fn io_done(&self, i: usize, wake: Option<Instant>, end: Instant) -> Option<(Instant, bool)> {
        self.ws[i].io.map(|(next, sent)| match next {
            Next::Range => self.complete(sent, SECS(3)),
            Next::Watch { .. } => self.complete(sent, SECS(5)),
            _ => {
                let limit = wake.unwrap_or(end).min(end);
                let broke = self.stream_break(sent, limit);
                (broke.unwrap_or(end + SECS(1)), false)
            }
        })
    }

    fn run(&mut self, until: Duration) {
        let end = self.t0 + until;
        for _ in 0..1_000_000 {
            let wakes: Vec<Option<Instant>> = self.ws.iter().map(|w| w.m.next_wake()).collect();
            let ios: Vec<_> = (0..self.ws.len())
                .map(|i| self.io_done(i, wakes[i], end))
                .collect();
            let probes: Vec<_> = self
                .probes
                .iter()
                .map(|(_, sent)| self.complete(*sent, SECS(1)))
                .collect();
            let t = wakes
                .iter()
                .copied()
                .chain(ios.iter().map(|d| d.map(|d| d.0)))
                .chain(probes.iter().map(|d| Some(d.0)))
                .chain([self.p.next_wake()])
                .flatten()
                .min()
                .expect("something is timed");
            if t > end {
                return;
            }
            if let Some(i) = (0..ios.len()).find(|i| ios[*i].is_some_and(|d| d.0 == t)) {
                let step = self.io_step(i, ios[i].unwrap().1, t);
                self.apply(i, step, t);
            } else if let Some(k) = probes.iter().position(|d| d.0 == t) {
                let (seq, sent) = self.probes.remove(k);
                let h = header(9, 2);
                self.p.on_result(seq, 0, probes[k].1.then_some(&h), sent, t);
                self.verdicts(t);
            } else if let Some(i) = (0..wakes.len()).find(|i| wakes[*i] == Some(t)) {
                let step = self.ws[i].m.on_timer(t);
                self.apply(i, step, t);
            } else {
                for o in self.p.on_timer(t) {
                    assert!(matches!(
                        o.target,
                        ProbeTarget::Endpoint(0) | ProbeTarget::Current
                    ));
                    self.sent += 1;
                    self.probes.push((o.seq, t));
                }
            }
        }
        panic!("simulation does not converge");
    }

    fn io_step(&mut self, i: usize, ok: bool, t: Instant) -> Step {
        let (next, _) = self.ws[i].io.take().unwrap();
        let m = &mut self.ws[i].m;
        match (next, ok) {
            (Next::Range, true) => m.on_range(&range(9, vec![kv(&inst("a"), 3)]), t),
            (Next::Range, false) => m.on_range_failed(&timeout(), t),
            (Next::Watch { .. }, true) => {
                m.on_opened(t);
                self.ws[i].io = Some((Next::Continue, t));
                self.ws[i].m.on_message(&created(9, 2), t)
            }
            (Next::Watch { .. }, false) => m.on_interrupted(&Interruption::Open(refused()), t),
            _ => {
                let broke = WatchError::Transport("unexpected EOF".into());
                m.on_interrupted(&Interruption::Stream(broke), t)
            }
        }
    }

    /// Feeds what changed in the prober's verdicts to every watch, as the
    /// driver does.
    fn verdicts(&mut self, t: Instant) {
        let v = self.p.verdicts().clone();
        for i in 0..self.ws.len() {
            let w = &mut self.ws[i];
            let live = w.m.phase() == Phase::Live;
            let mut steps = vec![];
            if live && v.dead_count(0) != w.seen.dead_count(0) {
                steps.push(w.m.on_endpoint_dead(v.dead_since(0), t));
            } else if v.answered != w.seen.answered {
                steps.push(w.m.on_answered(t));
            }
            w.seen = v.clone();
            for s in steps {
                self.apply(i, s, t);
            }
        }
    }

    fn apply(&mut self, i: usize, step: Step, t: Instant) {
        let t0 = self.t0;
        let w = &mut self.ws[i];
        match step.next {
            Next::Continue => {}
            Next::Wait => w.io = None,
            n @ (Next::Range | Next::Watch { .. }) => w.io = Some((n, t)),
        }
        if step.report.is_some() {
            w.reports.push(t - t0);
        }
        if step.event.is_some() {
            w.snapshots.push(t - t0);
        }
        self.sync_want(i, t);
    }
}

/// The first snapshot at or after `back`, as the time since `back`.
fn resumed(w: &W, back: Duration) -> Duration {
    let at = w.snapshots.iter().find(|t| **t >= back).copied();
    at.expect("resumed") - back
}

#[test]
fn sim_a_20s_freeze_is_reported_within_10s_and_resumed_within_2s_of_the_thaw() {
    for seed in 0..20 {
        let freeze = |t: Duration| {
            if t >= SECS(5) && t < SECS(25) {
                Etcd::Frozen
            } else {
                Etcd::Up
            }
        };
        let mut sim = Sim::new(1, seed, freeze);
        sim.run(SECS(40));
        let w = &sim.ws[0];
        assert_eq!(w.reports.len(), 1, "seed {seed}: {:?}", w.reports);
        let stale = w.reports[0] - SECS(5);
        assert!(stale <= SECS(10), "seed {seed}: stale after {stale:?}");
        let resumed = resumed(w, SECS(25));
        assert!(resumed <= SECS(2), "seed {seed}: resumed after {resumed:?}");
    }
}

#[test]
fn sim_after_an_outage_of_any_length_the_watch_resumes_within_2s_of_etcd_healthy() {
    for (seed, outage) in [(1, 3u64), (2, 45), (3, 300), (4, 3600)] {
        let down = move |t: Duration| {
            if t >= SECS(5) && t < SECS(5 + outage) {
                Etcd::Refusing
            } else {
                Etcd::Up
            }
        };
        let mut sim = Sim::new(1, seed, down);
        sim.run(SECS(5 + outage + 10));
        let back = SECS(5 + outage);
        let w = &sim.ws[0];
        let resumed = resumed(w, back);
        assert!(
            resumed <= SECS(2),
            "{outage} s outage: resumed after {resumed:?}"
        );
        assert!(resumed <= MS(1250), "within one jittered probe period");
        if outage > 3 {
            assert_eq!(w.reports.len(), 1, "{outage} s: {:?}", w.reports);
            assert!(w.reports[0] - SECS(5) <= SECS(4));
        }
    }
}

#[test]
fn sim_k_watches_of_one_client_share_the_probes_and_all_follow_the_verdicts() {
    // 20 s frozen: every watch is reported stale and resumes after the
    // thaw, on one prober whose probe count does not grow with K.
    let freeze = |t: Duration| {
        if t >= SECS(5) && t < SECS(25) {
            Etcd::Frozen
        } else {
            Etcd::Up
        }
    };
    let mut probes = vec![];
    for k in [1usize, 8, 32] {
        let mut sim = Sim::new(k, 7, freeze);
        sim.run(SECS(40));
        for w in &sim.ws {
            assert_eq!(w.reports.len(), 1, "k {k}: {:?}", w.reports);
            assert!(w.reports[0] - SECS(5) <= SECS(10), "k {k}");
            assert!(resumed(w, SECS(25)) <= SECS(2), "k {k}");
        }
        probes.push(sim.sent);
    }
    println!("probes sent in 40 s (20 s frozen) for 1, 8, 32 watches: {probes:?}");
    let (one, most) = (probes[0], *probes.iter().max().unwrap());
    assert!(most <= one + 3, "{probes:?}");
}
