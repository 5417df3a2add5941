//! Hand-stepped-clock tests of the watch timing rules: the shared prober's
//! verdicts, liveness loss, stale reports, clean reconnects vs re-reads,
//! resyncs and immediate re-ends paced by the backoff, and the proof of
//! health that resets it. The simulations against a scripted etcd are in
//! `sim_tests.rs`.

use super::*;

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

#[test]
fn a_dead_endpoint_verdict_is_a_liveness_loss_reported_at_once_and_re_read() {
    // The cadence and the two failed probes are the shared prober's (see
    // `prober_machine/tests.rs`); the watch follows its verdict.
    let (mut m, stats) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![kv(&inst("a"), 3)], t0);
    assert_eq!(m.probe_need(), ProbeNeed::Liveness);
    assert_eq!(m.next_wake(), None, "the watch itself times nothing");
    // The failing probes were sent after the watch went live (at 2.5 s).
    let s = m.on_endpoint_dead(Some(t0 + MS(2500)), t0 + MS(6500));
    assert_eq!(s.next, Next::Wait);
    assert!(matches!(s.report, Some(RegistryError::Unavailable(_))));
    assert_eq!(m.phase(), Phase::Down);
    assert_eq!(m.probe_need(), ProbeNeed::Answer);
    assert_eq!(stats.snapshot().liveness_failures, 1);
    // A second verdict while down changes nothing.
    assert_eq!(
        m.on_endpoint_dead(Some(t0 + MS(2500)), t0 + MS(6600)),
        Step::next(Next::Continue)
    );
    // The resume is a full re-read, 250 ms later.
    assert_eq!(m.next_wake(), Some(t0 + MS(6750)));
    let s = m.on_timer(t0 + MS(6750));
    assert_eq!(s.next, Next::Range);
    assert_eq!(s.report, None, "reported once per outage");
    assert_eq!(
        m.probe_need(),
        ProbeNeed::Nothing,
        "an attempt is in flight"
    );
    let s = m.on_range(&range(9, vec![kv(&inst("a"), 3)]), t0 + SECS(7));
    assert!(s.event.is_some(), "the fresh Reset clears the stale mark");
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
    // The schedule stands until the watch proves healthy: its first event.
    assert_eq!(m.failures(), 1);
    let s = m.on_message(
        &events(9, vec![(EventType::Put, kv(&inst("b"), 9))]),
        t0 + SECS(2),
    );
    assert!(s.event.is_some());
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
                assert_eq!(m.probe_need(), ProbeNeed::Answer);
            }
            Next::Watch { .. } => panic!("a re-read is owed"),
            _ => {}
        }
    }
    assert_eq!(reports, 1);
    let s = m.on_range(&range(9, vec![]), t);
    assert!(s.event.is_some());
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
fn probe_headers_count_only_while_live_and_a_backwards_store_resyncs_on_the_schedule() {
    let (mut m, stats) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    // The stream breaks before the probe answers: its header is ignored.
    m.on_interrupted(&Interruption::Ended, t0 + SECS(2));
    let s = m.on_probe_header(&header(3, 2), t0 + SECS(2), t0 + SECS(3));
    assert_eq!(s, Step::next(Next::Continue));
    // Live again at 2.3 s. A probe sent before that may trail the events:
    // its lower revision proves nothing.
    assert_eq!(m.on_timer(t0 + MS(2250)).next, Next::Watch { from: 8 });
    m.on_opened(t0 + MS(2300));
    m.on_message(&created(7, 2), t0 + MS(2300));
    let s = m.on_probe_header(&header(5, 2), t0 + MS(2200), t0 + MS(2400));
    assert_eq!(s, Step::next(Next::Continue));
    // One sent afterwards answering revision 3 < 7: wiped under us. The
    // resync waits its backoff step (the second failure: 500 ms).
    let s = m.on_probe_header(&header(3, 2), t0 + MS(4300), t0 + MS(4300));
    assert_eq!(s, Step::next(Next::Wait));
    assert_eq!(stats.snapshot().resyncs, 1);
    assert_eq!(m.probe_need(), ProbeNeed::Nothing);
    assert_eq!(m.next_wake(), Some(t0 + MS(4800)));
    assert_eq!(m.on_timer(t0 + MS(4800)).next, Next::Range);
    // Another cluster answering is caught whenever the probe was sent.
    let (mut m, stats) = machine();
    live_at(&mut m, 7, vec![], t0 + SECS(1));
    let mut foreign = header(9, 2);
    foreign.cluster_id = 1;
    let s = m.on_probe_header(&foreign, t0, t0 + SECS(2));
    assert_eq!(s.next, Next::Wait);
    assert_eq!(stats.snapshot().resyncs, 1);
}

#[test]
fn the_idle_timeout_is_a_liveness_loss_and_no_probe_runs_when_disabled() {
    let mut t = timing();
    t.liveness = false;
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
    assert_eq!(
        m.probe_need(),
        ProbeNeed::Nothing,
        "liveness probes are off"
    );
    let s = m.on_timer(t0 + MS(4500));
    assert_eq!(s.next, Next::Wait);
    assert!(s.report.is_some());
    assert_eq!(m.on_timer(t0 + MS(4750)).next, Next::Range);
}

/// Drives `m` for `span` against an etcd that answers everything at once
/// and whose watch does `after_create` right after each creation; returns
/// (ranges, opens) started.
fn loop_after_create(
    m: &mut WatchMachine,
    t0: Instant,
    span: Duration,
    after_create: impl Fn(&mut WatchMachine, Instant) -> Step,
) -> (usize, usize) {
    let (mut ranges, mut opens) = (0, 0);
    let mut t = t0;
    let mut step = m.on_timer(t0);
    for _ in 0..100_000 {
        step = match step.next {
            Next::Range => {
                ranges += 1;
                m.on_range(&range(9, vec![]), t)
            }
            Next::Watch { .. } => {
                opens += 1;
                m.on_opened(t);
                let s = m.on_message(&created(9, 2), t);
                if s.next != Next::Continue {
                    s
                } else {
                    after_create(m, t)
                }
            }
            Next::Wait | Next::Continue => {
                // Whatever the watch needs from the prober, etcd answers:
                // only a wait for an answer may cut the backoff short.
                if m.probe_need() == ProbeNeed::Answer {
                    let s = m.on_answered(t);
                    if s.next != Next::Continue {
                        step = s;
                        continue;
                    }
                }
                match m.next_wake() {
                    Some(w) if w <= t0 + span => {
                        t = t.max(w);
                        m.on_timer(t)
                    }
                    _ => return (ranges, opens),
                }
            }
        };
    }
    panic!("the loop does not converge");
}

#[test]
fn a_watch_cancelled_right_after_each_creation_is_paced_by_the_backoff() {
    let (mut m, stats) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    let cancel = WatchResponse {
        header: header(9, 2),
        canceled: true,
        cancel_reason: "etcdserver: mvcc: required revision has been compacted".into(),
        ..WatchResponse::default()
    };
    let first = m.on_message(&cancel, t0);
    assert_eq!(first.next, Next::Wait);
    let (ranges, opens) = loop_after_create(&mut m, t0, SECS(120), |m, t| m.on_message(&cancel, t));
    // 250 ms doubling to the 10 s cap: 0.25+0.5+1+2+4+8 s, then every 10 s.
    // Before, every cancel re-ranged at once: unbounded.
    println!("cancel after create, 120 s: {ranges} ranges, {opens} opens");
    assert!((10..=16).contains(&ranges), "{ranges} ranges in 120 s");
    assert!(opens <= ranges + 1);
    assert_eq!(
        stats.snapshot().resyncs as usize,
        opens + 1,
        "one per cancel"
    );
    assert_eq!(m.next_wake().map(|w| w - t0 > SECS(120)), Some(true));
}

#[test]
fn a_watch_that_ends_right_after_each_creation_is_paced_by_the_backoff() {
    let (mut m, _) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![], t0);
    let first = m.on_interrupted(&Interruption::Ended, t0);
    assert_eq!(first.next, Next::Wait);
    let (ranges, opens) = loop_after_create(&mut m, t0, SECS(120), |m, t| {
        m.on_interrupted(&Interruption::Ended, t)
    });
    // Before, each creation reset the backoff: a reconnect every 250 ms,
    // about 480 in 120 s.
    println!("end after create, 120 s: {ranges} ranges, {opens} opens");
    // 250 ms doubling to the 10 s cap: 16 attempts; once the wait passes
    // `stale_after`, the outage is reported and the attempt re-reads first.
    assert!((10..=17).contains(&opens), "{opens} opens in 120 s");
    assert!(ranges <= opens, "{ranges} ranges");
}

#[test]
fn a_watch_proves_healthy_by_an_event_a_progress_or_staying_open_and_only_then_resets() {
    let t0 = Instant::now();
    let ms250 = MS(250);
    // Grow the schedule: three failed opens.
    let grown = |m: &mut WatchMachine| {
        live_at(m, 7, vec![], t0);
        for _ in 0..3 {
            m.on_interrupted(&Interruption::Open(refused()), t0);
        }
        assert_eq!(m.failures(), 3);
        m.on_range(&range(8, vec![]), t0);
        m.on_opened(t0);
        m.on_message(&created(8, 2), t0);
        assert_eq!(m.failures(), 3, "a range and a creation are no proof");
    };
    let progress = WatchResponse {
        header: header(9, 2),
        ..WatchResponse::default()
    };
    for proof in 0..3 {
        let (mut m, _) = machine();
        grown(&mut m);
        let t = match proof {
            0 => {
                m.on_message(&progress, t0 + SECS(1));
                t0 + SECS(1)
            }
            1 => {
                let ev = events(9, vec![(EventType::Put, kv(&inst("a"), 9))]);
                m.on_message(&ev, t0 + SECS(1));
                t0 + SECS(1)
            }
            _ => {
                // Open and in sync for one backoff cap (10 s).
                assert_eq!(m.next_wake(), Some(t0 + SECS(10)));
                assert_eq!(m.on_timer(t0 + SECS(10)), Step::next(Next::Continue));
                t0 + SECS(10)
            }
        };
        assert_eq!(m.failures(), 0, "proof {proof}");
        // The next end reconnects at the initial delay again.
        m.on_interrupted(&Interruption::Ended, t);
        assert_eq!(m.next_wake(), Some(t + ms250), "proof {proof}");
    }
    // Without proof, the next end waits the grown schedule (2 s).
    let (mut m, _) = machine();
    grown(&mut m);
    m.on_interrupted(&Interruption::Ended, t0 + SECS(1));
    assert_eq!(m.next_wake(), Some(t0 + SECS(3)));
}

#[test]
fn a_dead_verdict_on_probes_sent_before_the_watch_reopened_is_ignored() {
    // etcd restarted: the probes sent while it was down fail, the watch
    // reconnects to the restarted etcd before the second failure completes
    // the verdict. The fresh stream proved the endpoint answering.
    let (mut m, stats) = machine();
    let t0 = Instant::now();
    live_at(&mut m, 7, vec![kv(&inst("a"), 3)], t0 + SECS(5));
    let s = m.on_endpoint_dead(Some(t0 + SECS(3)), t0 + SECS(6));
    assert_eq!(s, Step::next(Next::Continue));
    assert_eq!(m.phase(), Phase::Live);
    assert_eq!(stats.snapshot().liveness_failures, 0);
    // Evidence gathered after the reconnect condemns it.
    let s = m.on_endpoint_dead(Some(t0 + SECS(7)), t0 + SECS(9));
    assert!(matches!(s.report, Some(RegistryError::Unavailable(_))));
    assert_eq!(m.phase(), Phase::Down);
}
