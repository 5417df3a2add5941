//! The sans-IO lines (not the running engine): the resolver and directory
//! machines driven in this thread at 100k instances, for the per-stage cost
//! of a full state, the cost of one change, and a Delta of k changed
//! instances against a rebuild from a Reset of the same state (which is why
//! a change of more than a quarter of an app travels as a Reset).

use std::collections::HashMap;
use std::sync::Arc;

use cpu_time::ThreadTime;
use steadfast::{Instance, MetadataInfo};
use steadfast_core::RevisionInterner;

use crate::fixture::{instance, metadata, reset, Engine, Stages};
use crate::median;
use crate::one_change;

const N: usize = 100_000;
/// Full rounds with per-stage clock reads.
const ROUNDS: u32 = 5;
/// Single restarts timed.
const ONE_CHANGES: usize = 2001;
/// Changed fractions of the app compared as a Delta and as a Reset.
const FRACTIONS: [f64; 5] = [0.01, 0.05, 0.10, 0.20, 0.25];

/// What the sans-IO runs measured.
pub struct SansIo {
    stages: Stages,
    one_change: Vec<f64>,
    /// (changed instances, delta ms, reset ms).
    threshold: Vec<(usize, f64, f64)>,
}

fn ms(t: ThreadTime) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Runs the sans-IO measurements at 100k.
pub fn run() -> SansIo {
    let metas: Vec<Arc<MetadataInfo>> = metadata();
    let by_rev: HashMap<String, Arc<MetadataInfo>> = metas
        .iter()
        .map(|m| (m.revision.clone(), m.clone()))
        .collect();
    let mut interner = RevisionInterner::default();
    let mut input = reset(N, 0, &metas, &mut interner);
    let mut engine = Engine::warmed(input.clone(), &by_rev);
    let mut stages = Vec::new();
    let mut round = 0;
    for _ in 0..ROUNDS {
        round += 1;
        let next = reset(N, round, &metas, &mut interner);
        let mut st = Stages::default();
        let feed = engine.reset_feed(next.clone());
        assert!(
            !engine.round(feed, Some(&mut st)),
            "a Reset gives a full list"
        );
        stages.push(st);
        input = next;
    }
    let pick = |g: fn(&Stages) -> f64| median(&stages.iter().map(g).collect::<Vec<_>>());
    let stages = Stages {
        deliver: pick(|s| s.deliver),
        take: pick(|s| s.take),
        apply: pick(|s| s.apply),
        store: pick(|s| s.store),
        free: pick(|s| s.free),
    };
    let one_change = one_change::restarts(
        &mut engine,
        &mut input,
        round,
        &metas,
        &mut interner,
        ONE_CHANGES,
    );
    round += ONE_CHANGES as u32 + 1;
    let mut threshold = Vec::new();
    for f in FRACTIONS {
        let k = (N as f64 * f) as usize;
        round += 1;
        // The same k restarts (same ids, new incarnations), once as a
        // Delta, once inside a Reset of the whole state.
        let changed: Vec<Arc<Instance>> = (0..k)
            .map(|j| instance(j * (N / k), 0, round, &metas, &mut interner))
            .collect();
        let mut next = input.clone();
        for (j, c) in changed.iter().enumerate() {
            next[j * (N / k)] = c.clone();
        }
        let feed = engine.delta_feed(changed.clone());
        let t = ThreadTime::now();
        engine.round(feed, None);
        let delta_ms = ms(t);
        round += 1;
        let again: Vec<Arc<Instance>> = (0..k)
            .map(|j| instance(j * (N / k), 0, round, &metas, &mut interner))
            .collect();
        let mut next2 = next.clone();
        for (j, c) in again.iter().enumerate() {
            next2[j * (N / k)] = c.clone();
        }
        let feed = engine.reset_feed(next2.clone());
        let t = ThreadTime::now();
        engine.round(feed, None);
        let reset_ms = ms(t);
        threshold.push((k, delta_ms, reset_ms));
        input = next2;
    }
    SansIo {
        stages,
        one_change,
        threshold,
    }
}

impl SansIo {
    /// Prints the labelled sans-IO lines.
    pub fn print_info(&self) {
        let s = &self.stages;
        println!("\nsans-IO (the machines alone in one thread, not the running engine), N = {N}:");
        println!(
            "  full state per stage (ms): resolver {:.3}, URL list {:.3}, directory {:.3}, \
             publish {:.3}, free {:.3}",
            s.deliver, s.take, s.apply, s.store, s.free
        );
        let mut v = self.one_change.clone();
        v.sort_by(f64::total_cmp);
        let p99 = v.get(v.len() * 99 / 100).copied().unwrap_or(f64::NAN);
        println!(
            "  one change (a restart): median {:.1} us, p99 {p99:.1} us over {} restarts",
            median(&v),
            v.len()
        );
        for (k, d, r) in &self.threshold {
            println!(
                "  {k} changed of {N} ({:.0} %): as a Delta {d:.3} ms, as a Reset {r:.3} ms \
                 (a change of more than {} travels as a Reset)",
                100.0 * *k as f64 / N as f64,
                steadfast_core::delta_budget(N)
            );
        }
    }
}
