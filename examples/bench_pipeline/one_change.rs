//! One change at full size: a Delta of one instance (a restart: same id,
//! new incarnation and weight) through the same sans-IO stages as a Reset:
//! resolver `on_delivery` -> `take_updates` (a patch) -> directory apply
//! -> publish, freeing what is replaced (the copied chunk, the old URL,
//! the old snapshot) on the clock.

use std::sync::Arc;

use cpu_time::ThreadTime;
use steadfast::MetadataInfo;
use steadfast_core::{Instance, RevisionInterner};

use crate::fixture::{instance, serves, Engine};

/// Engine CPU of `rounds` single restarts, in us, on an engine holding
/// `input` (the Reset of `round`); `input` follows the changes.
pub fn restarts(
    engine: &mut Engine,
    input: &mut [Arc<Instance>],
    round: u32,
    metas: &[Arc<MetadataInfo>],
    interner: &mut RevisionInterner,
    rounds: usize,
) -> Vec<f64> {
    let serving: Vec<usize> = (0..input.len()).filter(|&i| serves(i)).collect();
    let mut out = Vec::with_capacity(rounds);
    for k in 0..rounds {
        // Slot `p` of the directory holds the p-th serving instance.
        let p = k.wrapping_mul(7919) % serving.len();
        let i = serving[p];
        let boot = round + 1 + k as u32;
        let new = instance(i, round, boot, metas, interner);
        assert_eq!(new.id(), input[i].id(), "a restart keeps the id");
        let feed = engine.delta_feed(vec![new.clone()]);
        let t = ThreadTime::now();
        let patched = engine.round(feed, None);
        out.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(patched, "a one-instance delta becomes a patch");
        let snap = engine.published.load();
        let set = &snap.sets()[0];
        assert_eq!(set.len(), serving.len());
        let at = set.get(p).expect("slot");
        assert!(Arc::ptr_eq(&at.instance, &new), "restart visible in place");
        // The registry's old record is freed off the clock, as in rounds.
        input[i] = new;
    }
    out
}
