//! Capped exponential backoff with proportional jitter. The policy maps an
//! attempt number and an [`ErrorClass`] to a delay; randomness is an input.
//! No input makes it panic: out-of-range values saturate, and
//! [`BackoffPolicy::validate`] tells a builder which policies make sense.

use std::time::Duration;

use rand::Rng;
use thiserror::Error;

use crate::error::ErrorClass;

/// Longest delay a validated policy may produce (one day). Delays are added
/// to `Instant`s, so an unbounded cap would overflow the clock.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);

/// Backoff policy: `initial * multiplier^n`, capped at `max`, plus a random
/// `0..=jitter` fraction of that.
///
/// Deserializes from e.g. `{ initial = "1s", max = "30s", multiplier = 2.0,
/// jitter = 0.25 }`; missing fields take their defaults.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackoffPolicy {
    /// Delay before the first retry.
    #[serde(with = "humantime_serde")]
    pub initial: Duration,
    /// Upper bound of the base delay.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
    /// Growth factor per attempt.
    pub multiplier: f64,
    /// Largest extra fraction added at random (0.25 = up to +25 %).
    pub jitter: f64,
}

/// Why a [`BackoffPolicy`] was refused by [`BackoffPolicy::validate`].
#[derive(Clone, Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum BackoffError {
    /// `initial` is zero: retries would spin.
    #[error("backoff initial delay must be above zero")]
    ZeroInitial,
    /// `max` is below `initial`.
    #[error("backoff max {max:?} is below the initial delay {initial:?}")]
    MaxBelowInitial {
        /// The initial delay.
        initial: Duration,
        /// The cap.
        max: Duration,
    },
    /// `max` exceeds [`MAX_BACKOFF`].
    #[error("backoff max {0:?} exceeds one day")]
    MaxTooLarge(Duration),
    /// `multiplier` is not a finite number of at least 1.
    #[error("backoff multiplier {0} must be finite and at least 1")]
    BadMultiplier(f64),
    /// `jitter` is not a finite fraction between 0 and 1.
    #[error("backoff jitter {0} must be between 0 and 1")]
    BadJitter(f64),
    /// A probe interval is zero: the probe would spin.
    #[error("probe interval must be above zero")]
    ZeroProbe,
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
    /// Checks that the policy is one a retry loop can live with: a non-zero
    /// start, a cap between the start and one day, a finite multiplier of at
    /// least 1 and a jitter fraction in `0..=1`.
    pub fn validate(&self) -> Result<(), BackoffError> {
        if self.initial.is_zero() {
            return Err(BackoffError::ZeroInitial);
        }
        if self.max < self.initial {
            return Err(BackoffError::MaxBelowInitial {
                initial: self.initial,
                max: self.max,
            });
        }
        if self.max > MAX_BACKOFF {
            return Err(BackoffError::MaxTooLarge(self.max));
        }
        if !self.multiplier.is_finite() || self.multiplier < 1.0 {
            return Err(BackoffError::BadMultiplier(self.multiplier));
        }
        if !self.jitter.is_finite() || !(0.0..=1.0).contains(&self.jitter) {
            return Err(BackoffError::BadJitter(self.jitter));
        }
        Ok(())
    }

    /// The cap, bounded by [`MAX_BACKOFF`].
    pub fn cap(&self) -> Duration {
        self.max.min(MAX_BACKOFF)
    }

    /// Base delay (without jitter) before retry number `attempt` (0-based).
    /// Never panics; never exceeds [`BackoffPolicy::cap`].
    pub fn base(&self, attempt: u32) -> Duration {
        let cap = self.cap().as_secs_f64();
        let multiplier = if self.multiplier.is_finite() {
            self.multiplier.max(1.0)
        } else {
            1.0
        };
        let factor = multiplier.powi(attempt.min(1024) as i32);
        let secs = self.initial.min(MAX_BACKOFF).as_secs_f64() * factor;
        let secs = if secs.is_finite() { secs.min(cap) } else { cap };
        Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(self.cap())
    }

    /// Delay before retry number `attempt` after an error of class `class`.
    /// Persistent (and final) errors go straight to the cap. Never panics;
    /// never exceeds twice [`MAX_BACKOFF`].
    pub fn delay(&self, attempt: u32, class: ErrorClass, rng: &mut impl Rng) -> Duration {
        let base = match class {
            ErrorClass::Transient => self.base(attempt),
            ErrorClass::Persistent | ErrorClass::Final => self.cap(),
        };
        let jitter = if self.jitter.is_finite() && self.jitter > 0.0 {
            rng.gen_range(0.0..=self.jitter.min(1.0))
        } else {
            0.0
        };
        Duration::try_from_secs_f64(base.as_secs_f64() * (1.0 + jitter)).unwrap_or(base)
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

    #[test]
    fn absurd_policies_never_panic_and_are_refused() {
        let mut rng = StdRng::seed_from_u64(3);
        let absurd = [
            BackoffPolicy {
                initial: Duration::MAX,
                max: Duration::MAX,
                multiplier: f64::MAX,
                jitter: f64::MAX,
            },
            BackoffPolicy {
                initial: Duration::ZERO,
                max: Duration::ZERO,
                multiplier: f64::NAN,
                jitter: f64::NAN,
            },
            BackoffPolicy {
                initial: Duration::from_secs(5),
                max: Duration::from_secs(1),
                multiplier: f64::INFINITY,
                jitter: -1.0,
            },
        ];
        for p in absurd {
            assert!(p.validate().is_err(), "{p:?}");
            for attempt in [0, 1, 63, 64, 1000, u32::MAX] {
                for class in [ErrorClass::Transient, ErrorClass::Persistent] {
                    let d = p.delay(attempt, class, &mut rng);
                    assert!(d <= MAX_BACKOFF * 2, "{p:?} {attempt} {d:?}");
                }
            }
        }
        assert_eq!(BackoffPolicy::default().validate(), Ok(()));
    }
}
