//! Picking the endpoint of an attempt: the first with the directory's
//! strategy (waiting without polling while it has none), a retry's on
//! ANOTHER endpoint than those the call failed on, waiting for one to
//! appear (a publish, or an ejection ending) until the instant the retry
//! policy gives (`CallRetry::other_endpoint_until`).

use std::time::Duration;

use futures::StreamExt;
use steadfast_actors::{Deadline, Directory};
use steadfast_core::{Endpoint, Lease, NoEndpoint, NoEndpointReason};
use tokio::time::Instant;

/// While only failed endpoints are left, look again at least this often
/// (an ejection may end without a publish).
const RECHECK: Duration = Duration::from_millis(50);

/// A lease for the next attempt, avoiding every endpoint in `tried`.
pub(crate) async fn pick<'d>(
    dir: &'d Directory,
    tried: &[Endpoint],
    deadline: Instant,
) -> Result<Lease<'d>, NoEndpoint> {
    if tried.is_empty() {
        return dir.select_ready(Deadline::at(deadline)).await;
    }
    let avoid = |e: &steadfast_core::ServiceUrl| tried.iter().any(|t| **t == *e);
    let mut changes = std::pin::pin!(dir.changes());
    // Bounded by the deadline: each turn waits for a change or RECHECK.
    loop {
        let why = match dir.select_other(avoid) {
            Ok(lease) => return Ok(lease),
            Err(why) => why,
        };
        let now = Instant::now();
        if why.reason == NoEndpointReason::NotSubscribed || now >= deadline {
            return Err(why);
        }
        let wake = now
            .checked_add(RECHECK)
            .map_or(deadline, |t| t.min(deadline));
        if let Ok(None) = tokio::time::timeout_at(wake, changes.next()).await {
            return Err(NoEndpoint::new(NoEndpointReason::NotSubscribed));
        }
    }
}
