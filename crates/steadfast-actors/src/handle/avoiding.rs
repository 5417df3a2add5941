//! [`Directory::select_other`]: a lock-free pick that avoids the endpoints
//! a call already failed on, so that its retry goes to ANOTHER endpoint.

use steadfast_core::{Lease, NoEndpoint, NoEndpointReason, ServiceUrl};

use super::lease::{no_endpoint, now};
use super::Directory;

impl Directory {
    /// Picks like [`Directory::select`], but never an endpoint for which
    /// `avoid` is true (e.g. the ones a call already failed on): the
    /// strategy's pick when it is not avoided, else the first eligible
    /// other endpoint (an O(n) scan; meant for retries). `Err` when no other
    /// endpoint may take traffic now: the directory's reason, or
    /// `NotServing` when only avoided endpoints are left.
    pub fn select_other(
        &self,
        avoid: impl Fn(&ServiceUrl) -> bool,
    ) -> Result<Lease<'_>, NoEndpoint> {
        let now = now();
        let cfg = self.shared.config.balance();
        let balance = &self.shared.balance;
        let strategy = balance.strategy().unwrap_or(cfg.strategy);
        self.shared.published.read(|snapshot| {
            if snapshot.is_closed() {
                return Err(NoEndpoint::new(NoEndpointReason::NotSubscribed));
            }
            let mut rng = crate::random::thread_random;
            balance
                .lease_other(snapshot, strategy, &cfg, now, &mut rng, |e| avoid(e))
                .map_err(|e| no_endpoint(e, snapshot))
        })
    }
}
