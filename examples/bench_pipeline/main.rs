//! Full-state cost of the running engine against a floor that produces
//! exactly the same directory content, on thread CPU time.
//!
//! One provider app, N instances over 100 revisions (3 services each; 5
//! revisions do not export the subscribed one; ~2 % of the instances are
//! unhealthy or closing). Each round is a NEW full state (every record
//! changed: port hence id, weight, incarnation), written with
//! `MemoryRegistry::set_instances` into the embedded registry an engine
//! watches on its own thread (registry actor, resolver, directory: the
//! actors production runs). Engine cost = that thread's CPU from idle to
//! idle again, so the frees of what the round replaced are
//! counted; the registry's decoding of the records runs on the writer's
//! thread and is charged to neither side.
//!
//! The floor (`floor.rs`) is a plain function building the same URLs in the
//! same order from the same records (decoded off the clock on another
//! thread, as the registry decodes them for the engine on the writer's
//! thread), sharing one endpoint per revision, with the
//! same chunked running weights, and freeing its previous output and the
//! previous round's decoded records on the clock (the engine frees its
//! previous records too: it holds their last handle). After each round the
//! directory's published content is checked equal to the floor's, element
//! by element.
//!
//! Extra lines, labelled sans-IO, drive the machines alone in this thread:
//! per-stage costs of a full state, one change, and a Delta of k instances
//! against a rebuild (the threshold above which a change travels as a
//! Reset).
//!
//! Run: `cargo run --release --example bench_pipeline [-- --quick | --no-1m | --only N]`
//! (1M is included unless `--quick` or `--no-1m`; it needs about 2 GB).

// Shared with bench_incremental (which reads the engine's CPU on its own).
#[allow(dead_code)]
#[path = "../common/engine_thread.rs"]
mod engine_thread;
mod fixture;
mod floor;
mod one_change;
mod running;
mod sans_io;

use std::sync::Arc;

use cpu_time::ThreadTime;
use steadfast::{Instance, MetadataInfo};
use steadfast_core::RevisionInterner;

use fixture::{key, metadata, records, serves};
use floor::{check, floor, FloorSet};
use running::Running;

/// Warm-up rounds (not recorded).
const WARMUP: u32 = 1;

/// Median of `v`.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Medians of one size, in ms.
struct Row {
    n: usize,
    urls: usize,
    rounds: u32,
    engine: f64,
    floor: f64,
    visible: f64,
}

fn bench_size(n: usize, rounds: u32) -> Result<Row, Box<dyn std::error::Error>> {
    let metas: Vec<Arc<MetadataInfo>> = metadata();
    let by_rev = metas
        .iter()
        .map(|m| (m.revision.clone(), m.clone()))
        .collect();
    let key = key();
    let serving = (0..n).filter(|&i| serves(i)).count();
    let first_serving = (0..n).find(|&i| serves(i)).unwrap_or(0);
    let running = Running::start(records(n, 0, &metas), serving, &metas)?;
    let mut interner = RevisionInterner::default();
    // The floor's records are decoded on another thread, as the registry
    // decodes the engine's on the writer's thread: both sides then free
    // records another thread allocated.
    let decode = |recs: &[steadfast::ServiceInstance], interner: &mut RevisionInterner| {
        std::thread::scope(|s| {
            s.spawn(|| {
                recs.iter()
                    .map(|r| Arc::new(Instance::decode(r, interner)))
                    .collect::<Vec<_>>()
            })
            .join()
            .expect("decoder thread")
        })
    };
    let mut input: Vec<Arc<Instance>> = decode(&records(n, 0, &metas), &mut interner);
    let mut floor_out: FloorSet = floor(&input, &by_rev, &key);
    let (mut e, mut f, mut v) = (vec![], vec![], vec![]);
    for round in 1..=WARMUP + rounds {
        let next = records(n, round, &metas);
        let first_id = next[first_serving].id.clone();
        // The floor's input: the same records, decoded off the clock.
        let next_input = decode(&next, &mut interner);
        let r = running.round(next, serving, &first_id)?;
        let t = ThreadTime::now();
        let out = floor(&next_input, &by_rev, &key);
        drop(std::mem::replace(&mut floor_out, out));
        drop(std::mem::replace(&mut input, next_input));
        let fm = t.elapsed().as_secs_f64() * 1e3;
        // Off both clocks: the directory holds exactly what the floor built.
        let snap = running.snapshot()?;
        assert_eq!(snap.sets().len(), 1, "one app");
        assert_eq!(check(&snap.sets()[0], &floor_out), serving);
        drop(snap);
        if round > WARMUP {
            e.push(r.cpu_ms);
            f.push(fm);
            v.push(r.visible_ms);
        }
    }
    running.stop();
    Ok(Row {
        n,
        urls: serving,
        rounds,
        engine: median(&e),
        floor: median(&f),
        visible: median(&v),
    })
}

/// `PASS` or `MISS`.
pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let with_1m = !quick && !args.iter().any(|a| a == "--no-1m");
    let mut sizes: Vec<(usize, u32)> = if quick {
        vec![(1_000, 15), (10_000, 7), (100_000, 3)]
    } else {
        // The growth exponent is read off the 10k and 1M medians: enough
        // rounds that one noisy round on a shared VM does not move it.
        vec![(1_000, 41), (10_000, 41), (100_000, 11)]
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
        "bench_pipeline: a new full state through the embedded registry and the running \
         engine's actors vs an identical-output floor; thread CPU time, medians; {WARMUP} \
         warm-up round(s){}",
        if quick { "; --quick" } else { "" }
    );
    let mut rows = Vec::new();
    for &(n, rounds) in &sizes {
        rows.push(bench_size(n, rounds)?);
        eprintln!("  done: N={n}");
    }
    println!(
        "\n{:>9} {:>9} {:>6} | {:>10} {:>10} {:>9} | {:>12}",
        "N", "URLs", "rounds", "engine ms", "floor ms", "eng/floor", "visible ms"
    );
    for r in &rows {
        println!(
            "{:>9} {:>9} {:>6} | {:>10.3} {:>10.3} {:>9.2} | {:>12.3}",
            r.n,
            r.urls,
            r.rounds,
            r.engine,
            r.floor,
            r.engine / r.floor,
            r.visible
        );
    }
    println!(
        "  engine: the engine thread's CPU from idle to idle around one write of the whole \
         state (frees included);\n  floor: the same content built by hand from the same \
         records, its previous output and records freed;\n  visible: write returned -> the \
         new state in the directory's published snapshot (wall time)."
    );

    let sans = (!args.iter().any(|a| a == "--no-sans-io")).then(sans_io::run);

    println!("\ntargets:");
    for r in &rows {
        let ratio = r.engine / r.floor;
        println!(
            "target pipeline full-state engine/floor at {} = {ratio:.2} (<= 1.5) {}",
            r.n,
            verdict(ratio <= 1.5)
        );
    }
    let at = |n: usize| rows.iter().find(|r| r.n == n);
    if let (Some(a), Some(b)) = (at(10_000), at(1_000_000)) {
        let x = (b.engine / a.engine).ln() / 100f64.ln();
        let fx = (b.floor / a.floor).ln() / 100f64.ln();
        println!(
            "target pipeline full-state growth exponent 10k->1M = {x:.3} (<= 1.05) {}   \
             [floor {fx:.3}]",
            verdict(x <= 1.05)
        );
    }
    if let Some(s) = sans {
        s.print_info();
    }
    Ok(())
}
