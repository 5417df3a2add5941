//! Capped exponential backoff with proportional jitter. The policy maps an
//! attempt number and an [`ErrorClass`] to a delay; randomness is an input.

use std::time::Duration;

use rand::Rng;

use crate::error::ErrorClass;

/// Backoff policy: `initial * multiplier^n`, capped at `max`, plus a random
/// `0..=jitter` fraction of that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffPolicy {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Upper bound of the base delay.
    pub max: Duration,
    /// Growth factor per attempt.
    pub multiplier: f64,
    /// Largest extra fraction added at random (0.25 = up to +25 %).
    pub jitter: f64,
}

impl Default for BackoffPolicy {
    /// 1 s doubling to 30 s, plus 0-25 % jitter.
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            multiplier: 2.0,
            jitter: 0.25,
        }
    }
}

impl BackoffPolicy {
    /// Base delay (without jitter) before retry number `attempt` (0-based).
    pub fn base(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.max(1.0).powi(attempt.min(64) as i32);
        let secs = (self.initial.as_secs_f64() * factor).min(self.max.as_secs_f64());
        Duration::from_secs_f64(secs.max(0.0))
    }

    /// Delay before retry number `attempt` after an error of class `class`.
    /// Persistent errors go straight to the cap.
    pub fn delay(&self, attempt: u32, class: ErrorClass, rng: &mut impl Rng) -> Duration {
        let base = match class {
            ErrorClass::Transient => self.base(attempt),
            ErrorClass::Persistent => self.max,
        };
        let jitter = if self.jitter > 0.0 {
            rng.gen_range(0.0..=self.jitter)
        } else {
            0.0
        };
        base.mul_f64(1.0 + jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn samples_lie_in_their_band() {
        let p = BackoffPolicy::default();
        let mut rng = StdRng::seed_from_u64(7);
        for n in 0..12u32 {
            let lo = Duration::from_secs(2u64.pow(n).min(30));
            for _ in 0..200 {
                let d = p.delay(n, ErrorClass::Transient, &mut rng);
                assert!(d >= lo && d <= lo.mul_f64(1.25), "n={n} d={d:?}");
            }
        }
    }

    #[test]
    fn persistent_errors_go_to_the_cap() {
        let p = BackoffPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        assert!(p.delay(0, ErrorClass::Persistent, &mut rng) >= Duration::from_secs(30));
    }
}
