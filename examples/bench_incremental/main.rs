//! Benchmark: what one change costs in an app that is already resolved and
//! ready, and which event rate the engine keeps up with, at 10k and 100k
//! instances, on the embedded `MemoryRegistry` and through a real etcd.
//!
//! The engine runs in its own actix System on a dedicated thread; its CPU
//! is that thread's CPU time (the registry writer and the directory polls
//! run on the main thread and are not counted; etcd is another process).
//! Measured per registry and size:
//! - (a) engine CPU per change (restart / remove / add of one instance),
//!   median over the rounds, nothing polling meanwhile;
//! - (b) registry call -> change visible in the published snapshot, median;
//! - (c) sustained: a ladder of offered single-instance event rates; the
//!   best achieved rate with the directory never more than 100 ms behind;
//! - (d) a burst of 1000 events: last registry call -> visible;
//! - a floor beside (a): what waking an idle actix thread with one message
//!   costs on this machine (`wake_floor.rs`), which every change pays.
//!
//! Uses only the public API (engine builder, `subscribe`, `select`/`status`,
//! `MemoryRegistry`, `EtcdRegistry`, testkit builders, `ScriptedFetcher`).
//!
//! Run: `cargo run --release --example bench_incremental [-- --sizes 10000,100000
//! --registries embedded,etcd --rounds 21 --step-secs 2 --burst 1000 --no-load]`

#[path = "../common/engine_thread.rs"]
mod engine_thread;
mod fixture;
mod load;
mod one_change;
mod wake_floor;

use std::time::Duration;

use fixture::{Fixture, Kind};
use load::{Burst, Step, MAX_LAG};
use one_change::{medians, Sample};
use wake_floor::WakeFloor;

/// Errors of the benchmark.
pub type BoxError = Box<dyn std::error::Error>;

/// Offered rates, climbed from the first. The pusher reaches ~99.8 % of an
/// offered rate, so a step between the target's 50,000/s and 100,000/s
/// tells an engine that keeps up with somewhat more than the target from
/// one that keeps up with just less.
const RATES: [f64; 12] = [
    100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0, 50_000.0, 70_000.0,
    100_000.0, 200_000.0,
];
/// Tried, in order, only when the directory cannot keep up with 100/s.
const SLOW_RATES: [f64; 3] = [50.0, 20.0, 10.0];

/// Command-line options.
struct Opts {
    sizes: Vec<usize>,
    kinds: Vec<Kind>,
    rounds: usize,
    step: Duration,
    burst: usize,
    /// Skip the sustained ladder and the burst (`--no-load`, for profiling
    /// one change).
    no_load: bool,
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

fn opts() -> Opts {
    let sizes = arg("--sizes")
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let kinds = arg("--registries")
        .map(|v| {
            v.split(',')
                .filter_map(|k| match k.trim() {
                    "embedded" => Some(Kind::Embedded),
                    "etcd" => Some(Kind::Etcd),
                    "nacos" => Some(Kind::Nacos),
                    _ => None,
                })
                .collect()
        })
        .filter(|v: &Vec<Kind>| !v.is_empty())
        .unwrap_or_else(|| vec![Kind::Embedded, Kind::Etcd]);
    let num =
        |name: &str, default: usize| arg(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    Opts {
        sizes: sizes.into_iter().map(|n| n.max(2)).collect(),
        kinds,
        rounds: num("--rounds", 21).max(3),
        step: Duration::from_secs(num("--step-secs", 2).clamp(1, 30) as u64),
        burst: num("--burst", 1000).clamp(1, 100_000),
        no_load: std::env::args().any(|a| a == "--no-load"),
    }
}

/// Everything measured for one registry and size.
struct Row {
    kind: Kind,
    n: usize,
    fill_ms: f64,
    warm_ms: f64,
    idle: Duration,
    cpu: Vec<Sample>,
    visible: Vec<Sample>,
    steps: Vec<Step>,
    burst: Burst,
}

impl Row {
    fn sustained(&self) -> f64 {
        self.steps
            .iter()
            .filter(|s| s.kept_up())
            .map(|s| s.achieved)
            .fold(0.0, f64::max)
    }
}

/// The sustained ladder: up from 100/s while the directory keeps up and the
/// registry takes the offered rate; down from 100/s when even that is too
/// much (so a slow engine still gets a figure).
async fn ladder(f: &mut Fixture, step: Duration) -> Result<Vec<Step>, BoxError> {
    let mut steps: Vec<Step> = Vec::new();
    for (k, &rate) in RATES.iter().enumerate() {
        f.engine.wait_idle(
            one_change::QUIET,
            one_change::NOISE,
            Duration::from_secs(30),
        );
        let s = f.step(rate, step).await?;
        let stop = !s.kept_up() || s.achieved < 0.7 * rate;
        steps.push(s);
        if stop {
            if k > 0 {
                return Ok(steps);
            }
            break;
        }
    }
    if steps.iter().any(Step::kept_up) {
        return Ok(steps);
    }
    for rate in SLOW_RATES {
        f.engine.wait_idle(
            one_change::QUIET,
            one_change::NOISE,
            Duration::from_secs(30),
        );
        let s = f.step(rate, step).await?;
        let kept_up = s.kept_up();
        steps.push(s);
        if kept_up {
            break;
        }
    }
    Ok(steps)
}

async fn run(kind: Kind, n: usize, o: &Opts) -> Result<Row, BoxError> {
    let mut f = Fixture::start(kind, n).await?;
    let idle = f.idle_rate(Duration::from_millis(500))?;
    let cpu = f.cpu_rounds(o.rounds).await?;
    let visible = f.latency_rounds(o.rounds).await?;
    f.ensure_marker().await?;
    // Nacos servers merge a service's changes for 500 ms before pushing:
    // a rate ladder would measure the merge window, not the engine.
    let (steps, burst) = if o.no_load || kind == Kind::Nacos {
        (Vec::new(), Burst::default())
    } else {
        let steps = ladder(&mut f, o.step).await?;
        let (_, idle_before_burst) = f.engine.wait_idle(
            one_change::QUIET,
            one_change::NOISE,
            Duration::from_secs(30),
        );
        let mut burst = f.burst(o.burst).await?;
        burst.engine_was_idle = idle_before_burst;
        (steps, burst)
    };
    let row = Row {
        kind,
        n,
        fill_ms: f.fill_ms,
        warm_ms: f.warm_ms,
        idle,
        cpu,
        visible,
        steps,
        burst,
    };
    f.stop();
    Ok(row)
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn print(rows: &[Row], o: &Opts, floor: &WakeFloor) {
    println!(
        "\none change ({} rounds each: restart, remove, add cycled; medians)",
        o.rounds
    );
    println!(
        "{:>8} | {:>6} | {:>9} | {:>9} | {:>7} | {:>27} | {:>27} | {:>8}",
        "registry",
        "N",
        "fill ms",
        "warm ms",
        "idle",
        "engine CPU us all (r/rm/a)",
        "visible ms all (r/rm/a)",
        "call ms"
    );
    println!("{}", "-".repeat(123));
    for r in rows {
        let (c, cp) = medians(&r.cpu);
        let (v, vp) = medians(&r.visible);
        let call = one_change::median(r.visible.iter().map(|x| x.call).collect());
        println!(
            "{:>8} | {:>6} | {:>9.0} | {:>9.0} | {:>7} | {:>27} | {:>27} | {:>8}",
            r.kind.name(),
            r.n,
            r.fill_ms,
            r.warm_ms,
            us(r.idle),
            format!("{} ({}/{}/{})", us(c), us(cp[0]), us(cp[1]), us(cp[2])),
            format!("{} ({}/{}/{})", ms(v), ms(vp[0]), ms(vp[1]), ms(vp[2])),
            ms(call),
        );
    }
    println!(
        "  fill: writing the N records; warm: engine start -> directory Ready with N;\n  \
         idle: engine CPU us per second with nothing changing; CPU: engine thread, from idle\n  \
         to idle again (40 ms quiet) around one change; visible: registry call -> the published snapshot shows it;\n  \
         call: the registry call alone (part of visible; on the benchmark's thread, not engine CPU)."
    );
    println!(
        "  wake floor (no target): an idle actix System thread woken by one message from another\n  \
         thread, doing nothing, read the same way: median {} us (min {}, p90 {}); every change\n  \
         costs at least one such wake (the registry's event crosses from the writer's thread).\n  \
         The same wake handed on through three actors, each doing nothing but forward it: {} us.",
        us(floor.median),
        us(floor.min),
        us(floor.p90),
        us(floor.three_actors)
    );

    if o.no_load {
        println!("\nsustained and burst: skipped (--no-load)");
        return;
    }
    println!(
        "\nsustained ({} s per offered rate; kept up = every probe visible within {} ms)",
        o.step.as_secs(),
        MAX_LAG.as_millis()
    );
    for r in rows {
        let steps: Vec<String> = r
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{:.0}/s->{:.0}/s lag {} catch-up {} {}",
                    s.offered,
                    s.achieved,
                    s.max_lag
                        .map_or("never".into(), |d| format!("{} ms", ms(d))),
                    s.catch_up
                        .map_or("never".into(), |d| format!("{} ms", ms(d))),
                    if s.kept_up() { "ok" } else { "BEHIND" }
                )
            })
            .collect();
        println!(
            "  {:>8} N={:<6} best {:.0} ev/s:\n    {}",
            r.kind.name(),
            r.n,
            r.sustained(),
            steps.join("\n    ")
        );
    }
    println!(
        "  offered -> achieved: events the registry accepted per second of pushing; the ladder\n  \
         climbs from 100/s and stops at the first step BEHIND or registry-bound (< 70 % of offered),\n  \
         or goes down to 50, 20, 10/s when 100/s is BEHIND; best = best achieved rate kept up with."
    );

    println!("\nburst (events pushed as fast as the registry takes them; the last one observed)");
    for r in rows {
        let b = &r.burst;
        println!(
            "  {:>8} N={:<6} {} events pushed in {} ms, settled {}",
            r.kind.name(),
            r.n,
            b.events,
            ms(b.push),
            b.settle
                .map_or("never (not within 30 s)".into(), |d| format!(
                    "{} ms after the last",
                    ms(d)
                ))
        );
        if !b.engine_was_idle {
            println!(
                "    (the engine was still busy with the sustained phase's backlog when it began)"
            );
        }
    }
}

fn verdict(ok: bool) -> &'static str {
    ["MISS", "PASS"][usize::from(ok)]
}

/// The target line for a figure per registry: the worst of the measured
/// registries, each named in brackets.
fn target_line(what: &str, figs: &[(Kind, f64)], unit: &str, bound: f64, higher_better: bool) {
    if figs.is_empty() {
        return;
    }
    let worst =
        figs.iter()
            .map(|(_, f)| *f)
            .fold(if higher_better { f64::MAX } else { 0.0 }, |a, b| {
                if higher_better {
                    a.min(b)
                } else {
                    a.max(b)
                }
            });
    let ok = if higher_better {
        worst >= bound
    } else {
        worst <= bound
    };
    let fig = |f: f64| {
        if f.is_finite() {
            format!("{f:.3}")
        } else {
            "never".to_string()
        }
    };
    let each: Vec<String> = figs
        .iter()
        .map(|(k, f)| format!("{} {}", k.name(), fig(*f)))
        .collect();
    let op = if higher_better { ">=" } else { "<=" };
    println!(
        "target {what} = {} {unit} ({op} {bound} {unit}) {} [{}]",
        fig(worst),
        verdict(ok),
        each.join(", ")
    );
}

/// Nacos (issue 21): one change in a 10k-instance service costs the engine
/// at most twice what the same change costs through etcd; a push is visible
/// in the published snapshot within 5 ms (median) and 20 ms (p99) of its
/// arrival at the client.
fn nacos_targets(rows: &[Row]) {
    let Some(n) = rows.iter().find(|r| r.kind == Kind::Nacos) else {
        return;
    };
    println!("\nnacos targets ({} instances):", n.n);
    let c = medians(&n.cpu).0.as_secs_f64() * 1e6;
    match rows.iter().find(|r| r.kind == Kind::Etcd && r.n == n.n) {
        Some(e) => {
            let bound = 2.0 * medians(&e.cpu).0.as_secs_f64() * 1e6;
            println!(
                "target nacos-{} one change cpu = {c:.1} us (<= 2 x etcd = {bound:.1} us) {}",
                n.n,
                verdict(c <= bound)
            );
        }
        None => println!(
            "  nacos one change cpu = {c:.1} us (no etcd row of {} instances to compare: add --registries etcd,nacos)",
            n.n
        ),
    }
    let quantile = |mut v: Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).copied().unwrap_or(f64::NAN)
    };
    let from_push: Vec<f64> = n
        .visible
        .iter()
        .filter_map(|s| s.from_push)
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    let whole: Vec<f64> = n
        .visible
        .iter()
        .map(|s| s.value.as_secs_f64() * 1e3)
        .collect();
    let (med, p99) = (
        quantile(from_push.clone(), 0.5),
        quantile(from_push.clone(), 0.99),
    );
    println!(
        "target nacos push -> visible median = {med:.3} ms (<= 5 ms) {} [{} of {} rounds timed from the push]",
        verdict(med <= 5.0),
        from_push.len(),
        n.visible.len()
    );
    println!(
        "target nacos push -> visible p99 = {p99:.3} ms (<= 20 ms) {}",
        verdict(p99 <= 20.0)
    );
    println!(
        "  nacos registration call -> visible median {:.1} ms, p99 {:.1} ms (no target: the server merges a service's changes for 500 ms before it pushes)",
        quantile(whole.clone(), 0.5),
        quantile(whole, 0.99)
    );
}

fn targets(rows: &[Row], floor: &WakeFloor) {
    nacos_targets(rows);
    let big: Vec<&Row> = rows.iter().filter(|r| r.n == 100_000).collect();
    if big.is_empty() {
        return;
    }
    println!("\ntargets:");
    let per = |f: &dyn Fn(&Row) -> f64| -> Vec<(Kind, f64)> {
        big.iter().map(|r| (r.kind, f(r))).collect()
    };
    for (kind, bound) in [(Kind::Embedded, 100.0), (Kind::Etcd, 150.0)] {
        if let Some(r) = big.iter().find(|r| r.kind == kind) {
            let c = medians(&r.cpu).0.as_secs_f64() * 1e6;
            println!(
                "target incremental-100k one change cpu {} = {c:.1} us (<= {bound} us) {}",
                kind.name(),
                verdict(c <= bound)
            );
            println!(
                "  of which the wake floor: {:.1} us; above it: {:.1} us (no target)",
                floor.median.as_secs_f64() * 1e6,
                c - floor.median.as_secs_f64() * 1e6
            );
        }
    }
    if let Some(r) = big.iter().find(|r| r.kind == Kind::Embedded) {
        let v = medians(&r.visible).0.as_secs_f64() * 1e3;
        println!(
            "target incremental-100k one change visible embedded = {v:.3} ms (<= 1 ms) {}",
            verdict(v <= 1.0)
        );
        if !r.steps.is_empty() {
            let s = r.sustained();
            println!(
                "target incremental-100k sustained embedded = {s:.0} ev/s (>= 50000 ev/s) {}",
                verdict(s >= 50_000.0)
            );
        }
    }
    if let Some(r) = big.iter().find(|r| r.kind == Kind::Etcd) {
        let v = medians(&r.visible).0.as_secs_f64() * 1e3;
        println!("  etcd: one change visible {v:.3} ms (no target; the etcd put is part of it)");
        if !r.steps.is_empty() {
            println!("  etcd: sustained {:.0} ev/s (no target)", r.sustained());
        }
    }
    let settle = per(&|r| {
        r.burst
            .settle
            .map_or(f64::INFINITY, |d| d.as_secs_f64() * 1e3)
    });
    if big.iter().all(|r| !r.steps.is_empty()) {
        target_line("incremental-100k burst settle", &settle, "ms", 50.0, false);
    }
}

fn main() -> Result<(), BoxError> {
    let o = opts();
    println!(
        "bench_incremental: sizes {:?}, registries {:?}, {} rounds, {} s steps, burst {} \
         (engine on its own thread; thread CPU time; loopback)",
        o.sizes,
        o.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        o.rounds,
        o.step.as_secs(),
        o.burst
    );
    let system = actix_rt::System::new();
    let mut rows = Vec::new();
    for &n in &o.sizes {
        for &kind in &o.kinds {
            let t = std::time::Instant::now();
            let row = system.block_on(run(kind, n, &o))?;
            eprintln!(
                "  done: {} N={n} in {:.1} s",
                kind.name(),
                t.elapsed().as_secs_f64()
            );
            rows.push(row);
        }
    }
    // After the engines are gone, on the same quiet machine.
    let floor = wake_floor::measure(o.rounds.max(21))?;
    print(&rows, &o, &floor);
    targets(&rows, &floor);
    Ok(())
}
