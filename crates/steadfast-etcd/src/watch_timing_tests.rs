//! Hand-stepped-clock tests of the watch timing rules: probes, liveness
//! loss, stale reports, clean reconnects vs re-reads, and recovery after
//! outages of any length. `Sim` plays etcd (up, refusing, frozen) against a
//! machine with exact time and no IO.

use super::*;

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn refused() -> GatewayError {
    GatewayError::Unreachable {
        endpoint: "e".into(),
        reason: "refused".into(),
    }
}

fn timeout() -> GatewayError {
    GatewayError::Timeout {
        endpoint: "e".into(),
        timeout: SECS(1),
    }
}

fn jittered() -> WatchTiming {
    let c = crate::EtcdConfig::new(["http://e:1"]);
    WatchTiming::from_config(&c)
}

#[test]
fn live_probes_follow_the_cadence_and_a_frozen_endpoint_is_dropped_after_two_failures() {
    let (mut m, stats) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![kv(&inst("a"), 3)], t0);
    assert_eq!(m.next_wake(), Some(t0 + SECS(2)));
    let s = m.on_timer(t0 + SECS(2));
    let p = s.probe.expect("probe due");
    assert_eq!(p.target, ProbeTarget::WatchEndpoint);
    assert_eq!(m.next_wake(), None, "nothing timed while the probe flies");
    let s = m.on_probe(p.seq, Ok(&header(7, 2)), t0 + SECS(2));
    assert_eq!(s, Step::next(Next::Continue));
    assert_eq!(m.next_wake(), Some(t0 + SECS(4)));
    // Frozen from 4 s: the probe times out at 5 s, is retried at 5.5 s,
    // times out again at 6.5 s: dead, reported at once, demoted.
    let p = m.on_timer(t0 + SECS(4)).probe.unwrap();
    let s = m.on_probe(p.seq, Err(&timeout()), t0 + SECS(5));
    assert_eq!(s, Step::next(Next::Continue), "one failure is not enough");
    assert_eq!(m.next_wake(), Some(t0 + MS(5500)));
    let p = m.on_timer(t0 + MS(5500)).probe.unwrap();
    let s = m.on_probe(p.seq, Err(&timeout()), t0 + MS(6500));
    assert_eq!(s.next, Next::Wait);
    assert!(s.demote);
    assert!(matches!(s.report, Some(RegistryError::Unavailable(_))));
    assert_eq!(m.phase(), Phase::Down);
    assert_eq!(stats.snapshot().liveness_failures, 1);
    // The resume is a full re-read, 250 ms later.
    assert_eq!(m.next_wake(), Some(t0 + MS(6750)));
    let s = m.on_timer(t0 + MS(6750));
    assert_eq!(s.next, Next::Range);
    assert_eq!(s.report, None, "reported once per outage");
    let s = m.on_range(&range(9, vec![kv(&inst("a"), 3)]), t0 + SECS(7));
    assert!(
        s.snapshot.is_some(),
        "the fresh snapshot clears the stale mark"
    );
    assert_eq!(stats.snapshot().rereads, 1);
}

#[test]
fn a_clean_reconnect_resumes_from_the_last_revision_without_report_or_re_read() {
    let (mut m, stats) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    let s = m.on_interrupted(&Interruption::Ended, t0 + SECS(1));
    assert_eq!(s, Step::next(Next::Wait));
    let s = m.on_timer(t0 + MS(1250));
    assert_eq!(s.next, Next::Watch { from: 8 });
    m.on_opened(t0 + MS(1260));
    let s = m.on_message(&created(8, 3), t0 + MS(1260));
    assert_eq!(s, Step::next(Next::Continue));
    assert_eq!(m.failures(), 0);
    let st = stats.snapshot();
    assert_eq!((st.resumes, st.rereads, st.unavailable_reports), (1, 0, 0));
}

#[test]
fn a_failed_reconnect_owes_a_re_read_and_stale_is_reported_once_after_stale_after() {
    let (mut m, _) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    m.on_interrupted(&Interruption::Ended, t0);
    assert_eq!(m.on_timer(t0 + MS(250)).next, Next::Watch { from: 8 });
    let s = m.on_interrupted(&Interruption::Open(refused()), t0 + MS(250));
    assert_eq!(s.report, None);
    // 500 ms later: a range now, not a watch.
    assert_eq!(m.on_timer(t0 + MS(750)).next, Next::Range);
    let mut reports = 0;
    let mut t = t0 + MS(750);
    m.on_range_failed(&refused(), t);
    while t < t0 + SECS(8) {
        t = m.next_wake().unwrap();
        let s = m.on_timer(t);
        if s.report.is_some() {
            reports += 1;
            assert_eq!(t, t0 + SECS(3), "stale exactly stale_after after the break");
        }
        match s.next {
            Next::Range => {
                m.on_range_failed(&refused(), t);
            }
            Next::Watch { .. } => panic!("a re-read is owed"),
            _ => {}
        }
        if let Some(p) = s.probe {
            assert_eq!(p.target, ProbeTarget::Current);
            assert!(m.on_probe(p.seq, Err(&refused()), t).demote);
        }
    }
    assert_eq!(reports, 1);
    let s = m.on_range(&range(9, vec![]), t);
    assert!(s.snapshot.is_some());
    // A new outage reports again.
    m.on_opened(t);
    m.on_interrupted(&Interruption::Ended, t);
    let s = m.on_timer(t + SECS(3));
    assert!(s.report.is_some());
}

#[test]
fn a_report_while_an_open_hangs_turns_the_late_watch_into_a_re_read() {
    let (mut m, _) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    m.on_interrupted(&Interruption::Ended, t0);
    assert_eq!(m.on_timer(t0 + MS(250)).next, Next::Watch { from: 8 });
    // The open hangs (frozen etcd): stale fires meanwhile.
    assert_eq!(m.next_wake(), Some(t0 + SECS(3)));
    assert!(m.on_timer(t0 + SECS(3)).report.is_some());
    m.on_opened(t0 + SECS(4));
    assert_eq!(m.on_message(&created(8, 2), t0 + SECS(4)).next, Next::Range);
}

#[test]
fn stale_probe_outcomes_are_ignored_and_a_backwards_store_seen_by_a_probe_resyncs() {
    let (mut m, stats) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    let p = m.on_timer(t0 + SECS(2)).probe.unwrap();
    // The stream breaks before the probe answers: its outcome is stale.
    m.on_interrupted(&Interruption::Ended, t0 + SECS(2));
    let s = m.on_probe(p.seq, Err(&timeout()), t0 + SECS(3));
    assert_eq!(s, Step::next(Next::Continue));
    assert_eq!(
        m.on_probe(999, Ok(&header(7, 2)), t0),
        Step::next(Next::Continue)
    );
    // Live again; a probe answering revision 3 < 7: wiped under us.
    m.on_timer(t0 + MS(2250));
    m.on_opened(t0 + MS(2300));
    m.on_message(&created(7, 2), t0 + MS(2300));
    let p = m.on_timer(t0 + MS(4300)).probe.unwrap();
    let s = m.on_probe(p.seq, Ok(&header(3, 2)), t0 + MS(4300));
    assert_eq!(s.next, Next::Range);
    assert_eq!(stats.snapshot().resyncs, 1);
}

#[test]
fn the_idle_timeout_is_a_liveness_loss_and_no_probe_runs_when_disabled() {
    let mut t = timing();
    t.probe_interval = None;
    t.idle_timeout = Some(MS(3500));
    let (mut m, _) = machine_with(t);
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    assert_eq!(m.next_wake(), Some(t0 + MS(3500)));
    let progress = WatchResponse {
        header: header(8, 2),
        ..WatchResponse::default()
    };
    m.on_message(&progress, t0 + SECS(1));
    assert_eq!(m.next_wake(), Some(t0 + MS(4500)));
    let s = m.on_timer(t0 + MS(4500));
    assert_eq!(s.next, Next::Wait);
    assert!(s.report.is_some());
    assert_eq!(s.probe, None);
    assert_eq!(m.on_timer(t0 + MS(4750)).next, Next::Range);
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

/// Drives a machine against a scripted etcd with exact time: requests
/// complete at once when etcd is up or refusing, and hang when frozen until
/// it thaws (success) or their deadline passes (timeout).
struct Sim<F: Fn(Duration) -> Etcd> {
    m: WatchMachine,
    t0: Instant,
    etcd: F,
    io: Option<(Next, Instant)>,
    probe: Option<(u64, Instant)>,
    reports: Vec<Duration>,
    snapshots: Vec<Duration>,
}

impl<F: Fn(Duration) -> Etcd> Sim<F> {
    fn new(timing: WatchTiming, seed: u64, etcd: F) -> Self {
        let (mut m, _) = machine_with(timing);
        m.live = Liveness::new(timing, StdRng::seed_from_u64(seed));
        let t0 = Instant::now();
        live_at(&mut m, 7, vec![kv(&inst("a"), 3)], t0);
        let mut sim = Self {
            m,
            t0,
            etcd,
            io: None,
            probe: None,
            reports: vec![],
            snapshots: vec![],
        };
        sim.io = Some((Next::Continue, t0));
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

    fn run(&mut self, until: Duration) {
        let end = self.t0 + until;
        let mut guard = 0;
        loop {
            guard += 1;
            assert!(guard < 100_000, "simulation does not converge");
            let wake = self.m.next_wake();
            let io_done = self.io.map(|(next, sent)| match next {
                Next::Range => self.complete(sent, SECS(3)),
                Next::Watch { .. } => self.complete(sent, SECS(5)),
                _ => {
                    let limit = wake.unwrap_or(end).min(end);
                    (
                        self.stream_break(sent, limit).unwrap_or(end + SECS(1)),
                        false,
                    )
                }
            });
            let probe_done = self.probe.map(|(_, sent)| self.complete(sent, SECS(1)));
            let t = [wake, io_done.map(|d| d.0), probe_done.map(|d| d.0)]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
            if t > end {
                return;
            }
            let step = if io_done.is_some_and(|d| d.0 == t) {
                let (next, _) = self.io.take().unwrap();
                let ok = io_done.unwrap().1;
                match (next, ok) {
                    (Next::Range, true) => self.m.on_range(&range(9, vec![kv(&inst("a"), 3)]), t),
                    (Next::Range, false) => self.m.on_range_failed(&timeout(), t),
                    (Next::Watch { .. }, true) => {
                        self.m.on_opened(t);
                        self.io = Some((Next::Continue, t));
                        self.m.on_message(&created(9, 2), t)
                    }
                    (Next::Watch { .. }, false) => {
                        self.m.on_interrupted(&Interruption::Open(refused()), t)
                    }
                    _ => {
                        let broke = WatchError::Transport("unexpected EOF".into());
                        self.m.on_interrupted(&Interruption::Stream(broke), t)
                    }
                }
            } else if probe_done.is_some_and(|d| d.0 == t) {
                let (seq, _) = self.probe.take().unwrap();
                let (h, e) = (header(9, 2), timeout());
                let outcome = if probe_done.unwrap().1 {
                    Ok(&h)
                } else {
                    Err(&e)
                };
                self.m.on_probe(seq, outcome, t)
            } else {
                self.m.on_timer(t)
            };
            self.apply(step, t);
        }
    }

    fn apply(&mut self, step: Step, t: Instant) {
        match step.next {
            Next::Continue => {}
            Next::Wait => self.io = None,
            n @ (Next::Range | Next::Watch { .. }) => self.io = Some((n, t)),
        }
        if let Some(p) = step.probe {
            self.probe = Some((p.seq, t));
        }
        if step.report.is_some() {
            self.reports.push(t - self.t0);
        }
        if step.snapshot.is_some() {
            self.snapshots.push(t - self.t0);
        }
    }
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
        let mut sim = Sim::new(jittered(), seed, freeze);
        sim.run(SECS(40));
        assert_eq!(sim.reports.len(), 1, "seed {seed}: {:?}", sim.reports);
        let stale = sim.reports[0] - SECS(5);
        assert!(stale <= SECS(10), "seed {seed}: stale after {stale:?}");
        let resumed = sim.snapshots.iter().find(|t| **t >= SECS(25)).copied();
        let resumed = resumed.expect("resumed") - SECS(25);
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
        let mut sim = Sim::new(jittered(), seed, down);
        sim.run(SECS(5 + outage + 10));
        let back = SECS(5 + outage);
        let resumed = sim.snapshots.iter().find(|t| **t >= back).copied();
        let resumed = resumed.expect("resumed") - back;
        assert!(
            resumed <= SECS(2),
            "{outage} s outage: resumed after {resumed:?}"
        );
        assert!(resumed <= MS(1250), "within one jittered probe period");
        if outage > 3 {
            assert_eq!(sim.reports.len(), 1, "{outage} s: {:?}", sim.reports);
            assert!(sim.reports[0] - SECS(5) <= SECS(4));
        }
    }
}
