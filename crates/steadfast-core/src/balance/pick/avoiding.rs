//! [`DirectoryBalance::lease_other`]: a pick that avoids some endpoints,
//! for a retry that must go to ANOTHER endpoint than the ones that failed.

use std::time::Instant;

use super::{Candidate, PickError};
use crate::balance::{BalanceConfig, DirectoryBalance, Lease, Strategy};
use crate::endpoint_set::DirectorySnapshot;
use crate::url::Endpoint;

impl DirectoryBalance {
    /// Picks like [`DirectoryBalance::lease`], but never an endpoint that
    /// `avoid` names: the strategy's pick when it is not avoided, else the
    /// first eligible endpoint not avoided from a random slot on (O(n): for
    /// retries only). Ejected endpoints stay skipped (unless the directory
    /// is in panic mode); `Err(PickError::Empty)` when no other endpoint may
    /// take traffic now.
    pub fn lease_other(
        &self,
        snapshot: &DirectorySnapshot,
        strategy: Strategy,
        cfg: &BalanceConfig,
        now: Instant,
        rng: &mut impl FnMut() -> u64,
        avoid: impl Fn(&Endpoint) -> bool,
    ) -> Result<Lease<'_>, PickError> {
        let c = self.candidate(snapshot, strategy, cfg, now, rng)?;
        let n = snapshot.len();
        if !avoid(c.ep) {
            return Ok(Lease::new(c, self, n, now));
        }
        let honor = !cfg.outlier.panics(self.ledger().ejected(now), n);
        let start = (rng() % n.max(1) as u64) as usize;
        (0..n)
            .filter_map(|k| snapshot.get((start + k) % n))
            .filter(|ep| !avoid(ep))
            .map(Candidate::of)
            .find(|c| c.eligible(honor, now))
            .map(|c| Lease::new(c, self, n, now))
            .ok_or(PickError::Empty)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::balance::FailureClass;
    use crate::directory::{DirectoryStatus, EmptyReason};
    use crate::endpoint_set::EndpointSet;
    use crate::model::{ServiceInfo, ServiceInstance};
    use crate::url::ServiceUrl;

    fn snapshot(ports: &[u16]) -> DirectorySnapshot {
        let svc = ServiceInfo::test_service();
        let eps: Vec<Endpoint> = ports
            .iter()
            .map(|p| Arc::new(ServiceUrl::build(&ServiceInstance::new("a", "h", *p), &svc)))
            .collect();
        let status = DirectoryStatus::Empty(EmptyReason::Pending(Default::default()));
        DirectorySnapshot::new(1, status, vec![EndpointSet::from_vec(eps)])
    }

    #[test]
    fn p2c_over_two_never_returns_the_avoided_one() {
        let snap = snapshot(&[1, 2]);
        let bal = DirectoryBalance::new();
        let cfg = BalanceConfig::default();
        let now = Instant::now();
        let mut seed = 1u64;
        let mut rng = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            seed
        };
        let first = bal
            .lease(&snap, Strategy::PeakEwma, &cfg, now, &mut rng)
            .expect("a pick");
        let failed = first.endpoint().clone();
        first.failure(FailureClass::Server);
        for _ in 0..50 {
            let l = bal
                .lease_other(&snap, Strategy::PeakEwma, &cfg, now, &mut rng, |e| {
                    **e == *failed
                })
                .expect("the other one");
            assert_ne!(**l.endpoint(), *failed);
        }
        let none = bal.lease_other(&snap, Strategy::RoundRobin, &cfg, now, &mut rng, |_| true);
        assert_eq!(none.err(), Some(PickError::Empty));
    }
}
