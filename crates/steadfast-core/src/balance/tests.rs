//! Strategies over a fixed seed, leases, ejection timelines on a hand
//! clock, the panic threshold, and statistics surviving edits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::directory::{DirectoryStatus, EmptyReason};
use crate::endpoint_set::{DirectorySnapshot, EndpointSet, EndpointSetEditor};
use crate::incarnation::Incarnation;
use crate::model::{ServiceInfo, ServiceInstance};
use crate::url::{Endpoint, ServiceUrl};

fn svc() -> ServiceInfo {
    ServiceInfo::test_service()
}

fn ep_with(id: u32, weight: u32, boot: Option<&str>) -> Endpoint {
    let mut inst = ServiceInstance::new("app", format!("h{id}"), 1);
    inst.weight = weight;
    if let Some(b) = boot {
        Incarnation {
            export_ms: 1,
            boot_id: b.into(),
            created: None,
        }
        .stamp(&mut inst.metadata);
    }
    Arc::new(ServiceUrl::build(&inst, &svc()))
}

fn ep(id: u32, weight: u32) -> Endpoint {
    ep_with(id, weight, None)
}

fn snapshot(eps: Vec<Endpoint>) -> DirectorySnapshot {
    let status = DirectoryStatus::Empty(EmptyReason::Pending(Default::default()));
    DirectorySnapshot::new(1, status, vec![EndpointSet::from_vec(eps)])
}

/// A hand clock, the settings, and the closing notices received.
struct TestEnv {
    now: Arc<Mutex<Instant>>,
    cfg: Arc<Mutex<BalanceConfig>>,
    closings: Arc<Mutex<Vec<String>>>,
}

impl BalanceEnv for TestEnv {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap()
    }
    fn config(&self) -> BalanceConfig {
        *self.cfg.lock().unwrap()
    }
    fn closing(&self, endpoint: &ServiceUrl) {
        self.closings
            .lock()
            .unwrap()
            .push(endpoint.instance_id().to_string());
    }
}

struct Rig {
    t0: Instant,
    now: Arc<Mutex<Instant>>,
    cfg: Arc<Mutex<BalanceConfig>>,
    closings: Arc<Mutex<Vec<String>>>,
    balance: DirectoryBalance,
    rng: std::cell::RefCell<StdRng>,
}

impl Rig {
    fn new() -> Self {
        let t0 = Instant::now();
        let (now, cfg, closings) = (
            Arc::new(Mutex::new(t0)),
            Arc::new(Mutex::new(BalanceConfig::default())),
            Arc::new(Mutex::new(Vec::new())),
        );
        let balance = DirectoryBalance::new();
        assert!(balance.install(Box::new(TestEnv {
            now: now.clone(),
            cfg: cfg.clone(),
            closings: closings.clone(),
        })));
        Self {
            t0,
            now,
            cfg,
            closings,
            balance,
            rng: std::cell::RefCell::new(StdRng::seed_from_u64(42)),
        }
    }

    fn at(&self, offset: Duration) {
        *self.now.lock().unwrap() = self.t0 + offset;
    }

    fn now(&self) -> Instant {
        *self.now.lock().unwrap()
    }

    fn cfg(&self) -> BalanceConfig {
        *self.cfg.lock().unwrap()
    }

    fn lease(&self, snap: &DirectorySnapshot, s: Strategy) -> Result<Lease<'_>, PickError> {
        let (cfg, now) = (self.cfg(), self.now());
        let mut rng = self.rng.borrow_mut();
        self.balance.lease(snap, s, &cfg, now, &mut || rng.gen())
    }

    /// A round-robin lease on `host` (others picked meanwhile are dropped).
    fn lease_host(&self, snap: &DirectorySnapshot, host: &str) -> Lease<'_> {
        loop {
            let l = self.lease(snap, Strategy::RoundRobin).unwrap();
            if l.host() == host {
                return l;
            }
        }
    }

    /// Host of each of `n` picks (leases dropped at once, no outcome).
    fn counts(&self, snap: &DirectorySnapshot, s: Strategy, n: usize) -> HashMap<String, usize> {
        let mut c = HashMap::new();
        for _ in 0..n {
            let l = self.lease(snap, s).expect("a pick");
            *c.entry(l.host().to_string()).or_default() += 1;
        }
        c
    }
}

fn share(c: &HashMap<String, usize>, host: &str, n: usize) -> f64 {
    c.get(host).copied().unwrap_or(0) as f64 / n as f64
}

#[test]
fn weighted_random_follows_weights_over_a_fixed_seed() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 2), ep(3, 3), ep(4, 4), ep(5, 0)]);
    let c = rig.counts(&snap, Strategy::WeightedRandom, 20_000);
    for (h, w) in [("h1", 0.1), ("h2", 0.2), ("h3", 0.3), ("h4", 0.4)] {
        let s = share(&c, h, 20_000);
        assert!((s - w).abs() < 0.02, "{h}: {s} vs {w}");
    }
    assert_eq!(c.get("h5"), None, "weight 0 never picked");
}

#[test]
fn round_robin_takes_turns_and_skips_weight_zero() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 0), ep(3, 50), ep(4, 7)]);
    let hosts: Vec<String> = (0..6)
        .map(|_| {
            rig.lease(&snap, Strategy::RoundRobin)
                .unwrap()
                .host()
                .to_string()
        })
        .collect();
    assert_eq!(hosts, ["h1", "h3", "h3", "h4", "h1", "h3"]);
    let c = rig.counts(&snap, Strategy::RoundRobin, 4000);
    // Slot 2 (weight 0) hands its turn to slot 3: h3 twice per cycle.
    assert_eq!(c["h1"], 1000);
    assert_eq!(c["h3"], 2000);
    assert_eq!(c["h4"], 1000);
}

#[test]
fn least_in_flight_avoids_busy_endpoints_and_is_weighted_when_idle() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 1), ep(3, 2)]);
    let c = rig.counts(&snap, Strategy::LeastInFlight, 20_000);
    // Idle: uniform pairs, the weight folded into the cost, so the heavier
    // h3 wins every pair it is in (2 of 3) and h1, h2 split the rest.
    assert!((share(&c, "h3", 20_000) - 2.0 / 3.0).abs() < 0.02, "{c:?}");
    assert!((share(&c, "h1", 20_000) - 1.0 / 6.0).abs() < 0.02, "{c:?}");
    // Hold 3 calls on h3: it loses every comparison with an idle one.
    let held: Vec<Lease> = (0..200)
        .filter_map(|_| rig.lease(&snap, Strategy::WeightedRandom).ok())
        .filter(|l| l.host() == "h3")
        .take(3)
        .collect();
    assert_eq!(held[0].stats().in_flight(), 3);
    let c = rig.counts(&snap, Strategy::LeastInFlight, 10_000);
    let s3 = share(&c, "h3", 10_000);
    assert!(s3 < 0.06, "busy h3 picked {s3}");
    drop(held);
    assert_eq!(snap.get(2).unwrap().stats().in_flight(), 0);
}

#[test]
fn peak_ewma_prefers_the_fast_endpoint_and_forgets_a_peak() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 1), ep(3, 1)]);
    // h1 answers in 5 ms, h2 in 30 ms, h3 in 200 ms.
    for i in 0..300 {
        // One sample per 10 ms: a sample's weight grows with the time
        // since the previous one (1 - exp(-10 ms / 10 s) each).
        rig.at(Duration::from_millis(10 * i));
        let l = rig.lease(&snap, Strategy::WeightedRandom).unwrap();
        let ms = match l.host() {
            "h1" => 5,
            "h2" => 30,
            _ => 200,
        };
        l.success_in(Duration::from_millis(ms));
    }
    rig.at(Duration::from_millis(3100));
    let c = rig.counts(&snap, Strategy::PeakEwma, 9000);
    let (s1, s3) = (share(&c, "h1", 9000), share(&c, "h3", 9000));
    // P2C over 3: the fastest wins whenever drawn (5/9), the slowest never.
    assert!(s1 > 0.5 && s3 < 0.03, "{c:?}");

    // The peak is taken at once and decays on read (1/e per 10 s).
    let stats = snap.get(0).unwrap().stats();
    let cfg = rig.cfg().peak_ewma;
    stats.observe(Duration::from_millis(100), rig.now(), &cfg);
    let at = stats.latency_ns(rig.now(), &cfg) / 1e6;
    assert!((at - 100.0).abs() < 0.01, "peak at once: {at} ms");
    let later = stats.latency_ns(rig.now() + Duration::from_secs(10), &cfg) / 1e6;
    assert!((later - 36.79).abs() < 0.5, "decayed: {later} ms");
    // In flight multiplies the cost.
    let l = rig.lease(&snap, Strategy::RoundRobin).unwrap();
    assert_eq!(l.host(), "h1");
    let cost = stats.cost(rig.now(), &cfg) / 1e6;
    assert!((cost - 200.0).abs() < 0.1, "100 ms x (1 + 1): {cost}");
}

#[test]
fn a_fresh_endpoint_costs_the_default_rtt() {
    let rig = Rig::new();
    let cfg = rig.cfg().peak_ewma;
    let s = EndpointStats::default();
    assert!(!s.has_estimate());
    assert_eq!(s.view(rig.now(), &cfg).latency, Duration::from_millis(30));
    // The default does not decay: nothing was measured.
    let later = rig.now() + Duration::from_secs(60);
    assert_eq!(s.view(later, &cfg).latency, Duration::from_millis(30));
    assert_eq!(cfg.decay, Duration::from_secs(10));
}

#[test]
fn a_lease_counts_in_flight_until_dropped_or_reported() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1)]);
    let a = rig.lease(&snap, Strategy::PeakEwma).unwrap();
    let b = rig.lease(&snap, Strategy::RoundRobin).unwrap();
    assert!(
        std::ptr::eq(a.stats(), b.stats()),
        "one statistics per endpoint"
    );
    assert_eq!(a.stats().in_flight(), 2);
    assert_eq!(a.port(), 1, "derefs to the URL");
    let url = a.endpoint().clone();
    let stats = url.stats();
    drop(a);
    assert_eq!(stats.in_flight(), 1);
    rig.at(Duration::from_millis(40));
    b.success();
    assert_eq!(stats.in_flight(), 0);
    // Latency measured from the pick (40 ms > 30 ms default: the peak).
    let l = stats.view(rig.now(), &rig.cfg().peak_ewma).latency;
    assert_eq!(l, Duration::from_millis(40));
}

#[test]
fn consecutive_failures_eject_then_readmit_with_a_doubling_time() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 1), ep(3, 1), ep(4, 1)]);
    for i in 0..4 {
        let r = rig.lease_host(&snap, "h1").failure(FailureClass::Server);
        assert_eq!(r.trigger, None, "failure {i}");
    }
    let r = rig.lease_host(&snap, "h1").failure(FailureClass::Server);
    assert_eq!(r.trigger, Some(Trigger::Consecutive));
    assert_eq!(r.ejection, Some(Ejection::Ejected(Duration::from_secs(30))));
    assert_eq!(rig.balance.ledger().ejected(rig.now()), 1);
    for s in Strategy::ALL {
        let c = rig.counts(&snap, s, 2000);
        assert_eq!(
            c.get("h1"),
            None,
            "{s:?} routes around the ejected endpoint"
        );
    }
    assert_eq!(snap.len(), 4, "never evicted");
    rig.at(Duration::from_millis(29_999));
    assert_eq!(
        rig.counts(&snap, Strategy::WeightedRandom, 2000).get("h1"),
        None
    );
    rig.at(Duration::from_secs(30));
    assert_eq!(rig.balance.ledger().ejected(rig.now()), 0, "readmitted");
    assert!(rig.counts(&snap, Strategy::WeightedRandom, 2000)["h1"] > 300);
    // Ejected again soon after: 60 s, then 120 s, ..., capped at 300 s.
    let mut expect = [60, 120, 240, 300, 300].into_iter();
    let mut t = Duration::from_secs(30);
    for _ in 0..5 {
        let r = rig
            .lease_host(&snap, "h1")
            .failure(FailureClass::ConnectionRefused);
        let want = Duration::from_secs(expect.next().unwrap());
        assert_eq!(r.ejection, Some(Ejection::Ejected(want)));
        t += want;
        rig.at(t);
    }
    // Readmitted for longer than the cap: the doubling starts over.
    rig.at(t + Duration::from_secs(301));
    let r = rig
        .lease_host(&snap, "h1")
        .failure(FailureClass::ConnectionRefused);
    assert_eq!(r.ejection, Some(Ejection::Ejected(Duration::from_secs(30))));
}

#[test]
fn a_success_breaks_the_run_and_the_rate_trigger_catches_intermittent_failures() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 1)]);
    // 4 failures, a success, 4 failures: no run of 5. 9 outcomes < 20:
    // the rate does not count yet.
    let mut last = None;
    for i in 0..9 {
        let l = rig.lease(&snap, Strategy::RoundRobin).unwrap();
        let _other = rig.lease(&snap, Strategy::RoundRobin).unwrap();
        last = Some(if i == 4 {
            l.success()
        } else {
            l.failure(FailureClass::Timeout)
        });
    }
    assert_eq!(last.unwrap().trigger, None);
    // Alternate success / failure (a success first, ending the run of 4):
    // never 2 in a row, 50 % over the window.
    let mut trips = Vec::new();
    for i in 0..30 {
        rig.at(Duration::from_millis(100 * i));
        let l = rig.lease(&snap, Strategy::RoundRobin).unwrap();
        let _other = rig.lease(&snap, Strategy::RoundRobin).unwrap();
        let r = if i % 2 == 1 {
            l.failure(FailureClass::Server)
        } else {
            l.success()
        };
        if let Some(t) = r.trigger {
            trips.push((i, t));
        }
    }
    assert_eq!(trips.first().map(|t| t.1), Some(Trigger::Rate), "{trips:?}");

    // With the rate trigger off, the same pattern never ejects.
    let rig = Rig::new();
    rig.cfg.lock().unwrap().outlier.failure_rate = None;
    for i in 0..60 {
        let l = rig.lease(&snap, Strategy::WeightedRandom).unwrap();
        let r = if i % 2 == 0 {
            l.failure(FailureClass::Server)
        } else {
            l.success()
        };
        assert_eq!(r.trigger, None);
    }
}

#[test]
fn connection_refused_and_closing_eject_at_once_and_closing_tells_the_directory() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 1), ep(3, 1), ep(4, 1)]);
    let l = rig.lease(&snap, Strategy::RoundRobin).unwrap();
    let r = l.failure(FailureClass::ConnectionRefused);
    assert_eq!(r.trigger, Some(Trigger::Immediate));
    assert!(!r.closing_sent);
    let l = rig.lease(&snap, Strategy::RoundRobin).unwrap();
    assert_eq!(l.host(), "h2");
    let r = l.failure(FailureClass::Closing);
    assert_eq!(r.ejection, Some(Ejection::Ejected(Duration::from_secs(30))));
    assert!(r.closing_sent);
    assert_eq!(*rig.closings.lock().unwrap(), ["h2:1"]);
    // A failure reported late by a call already in flight changes nothing.
    let c = rig.counts(&snap, Strategy::PeakEwma, 1000);
    assert_eq!((c.get("h1"), c.get("h2")), (None, None));
}

#[test]
fn never_more_than_the_max_share_is_ejected_and_past_it_picks_panic() {
    let rig = Rig::new();
    let snap = snapshot(vec![ep(1, 1), ep(2, 1), ep(3, 1), ep(4, 1)]);
    let mut results = Vec::new();
    for _ in 0..4 {
        let l = rig.lease(&snap, Strategy::RoundRobin).unwrap();
        results.push(l.failure(FailureClass::ConnectionRefused).ejection);
    }
    let ejected = Some(Ejection::Ejected(Duration::from_secs(30)));
    assert_eq!(
        results,
        [
            ejected,
            ejected,
            Some(Ejection::Refused),
            Some(Ejection::Refused)
        ]
    );
    assert_eq!(rig.balance.ledger().ejected(rig.now()), 2);
    let c = rig.counts(&snap, Strategy::WeightedRandom, 2000);
    assert_eq!((c.get("h1"), c.get("h2")), (None, None), "50 %: honoured");
    // The limit lowered live to 25 %: 2 of 4 is past it, picks ignore
    // ejection (panic mode) rather than pile onto the other half.
    rig.cfg.lock().unwrap().outlier.max_ejection_percent = 25;
    let c = rig.counts(&snap, Strategy::WeightedRandom, 4000);
    assert!(
        share(&c, "h1", 4000) > 0.2 && share(&c, "h2", 4000) > 0.2,
        "{c:?}"
    );
}

#[test]
fn all_ejected_only_when_the_max_share_is_100_percent() {
    let rig = Rig::new();
    rig.cfg.lock().unwrap().outlier.max_ejection_percent = 100;
    let snap = snapshot(vec![ep(1, 1), ep(2, 1)]);
    for _ in 0..2 {
        let l = rig.lease(&snap, Strategy::RoundRobin).unwrap();
        l.failure(FailureClass::ConnectionRefused);
    }
    for s in Strategy::ALL {
        assert_eq!(
            rig.lease(&snap, s).err(),
            Some(PickError::AllEjected { endpoints: 2 })
        );
    }
    rig.at(Duration::from_secs(30));
    assert!(rig.lease(&snap, Strategy::PeakEwma).is_ok(), "readmitted");
    assert_eq!(
        rig.lease(&snapshot(vec![ep(1, 0)]), Strategy::PeakEwma)
            .err(),
        Some(PickError::Empty)
    );
}

#[test]
fn statistics_survive_a_weight_change_but_not_a_restart() {
    let rig = Rig::new();
    let mut editor = EndpointSetEditor::new();
    editor.extend([ep_with(1, 1, Some("b1")), ep_with(2, 1, Some("b1"))]);
    let set = editor.snapshot();
    let snap = DirectorySnapshot::new(
        1,
        DirectoryStatus::Empty(EmptyReason::Pending(Default::default())),
        vec![set],
    );
    let first = snap.get(0).unwrap().clone();
    // A latency measured and a call in flight on the first record, then
    // it is ejected.
    rig.at(Duration::from_millis(10));
    rig.lease_host(&snap, "h1")
        .success_in(Duration::from_millis(90));
    let out = rig.lease_host(&snap, "h1");
    assert_eq!(first.stats().in_flight(), 1);
    assert!(rig
        .lease_host(&snap, "h1")
        .failure(FailureClass::ConnectionRefused)
        .ejection
        .is_some());
    let failures = first.stats().failures().unwrap().clone();
    let same = |e: &Endpoint| Arc::ptr_eq(e.stats().failures().unwrap(), &failures);

    // A weight change (a new record of the same incarnation) takes them over:
    // the ejection, the estimate and the call in flight.
    editor.upsert(ep_with(1, 5, Some("b1")));
    let kept = editor.get("h1:1").unwrap().clone();
    assert!(same(&kept));
    assert!(kept.stats().is_ejected(rig.now()));
    assert_eq!(kept.stats().in_flight(), 1, "the call in flight moved");
    assert_eq!(first.stats().in_flight(), 0);
    let ms = |e: &Endpoint, rig: &Rig| e.stats().latency_ns(rig.now(), &rig.cfg().peak_ewma) / 1e6;
    // The refused call counted as the failure penalty (250 ms): the peak.
    assert!(
        (ms(&kept, &rig) - 250.0).abs() < 0.01,
        "{}",
        ms(&kept, &rig)
    );
    // The lease taken on the first record ends on the new one, and its
    // outcome is measured there.
    rig.at(Duration::from_millis(20));
    out.success_in(Duration::from_millis(500));
    assert_eq!(kept.stats().in_flight(), 0);
    assert!(
        (ms(&kept, &rig) - 500.0).abs() < 0.01,
        "{}",
        ms(&kept, &rig)
    );
    assert_eq!(
        kept.stats().view(rig.now(), &rig.cfg().peak_ewma).in_flight,
        0
    );

    // So does a rebuild (a full list) that still holds it.
    editor.rebuild(vec![ep_with(2, 1, Some("b1")), ep_with(1, 7, Some("b1"))]);
    let rebuilt = editor.get("h1:1").unwrap().clone();
    assert!(same(&rebuilt));
    assert!((ms(&rebuilt, &rig) - 500.0).abs() < 0.01);
    assert!(editor.get("h2:1").unwrap().stats().failures().is_none());
    assert!(!editor.get("h2:1").unwrap().stats().has_estimate());
    // A removal moving another endpoint into the slot moves no statistics.
    editor.remove("h2:1");
    assert!(same(editor.get("h1:1").unwrap()));
    // A restart (another boot) starts afresh.
    editor.upsert(ep_with(1, 7, Some("b2")));
    let fresh = editor.get("h1:1").unwrap();
    assert!(fresh.stats().failures().is_none());
    assert!(!fresh.stats().has_estimate());
    assert!(!fresh.stats().is_ejected(rig.now()));
    // Equality ignores the statistics.
    assert_eq!(*ep_with(1, 1, Some("b1")), **snap.get(0).unwrap());
}

#[test]
fn leases_on_both_sides_of_a_carry_count_once() {
    // Leases taken on an old record before and after it was carried over,
    // ended before and after: the new record counts exactly those out.
    let rig = Rig::new();
    let mut editor = EndpointSetEditor::new();
    editor.extend([ep_with(1, 1, Some("b"))]);
    let old = DirectorySnapshot::new(
        1,
        DirectoryStatus::Empty(EmptyReason::Pending(Default::default())),
        vec![editor.snapshot()],
    );
    let before: Vec<Lease> = (0..3)
        .map(|_| rig.lease(&old, Strategy::PeakEwma).unwrap())
        .collect();
    editor.upsert(ep_with(1, 2, Some("b")));
    let new = editor.get("h1:1").unwrap().clone();
    assert_eq!(new.stats().in_flight(), 3);
    // A straggler picks the old record after the carry.
    let after = rig.lease(&old, Strategy::PeakEwma).unwrap();
    assert_eq!(new.stats().in_flight(), 4);
    assert_eq!(old.get(0).unwrap().stats().in_flight(), 0);
    // And a second carry while they are out.
    editor.upsert(ep_with(1, 3, Some("b")));
    let newest = editor.get("h1:1").unwrap().clone();
    assert_eq!(newest.stats().in_flight(), 4);
    drop(before);
    drop(after);
    assert_eq!(newest.stats().in_flight(), 0);
    assert_eq!(new.stats().in_flight(), 0);
    // Carrying back into a sealed record is refused (no forwarding loop).
    editor.upsert(old.get(0).unwrap().clone());
    let back = rig.lease(&old, Strategy::PeakEwma).unwrap();
    drop(back);
    assert_eq!(newest.stats().in_flight(), 0);
}

#[test]
fn the_cheap_exp_of_a_pick_stays_within_a_millionth_of_libm() {
    for i in -2000..=2000 {
        let x = f64::from(i) / 20.0;
        let (want, got) = (x.exp(), super::stats::fast_exp(x));
        assert!(
            ((got - want) / want).abs() < 1e-6,
            "exp({x}): {got} vs {want}"
        );
    }
}

#[test]
fn p2c_folds_the_weight_into_the_cost() {
    let rig = Rig::new();
    // Same latency (the default), same load: the heavier wins every pair.
    let snap = snapshot(vec![ep(1, 2), ep(2, 5)]);
    let c = rig.counts(&snap, Strategy::PeakEwma, 1000);
    assert_eq!(c.get("h2"), Some(&1000), "{c:?}");
    // Two calls held on h2 (weight 5): 30 ms x 3 / 5 > 30 ms x 1 / 2.
    let held: Vec<Lease> = (0..2)
        .map(|_| rig.lease(&snap, Strategy::PeakEwma).unwrap())
        .collect();
    assert!(held.iter().all(|l| l.host() == "h2"));
    let l = rig.lease(&snap, Strategy::PeakEwma).unwrap();
    assert_eq!(l.host(), "h1", "h2 carries more than its weight's share");
}

#[test]
fn stamps_round_down_on_both_sides_of_the_process_anchor() {
    // The anchor is the first instant any statistics saw; tests (and
    // directories) run before and after it. A whole number of ms between
    // two instants is that many ms of stamps, on either side: an ejection
    // of 30 s ends exactly 30 s later wherever it started.
    let now = Instant::now();
    let _ = super::stats::stamp(now);
    for back_us in [0u64, 1, 499, 500, 501, 999, 1_000, 1_500, 7_300_250] {
        for base in [now, now + Duration::from_secs(3)] {
            let Some(t) = base.checked_sub(Duration::from_micros(back_us)) else {
                continue;
            };
            for gap_ms in [1u64, 999, 30_000] {
                let later = t + Duration::from_millis(gap_ms);
                let d = super::stats::stamp(later) - super::stats::stamp(t);
                assert_eq!(d, gap_ms as i64, "{back_us} us back, {gap_ms} ms apart");
            }
        }
    }
}
