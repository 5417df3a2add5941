//! Randomized fault-schedule model test (issue 6, item 12).
//!
//! The sans-IO machines of `steadfast-core` (subscription, resolver, fetch
//! plan, metadata cache, directory) run under a simulator that plays their
//! actor shells on a virtual clock: timers in an ordered event queue keyed
//! by token, fetches answered by simulated providers (ok, fail fast, hang,
//! panic, wrong answer), a registry with one growing version whose streams
//! carry Resets and Deltas, that goes down (refusing, panicking, rejecting
//! or hanging), whose streams yield errors, end, panic, miss notifications
//! or re-send a state that is not newer, subscriber changes, supervised
//! restarts, deliveries and directory updates lost to handler panics (the
//! resolver asks for a Reset, the directory for the full list), and
//! shutdown.
//! Each schedule is seeded; the invariants (see `fault_model/invariants.rs`)
//! are checked whenever no message is in flight (after every event and every
//! step that leaves none), and after the last fault heals the state must
//! converge to the fault-free result within the bound of
//! `fault_model/heal.rs`.
//!
//! `FAULT_MODEL_SEED=<u64>` replays a run (the master seed is printed
//! first), `FAULT_MODEL_SCHEDULES=<n>` sets the number of schedules
//! (default 10,000), `FAULT_MODEL_SCHEDULE=<u64>` runs one schedule seed and
//! prints its step log. A violation prints its schedule seed, a shrunk
//! schedule and its log.

#![forbid(unsafe_code)]

mod apply;
mod cache;
mod engine;
mod heal;
mod invariants;
mod registry;
mod sim;
mod steps;
mod views;
mod world;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heal::Converge;
use sim::{Sim, Stats};
use steps::Step;

/// Schedules per run unless `FAULT_MODEL_SCHEDULES` says otherwise.
const DEFAULT_SCHEDULES: u64 = 10_000;

/// What one schedule ended with.
struct Outcome {
    violation: Option<String>,
    log: Vec<String>,
    stats: Stats,
    converge: Option<Converge>,
    shut_down_early: bool,
}

/// Runs `steps` as schedule `seed`: the steps, the heal phase (unless the
/// engine was shut down) and the final shutdown, stopping at the first
/// violation.
fn run(seed: u64, steps: &[Step], log: bool) -> Outcome {
    let mut sim = Sim::new(seed, log);
    for step in steps {
        sim.step(step);
        if sim.failed() {
            break;
        }
    }
    let shut_down_early = sim.coord.shut_down;
    let mut converge = None;
    if !sim.failed() && !shut_down_early {
        converge = sim.heal_and_check();
    }
    if !sim.failed() {
        sim.final_shutdown();
    }
    Outcome {
        violation: sim.violation.take(),
        log: sim.log.take().unwrap_or_default(),
        stats: sim.stats,
        converge,
        shut_down_early,
    }
}

/// The seed of schedule `i` of a run with `master` (splitmix64).
fn schedule_seed(master: u64, i: u64) -> u64 {
    let mut z = master.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The kind tag of a violation (`[urls]` ...).
fn kind(v: &str) -> &str {
    v.split_once('[')
        .and_then(|(_, r)| r.split_once(']'))
        .map_or("", |(k, _)| k)
}

/// Removes steps while the schedule still violates the same kind of
/// invariant (bounded number of runs).
fn shrink(seed: u64, steps: &[Step], what: &str) -> Vec<Step> {
    let mut cur = steps.to_vec();
    let mut chunk = cur.len().div_ceil(2);
    let mut runs = 0;
    while chunk > 0 && runs < 4000 {
        let mut i = 0;
        let mut progressed = false;
        while i < cur.len() && runs < 4000 {
            let mut cand = cur.clone();
            cand.drain(i..(i + chunk).min(cur.len()));
            runs += 1;
            match run(seed, &cand, false).violation {
                Some(v) if kind(&v) == what => {
                    cur = cand;
                    progressed = true;
                }
                _ => i += chunk,
            }
        }
        if !progressed {
            chunk /= 2;
        }
    }
    cur
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Prints a failing schedule: its seed, the shrunk steps and their log.
fn report(seed: u64, violation: &str) {
    let steps = steps::generate(seed);
    println!("fault model: VIOLATION in schedule seed {seed} (FAULT_MODEL_SCHEDULE={seed})");
    println!("fault model: {violation}");
    let small = shrink(seed, &steps, kind(violation));
    println!(
        "fault model: shrunk from {} to {} steps:",
        steps.len(),
        small.len()
    );
    for s in &small {
        println!("  {s:?}");
    }
    let out = run(seed, &small, true);
    println!("fault model: log of the shrunk schedule:");
    for line in out.log {
        println!("  {line}");
    }
    if let Some(v) = out.violation {
        println!("fault model: shrunk schedule: {v}");
    }
}

/// Totals over a run.
#[derive(Default)]
struct Totals {
    schedules: u64,
    stats: Stats,
    shut_down_early: u64,
    /// Per kind: converged schedules, worst time, bound.
    converge: [(u64, Duration, Duration); 3],
    failures: Vec<(u64, u64, String)>,
}

impl Totals {
    fn add(&mut self, out: &Outcome) {
        self.schedules += 1;
        self.stats.add(&out.stats);
        self.shut_down_early += u64::from(out.shut_down_early);
        if let Some(c) = out.converge {
            let slot = &mut self.converge[c.kind];
            slot.0 += 1;
            slot.1 = slot.1.max(c.took);
            slot.2 = slot.2.max(c.bound);
        }
    }

    fn merge(&mut self, other: Totals) {
        self.schedules += other.schedules;
        self.stats.add(&other.stats);
        self.shut_down_early += other.shut_down_early;
        for (s, o) in self.converge.iter_mut().zip(other.converge) {
            s.0 += o.0;
            s.1 = s.1.max(o.1);
            s.2 = s.2.max(o.2);
        }
        self.failures.extend(other.failures);
    }
}

#[test]
fn fault_model() {
    if let Some(seed) = env_u64("FAULT_MODEL_SCHEDULE") {
        let steps = steps::generate(seed);
        let out = run(seed, &steps, true);
        for line in &out.log {
            println!("{line}");
        }
        let n = u64::from(out.violation.is_some());
        if let Some(v) = &out.violation {
            println!("fault model: {v}");
        }
        println!("fault model: 1 schedules, {n} violations");
        assert_eq!(n, 0);
        return;
    }
    let master = env_u64("FAULT_MODEL_SEED").unwrap_or_else(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        schedule_seed(nanos, 0)
    });
    let count = env_u64("FAULT_MODEL_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
    println!("fault model: master seed {master} (replay with FAULT_MODEL_SEED={master})");
    let started = Instant::now();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8)) as u64;
    let stop = AtomicBool::new(false);
    let mut totals = Totals::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let stop = &stop;
                s.spawn(move || {
                    let mut t = Totals::default();
                    for i in (w..count).step_by(workers as usize) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let seed = schedule_seed(master, i);
                        let out = run(seed, &steps::generate(seed), false);
                        t.add(&out);
                        if let Some(v) = out.violation {
                            t.failures.push((i, seed, v));
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    t
                })
            })
            .collect();
        for h in handles {
            totals.merge(h.join().expect("worker panicked"));
        }
    });
    let elapsed = started.elapsed();
    let st = totals.stats;
    println!(
        "fault model: {} schedules in {:.1}s on {workers} thread(s): {} events; {} resolver \
         fetches, {} flights, {} provider calls ({} failed, {} hedged), {} flights ended by \
         the deadline; {} watch opens, {} probes, {} holds, {} resyncs that found missed \
         changes; {} deltas pushed, {} events ignored as not newer, {} registry gaps, {} \
         messages lost, {} resets asked by resolvers, {} whole states asked by directories; {} \
         restarts; {} shut down mid-schedule",
        totals.schedules,
        elapsed.as_secs_f64(),
        st.events,
        st.fetches,
        st.flights,
        st.calls,
        st.call_failures,
        st.hedged,
        st.deadlines,
        st.opens,
        st.probes,
        st.holds,
        st.reconciled,
        st.deltas,
        st.ignored_older,
        st.gaps,
        st.lost,
        st.resets_requested,
        st.need_full,
        st.restarts,
        totals.shut_down_early
    );
    let names = [
        "provider faults only",
        "with registry faults",
        "with missed notifications",
    ];
    for (name, (n, worst, bound)) in names.iter().zip(totals.converge) {
        println!(
            "fault model: converged after the last fault healed ({name}): {n} schedules, worst \
             {:.2}s, bound {:.2}s",
            worst.as_secs_f64(),
            bound.as_secs_f64()
        );
    }
    totals.failures.sort();
    if let Some((_, seed, v)) = totals.failures.first() {
        report(*seed, v);
    }
    let violations = totals.failures.len();
    println!(
        "fault model: {} schedules, {violations} violations",
        totals.schedules
    );
    assert_eq!(violations, 0, "see the violation report above");
}
