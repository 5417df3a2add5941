//! Random spreads shared by every machine that must not act in step with
//! its peers: a delay drawn uniformly within a window (session-loss
//! re-registrations and re-subscriptions, restarts), and a period spread
//! around its nominal value (lookup TTLs, periodic resyncs). Randomness is
//! an input; no input makes them panic (NaN, infinite or out-of-range
//! fractions and huge durations saturate).

use std::time::Duration;

use rand::Rng;

/// A delay drawn uniformly in `0..=window` (zero for a zero window).
pub fn uniform_delay(window: Duration, rng: &mut impl Rng) -> Duration {
    let max = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
    if max == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.gen_range(0..=max))
}

/// `base` spread uniformly over `±fraction` of itself. A fraction that is
/// not a finite number above zero gives `base` unchanged; one above 1 is
/// taken as 1 (never a negative period).
pub fn spread_around(base: Duration, fraction: f64, rng: &mut impl Rng) -> Duration {
    if !fraction.is_finite() || fraction <= 0.0 || base.is_zero() {
        return base;
    }
    let f = fraction.min(1.0);
    let factor = rng.gen_range((1.0 - f)..=(1.0 + f));
    Duration::try_from_secs_f64(base.as_secs_f64() * factor).unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn delays_stay_within_their_window_and_cover_it() {
        let mut rng = StdRng::seed_from_u64(7);
        let window = Duration::from_secs(5);
        let draws: Vec<Duration> = (0..1000).map(|_| uniform_delay(window, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d <= window));
        let first_second = draws.iter().filter(|d| d.as_secs() == 0).count();
        assert!(
            (120..=280).contains(&first_second),
            "uniform: {first_second}"
        );
        assert_eq!(uniform_delay(Duration::ZERO, &mut rng), Duration::ZERO);
    }

    #[test]
    fn spreads_stay_around_their_base() {
        let mut rng = StdRng::seed_from_u64(7);
        let base = Duration::from_secs(60);
        for _ in 0..1000 {
            let d = spread_around(base, 0.1, &mut rng);
            assert!(d >= Duration::from_secs(54) && d <= Duration::from_secs(66));
        }
        for odd in [f64::NAN, f64::INFINITY, -1.0, 0.0] {
            assert_eq!(spread_around(base, odd, &mut rng), base);
        }
    }

    proptest! {
        #[test]
        fn no_input_panics(secs in any::<u64>(), nanos in 0u32..1_000_000_000, fraction in any::<f64>(), seed in any::<u64>()) {
            let mut rng = StdRng::seed_from_u64(seed);
            let d = Duration::new(secs, nanos);
            prop_assert!(uniform_delay(d, &mut rng) <= d);
            let s = spread_around(d, fraction, &mut rng);
            if fraction.is_finite() && fraction > 0.0 && !d.is_zero() {
                prop_assert!(s.as_secs_f64() <= d.as_secs_f64() * 2.0 + 1.0);
            }
        }
    }
}
