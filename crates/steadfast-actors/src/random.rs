//! The shell's randomness: a fast per-thread generator whose draws the
//! sans-IO core takes as inputs (picks, leases).

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use steadfast_core::wyrand;

thread_local! {
    /// wyrand state of this thread; 0 = not seeded yet.
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// A fast per-thread pseudo-random `u64` (wyrand), seeded once per thread
/// from the process's random hasher keys. Not cryptographic: it spreads
/// load, nothing more.
#[inline]
pub fn thread_random() -> u64 {
    RNG.with(|s| {
        let mut state = s.get();
        if state == 0 {
            let mut h = RandomState::new().build_hasher();
            h.write_u64(0x5eed);
            state = h.finish() | 1;
        }
        let (next, out) = wyrand(state);
        s.set(next);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::thread_random;

    #[test]
    fn draws_differ_and_spread_over_the_range() {
        let draws: Vec<u64> = (0..1000).map(|_| thread_random()).collect();
        let distinct: std::collections::HashSet<_> = draws.iter().collect();
        assert!(distinct.len() > 990, "a generator, not a constant");
        let high = draws.iter().filter(|d| **d > u64::MAX / 2).count();
        assert!(
            (350..=650).contains(&high),
            "about half in the upper half: {high}"
        );
    }
}
