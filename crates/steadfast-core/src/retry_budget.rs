//! A retry budget, sans-IO: retries may add at most a fraction of the calls
//! (default 20 %) plus a small floor per second (default 10/s), counted over
//! a sliding window (default 10 s), as linkerd and Finagle do. So retries
//! never multiply the load in an outage: when every call fails, at most
//! 1.2x the calls (plus the floor) reach the providers.
//!
//! Every call deposits a share of one retry ([`RetryBudget::deposit`]);
//! every retry withdraws a whole one ([`RetryBudget::try_withdraw`]), and is
//! refused when the balance is short. The floor is a reserve of
//! `min_per_sec * ttl` retries that lasts because withdrawals age out of the
//! window like deposits. Time is an input (`now`), so a test steps the clock
//! by hand. The budget decides only "may this retry happen"; whether an
//! error is worth a retry at all is the caller's classification.

use std::time::{Duration, Instant};

use thiserror::Error;

/// Units of one retry (deposits are fractions of it, in these units).
const RETRY_COST: i64 = 1_000;
/// Buckets of the sliding window.
const BUCKETS: usize = 10;

/// How large a [`RetryBudget`] is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBudgetConfig {
    /// Share of the calls that may be retried (0.2 = 20 %), in `0..=1`.
    pub percent_can_retry: f64,
    /// Retries allowed per second whatever the calls (the floor, so that a
    /// client that calls rarely can still retry).
    pub min_retries_per_sec: u32,
    /// Window over which calls and retries are counted (at least 1 s).
    pub ttl: Duration,
}

impl Default for RetryBudgetConfig {
    /// 20 % of the calls plus 10 retries per second, over 10 s.
    fn default() -> Self {
        Self {
            percent_can_retry: 0.2,
            min_retries_per_sec: 10,
            ttl: Duration::from_secs(10),
        }
    }
}

/// Why a [`RetryBudgetConfig`] was refused.
#[derive(Clone, Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum RetryBudgetError {
    /// `percent_can_retry` is not a finite fraction in `0..=1`.
    #[error("retry budget percent {0} must be between 0 and 1")]
    BadPercent(f64),
    /// `ttl` is below one second or above one hour.
    #[error("retry budget window {0:?} must be between 1 s and 1 h")]
    BadTtl(Duration),
}

impl RetryBudgetConfig {
    /// No retry at all (a budget that refuses every withdrawal).
    pub fn none() -> Self {
        Self {
            percent_can_retry: 0.0,
            min_retries_per_sec: 0,
            ttl: Duration::from_secs(10),
        }
    }

    /// Checks that the budget makes sense.
    pub fn validate(&self) -> Result<(), RetryBudgetError> {
        let p = self.percent_can_retry;
        if !p.is_finite() || !(0.0..=1.0).contains(&p) {
            return Err(RetryBudgetError::BadPercent(p));
        }
        if self.ttl < Duration::from_secs(1) || self.ttl > Duration::from_secs(3600) {
            return Err(RetryBudgetError::BadTtl(self.ttl));
        }
        Ok(())
    }

    /// What one call deposits, in retry units (a finite, clamped value).
    fn deposit_units(&self) -> i64 {
        let p = self.percent_can_retry;
        let p = if p.is_finite() {
            p.clamp(0.0, 1.0)
        } else {
            0.0
        };
        (p * RETRY_COST as f64).round() as i64
    }

    /// The floor: `min_retries_per_sec * ttl` retries, in units.
    fn reserve_units(&self) -> i64 {
        let secs = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        i64::from(self.min_retries_per_sec)
            .saturating_mul(secs.max(1))
            .saturating_mul(RETRY_COST)
    }
}

/// The budget: deposits and withdrawals in a window of 10 buckets
/// of `ttl / 10` each, plus the reserve.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    /// Net units per bucket.
    buckets: [i64; BUCKETS],
    /// Index (bucket count since `origin`) of the newest bucket.
    head: u64,
    /// When bucket 0 began (the first input).
    origin: Option<Instant>,
    deposits: u64,
    withdrawals: u64,
    refusals: u64,
}

impl RetryBudget {
    /// An empty budget (only the reserve is there).
    pub fn new(config: RetryBudgetConfig) -> Self {
        Self {
            config,
            buckets: [0; BUCKETS],
            head: 0,
            origin: None,
            deposits: 0,
            withdrawals: 0,
            refusals: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &RetryBudgetConfig {
        &self.config
    }

    /// One call started at `now`: deposits its share of a retry.
    pub fn deposit(&mut self, now: Instant) {
        let units = self.config.deposit_units();
        let b = self.advance(now);
        self.buckets[b] = self.buckets[b].saturating_add(units);
        self.deposits = self.deposits.saturating_add(1);
    }

    /// A retry wants to run at `now`: withdraws one retry and says yes, or
    /// says no (and withdraws nothing) when the balance is short.
    pub fn try_withdraw(&mut self, now: Instant) -> bool {
        let b = self.advance(now);
        if self.balance_units() < RETRY_COST {
            self.refusals = self.refusals.saturating_add(1);
            return false;
        }
        self.buckets[b] = self.buckets[b].saturating_sub(RETRY_COST);
        self.withdrawals = self.withdrawals.saturating_add(1);
        true
    }

    /// Whole retries available at `now`.
    pub fn balance(&mut self, now: Instant) -> u64 {
        self.advance(now);
        u64::try_from(self.balance_units() / RETRY_COST).unwrap_or(0)
    }

    /// Calls deposited, retries withdrawn and retries refused, all time.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.deposits, self.withdrawals, self.refusals)
    }

    fn balance_units(&self) -> i64 {
        self.buckets
            .iter()
            .fold(self.config.reserve_units(), |a, b| a.saturating_add(*b))
    }

    /// Moves the window to `now` (clearing buckets that aged out) and
    /// returns the bucket `now` falls in. A `now` older than the newest
    /// bucket counts in the newest one (clocks only go forward here).
    fn advance(&mut self, now: Instant) -> usize {
        let origin = *self.origin.get_or_insert(now);
        let width = (self.config.ttl / BUCKETS as u32).max(Duration::from_millis(1));
        let elapsed = now.saturating_duration_since(origin);
        let index = u64::try_from(elapsed.as_nanos() / width.as_nanos()).unwrap_or(u64::MAX);
        if index > self.head {
            let gap = index - self.head;
            if gap >= BUCKETS as u64 {
                self.buckets = [0; BUCKETS];
            } else {
                for k in 1..=gap {
                    let i = self.head.wrapping_add(k) % BUCKETS as u64;
                    self.buckets[i as usize] = 0;
                }
            }
            self.head = index;
        }
        (self.head % BUCKETS as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn budget(percent: f64, min: u32) -> RetryBudget {
        RetryBudget::new(RetryBudgetConfig {
            percent_can_retry: percent,
            min_retries_per_sec: min,
            ttl: Duration::from_secs(10),
        })
    }

    /// Withdraws until refused (bounded), returning how many passed.
    fn drain(b: &mut RetryBudget, now: Instant) -> u32 {
        let mut n = 0;
        while n < 100_000 && b.try_withdraw(now) {
            n += 1;
        }
        n
    }

    #[test]
    fn twenty_percent_of_the_calls_may_be_retried() {
        let t0 = Instant::now();
        let mut b = budget(0.2, 0);
        assert!(!b.try_withdraw(t0), "no call yet, no floor: no retry");
        for _ in 0..100 {
            b.deposit(t0);
        }
        assert_eq!(drain(&mut b, t0), 20);
        assert_eq!(b.counts(), (100, 20, 2));
    }

    #[test]
    fn the_floor_allows_ten_per_second_over_the_window_without_calls() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(RetryBudgetConfig::default());
        assert_eq!(b.balance(t0), 100, "10/s over 10 s");
        assert_eq!(drain(&mut b, t0), 100);
        // Half a window later, nothing has aged out yet.
        assert_eq!(drain(&mut b, t0 + 5 * S), 0);
        // Once the withdrawals age out of the window the floor is back.
        assert_eq!(b.balance(t0 + 11 * S), 100);
    }

    #[test]
    fn deposits_age_out_of_the_window() {
        let t0 = Instant::now();
        let mut b = budget(0.5, 0);
        for _ in 0..10 {
            b.deposit(t0);
        }
        assert_eq!(b.balance(t0 + 9 * S), 5);
        assert_eq!(b.balance(t0 + 10 * S + S / 2), 0);
        for _ in 0..4 {
            b.deposit(t0 + 11 * S);
        }
        assert_eq!(drain(&mut b, t0 + 11 * S), 2);
    }

    #[test]
    fn in_an_outage_retries_stay_within_the_share_plus_the_floor() {
        // Every call fails and wants one retry, 100 calls/s for 60 s.
        let t0 = Instant::now();
        let mut b = RetryBudget::new(RetryBudgetConfig::default());
        let (mut calls, mut retries) = (0u64, 0u64);
        for ms in (0..60_000u64).step_by(10) {
            let now = t0 + Duration::from_millis(ms);
            b.deposit(now);
            calls += 1;
            if b.try_withdraw(now) {
                retries += 1;
            }
        }
        // 20 % of 6000 calls plus 10/s over 60 s (the floor counted once
        // per window: 100 in the first 10 s, then 10/s as it ages out).
        let bound = calls / 5 + 10 * 60 + 100;
        assert!(retries <= bound, "{retries} retries > {bound}");
        assert!(retries >= calls / 5, "{retries} retries < 20 % of {calls}");
    }

    #[test]
    fn no_budget_refuses_every_retry_and_bad_configs_are_refused() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(RetryBudgetConfig::none());
        for _ in 0..1000 {
            b.deposit(t0);
        }
        assert!(!b.try_withdraw(t0));
        let bad = RetryBudgetConfig {
            percent_can_retry: f64::NAN,
            ..RetryBudgetConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(RetryBudgetError::BadPercent(_))
        ));
        let bad = RetryBudgetConfig {
            ttl: Duration::ZERO,
            ..RetryBudgetConfig::default()
        };
        assert_eq!(
            bad.validate(),
            Err(RetryBudgetError::BadTtl(Duration::ZERO))
        );
        // A NaN percent never panics nor deposits.
        let mut b = RetryBudget::new(RetryBudgetConfig {
            percent_can_retry: f64::NAN,
            min_retries_per_sec: 0,
            ttl: Duration::ZERO,
        });
        b.deposit(t0);
        assert!(!b.try_withdraw(t0 + Duration::from_secs(u32::MAX as u64)));
        assert!(RetryBudgetConfig::default().validate().is_ok());
    }
}
