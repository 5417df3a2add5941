//! Full-state pipeline cost of the engine against a floor that produces
//! exactly the same content, on thread CPU time, in one process.
//!
//! One provider app, N instances over 100 revisions (3 services each; 5
//! revisions do not export the subscribed one; ~2 % of the instances are
//! unhealthy or closing). The engine side is the sans-IO data path driven
//! in this thread: a warmed `ResolverMachine` (every revision resolved)
//! and a `DirectoryMachine` holding the previous round. One round = a NEW
//! full Reset (every record changed: port hence id, weight, incarnation)
//! -> `on_delivery` -> `take_updates` (a full list) -> `apply_retiring` ->
//! `Published::store`, and the replaced table, URL list and snapshot are
//! freed on the clock (the replaced snapshots handed back by the directory
//! and the slot are dropped in the round; nothing is deferred).
//!
//! The floor (`floor.rs`) is a plain function building the same URLs in
//! the same order, sharing one endpoint per revision, with the same
//! chunked running weights, and freeing its previous output on the clock.
//! Both get the same `Vec<Arc<Instance>>`, built off the clock; the
//! engine takes a clone of it (the registry's delivery, made off the clock
//! and printed). Engine, floor and the `EndpointSet::from_vec` reference
//! run in rotating order each round, so none always runs first (on cold
//! caches) or last. Each round the directory's content is checked equal to
//! both floors element by element. Instances are freed by neither side:
//! the round's input vector, dropped off the clock, holds the last handle.
//!
//! Run: `cargo run --release --example bench_pipeline [-- --quick | --no-1m | --only N]`
//! (1M is included unless `--quick` or `--no-1m`; it needs about 1 GB).

mod fixture;
mod floor;
mod one_change;

use std::collections::HashMap;
use std::sync::Arc;

use cpu_time::ThreadTime;
use steadfast::core::RevisionInterner;
use steadfast::{DirectoryStatus, MetadataInfo};

use fixture::{key, metadata, reset, serves, Engine, Stages};
use floor::{check, floor, floor_set, FloorSet};

/// Rounds with per-stage clock reads (not part of the medians).
const BREAKDOWN_ROUNDS: u32 = 5;
/// Warm-up rounds (not recorded).
const WARMUP: u32 = 2;
/// Single restarts timed at 100k.
const ONE_CHANGES: usize = 2001;

/// Median of `v`.
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(t: ThreadTime) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Medians of one size, in ms.
struct Row {
    n: usize,
    urls: usize,
    rounds: u32,
    engine: f64,
    floor: f64,
    floor_set: f64,
    clone: f64,
    stages: Stages,
    floor_build: f64,
    floor_free: f64,
    one_change: Option<Vec<f64>>,
}

fn bench_size(n: usize, rounds: u32, one_change: bool) -> Row {
    let metas: Vec<Arc<MetadataInfo>> = metadata();
    let by_rev: HashMap<String, Arc<MetadataInfo>> = metas
        .iter()
        .map(|m| (m.revision.clone(), m.clone()))
        .collect();
    let key = key();
    let mut interner = RevisionInterner::default();
    let mut input = reset(n, 0, &metas, &mut interner);
    let mut engine = Engine::warmed(input.clone(), &by_rev);
    let mut floor_out: FloorSet = floor(&input, &by_rev, &key);
    let mut set_out = floor_set(&input, &by_rev, &key);
    let expected = (0..n).filter(|&i| serves(i)).count();

    let (mut e, mut f, mut s, mut c) = (vec![], vec![], vec![], vec![]);
    let (mut stages, mut fb, mut ff) = (vec![], vec![], vec![]);
    for round in 1..=WARMUP + rounds + BREAKDOWN_ROUNDS {
        let next = reset(n, round, &metas, &mut interner);
        let t = ThreadTime::now();
        let delivery = next.clone();
        let clone_ms = ms(t);
        let breakdown = round > WARMUP + rounds;
        let mut st = Stages::default();
        let (mut em, mut fm, mut sm) = (0.0, 0.0, 0.0);
        let mut delivery = Some(delivery);
        for side in (0..3).map(|k| (k + round as usize) % 3) {
            match side {
                0 => {
                    let feed = engine.reset_feed(delivery.take().expect("one delivery"));
                    let t = ThreadTime::now();
                    let patched = engine.round(feed, breakdown.then_some(&mut st));
                    em = ms(t);
                    assert!(!patched, "a Reset gives a full list");
                }
                1 => {
                    let t = ThreadTime::now();
                    let out = floor(&next, &by_rev, &key);
                    let built = ms(t);
                    drop(std::mem::replace(&mut floor_out, out));
                    fm = ms(t);
                    if breakdown {
                        fb.push(built);
                        ff.push(fm - built);
                    }
                }
                _ => {
                    let t = ThreadTime::now();
                    let out = floor_set(&next, &by_rev, &key);
                    drop(std::mem::replace(&mut set_out, out));
                    sm = ms(t);
                }
            }
        }
        // Off the clock: the directory holds exactly what both floors built.
        let snap = engine.published.load();
        assert!(
            matches!(snap.status(), DirectoryStatus::Ready { endpoints, degraded, .. }
                if *endpoints == expected && degraded.is_empty()),
            "directory status {:?}",
            snap.status()
        );
        assert_eq!(snap.sets().len(), 1, "one app");
        assert_eq!(check(&snap.sets()[0], &floor_out, Some(&set_out)), expected);
        drop(snap);
        // The previous round's records: their last handle, freed here.
        drop(std::mem::replace(&mut input, next));
        if breakdown {
            stages.push(st);
        } else if round > WARMUP {
            e.push(em);
            f.push(fm);
            s.push(sm);
            c.push(clone_ms);
        }
    }
    let pick = |g: fn(&Stages) -> f64| median(&stages.iter().map(g).collect::<Vec<_>>());
    let stages = Stages {
        deliver: pick(|s| s.deliver),
        take: pick(|s| s.take),
        apply: pick(|s| s.apply),
        store: pick(|s| s.store),
        free: pick(|s| s.free),
    };
    let one_change = one_change.then(|| {
        let round = WARMUP + rounds + BREAKDOWN_ROUNDS;
        let metas = &metas;
        one_change::restarts(
            &mut engine,
            &mut input,
            round,
            metas,
            &mut interner,
            ONE_CHANGES,
        )
    });
    Row {
        n,
        urls: expected,
        rounds,
        engine: median(&e),
        floor: median(&f),
        floor_set: median(&s),
        clone: median(&c),
        stages,
        floor_build: median(&fb),
        floor_free: median(&ff),
        one_change,
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let with_1m = !quick && !args.iter().any(|a| a == "--no-1m");
    let mut sizes: Vec<(usize, u32)> = if quick {
        vec![(1_000, 31), (10_000, 11), (100_000, 5)]
    } else {
        vec![(1_000, 201), (10_000, 51), (100_000, 15)]
    };
    if with_1m {
        sizes.push((1_000_000, 5));
    }
    // `--only N`: one size (for profiling).
    if let Some(n) = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok())
    {
        sizes.retain(|&(m, _)| m == n);
    }
    println!(
        "bench_pipeline: sans-IO Reset -> resolver -> directory -> publish vs floor; thread CPU \
         time, medians; {WARMUP} warm-up rounds{}",
        if quick { "; --quick" } else { "" }
    );
    let rows: Vec<Row> = sizes
        .iter()
        .map(|&(n, rounds)| bench_size(n, rounds, n == 100_000))
        .collect();

    println!(
        "\n{:>9} {:>9} {:>6} | {:>10} {:>10} {:>8} | {:>14} {:>16}",
        "N",
        "URLs",
        "rounds",
        "engine ms",
        "floor ms",
        "eng/floor",
        "from_vec ms",
        "delivery clone"
    );
    for r in &rows {
        println!(
            "{:>9} {:>9} {:>6} | {:>10.3} {:>10.3} {:>8.2} | {:>14.3} {:>16.3}",
            r.n,
            r.urls,
            r.rounds,
            r.engine,
            r.floor,
            r.engine / r.floor,
            r.floor_set,
            r.clone
        );
    }
    println!(
        "  from_vec: the floor's URLs through EndpointSet::from_vec (builds an id index too; \
         reference only).\n  delivery clone: cloning the Reset's Vec<Arc<Instance>> for the \
         engine (off both clocks)."
    );
    println!(
        "\nengine stages, median of {BREAKDOWN_ROUNDS} rounds with a clock read per stage (ms):"
    );
    println!(
        "{:>9} | {:>10} {:>10} {:>10} {:>8} {:>10} | {:>11} {:>10}",
        "N", "on_deliv.", "take_upd.", "apply", "store", "free snap", "floor build", "floor free"
    );
    for r in &rows {
        let s = &r.stages;
        println!(
            "{:>9} | {:>10.3} {:>10.3} {:>10.3} {:>8.3} {:>10.3} | {:>11.3} {:>10.3}",
            r.n, s.deliver, s.take, s.apply, s.store, s.free, r.floor_build, r.floor_free
        );
    }
    println!(
        "  on_deliv.: table rebuild incl. dropping the old table; take_upd.: the full URL list \
         (URL and endpoint allocations);\n  apply: editor rebuild (index, chunks, running \
         weights) + snapshot; free snap: the replaced snapshot (old URLs, chunks)."
    );

    println!("\ntargets:");
    for r in &rows {
        let ratio = r.engine / r.floor;
        println!(
            "target pipeline full-state engine/floor at {} = {ratio:.2} (<= 1.2) {}",
            r.n,
            verdict(ratio <= 1.2)
        );
    }
    let at = |n: usize| rows.iter().find(|r| r.n == n);
    if let (Some(a), Some(b)) = (at(10_000), at(100_000)) {
        let x = b.engine / a.engine;
        println!(
            "target pipeline 10k->100k scaling = {x:.2}x (<= 11x) {}   [floor scales {:.2}x]",
            verdict(x <= 11.0),
            b.floor / a.floor
        );
    }
    if let Some(us) = at(100_000).and_then(|r| r.one_change.as_ref()) {
        let m = median(us);
        let mut v = us.clone();
        v.sort_by(f64::total_cmp);
        let p99 = v[v.len() * 99 / 100];
        println!(
            "target pipeline one change sans-IO at 100k = {m:.1} us (<= 100 us) {}   \
             [{} restarts, p99 {p99:.1} us]",
            verdict(m <= 100.0),
            v.len()
        );
    }
}
