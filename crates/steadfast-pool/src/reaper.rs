//! The reaper task: idle scans every `scan_interval` (each candidate
//! re-checked just before its close, closes one by one, a failure never
//! stops the round) and forced closes at drain deadlines (each its own
//! task, so a hanging close delays no other).

use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::pool::{now, Inner};
use crate::{ClientFactory, MIN_SCAN_INTERVAL};

/// Stops the reaper when the last pool handle drops.
pub(crate) struct ReaperGuard(tokio::task::JoinHandle<()>);

impl Drop for ReaperGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Spawns the reaper of `inner` on the pool's runtime.
pub(crate) fn spawn<F: ClientFactory>(inner: &Arc<Inner<F>>) -> ReaperGuard {
    let weak = Arc::downgrade(inner);
    ReaperGuard(inner.runtime.spawn(run(weak)))
}

async fn run<F: ClientFactory>(weak: Weak<Inner<F>>) {
    let Some(interval) = weak
        .upgrade()
        .map(|i| i.config.scan_interval.max(MIN_SCAN_INTERVAL))
    else {
        return;
    };
    let mut next_scan = later(now(), interval);
    loop {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let deadline = inner.each_stripe().filter_map(|m| m.next_deadline()).min();
        let wake_at = match (next_scan, deadline) {
            (Some(s), Some(d)) => Some(s.min(d)),
            (s, d) => s.or(d),
        };
        let notified = inner.wake.notified();
        match wake_at {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = notified => {}
                }
            }
            None => notified.await,
        }
        // Forced closes run side by side (each bounded by close_timeout),
        // so one hanging close never delays another drain deadline.
        let t = now();
        let forced: Vec<_> = inner
            .each_stripe()
            .flat_map(|mut m| m.poll_deadlines(t))
            .collect();
        for close in forced {
            inner.spawn_closes(vec![close]);
        }
        let at = now();
        if next_scan.is_some_and(|s| s <= at) {
            reap_round(&inner).await;
            next_scan = later(at, interval);
        }
    }
}

fn later(at: Instant, by: std::time::Duration) -> Option<Instant> {
    at.checked_add(by)
}

/// One idle scan: candidates closed one by one, each re-checked just before
/// its close (a client used meanwhile is kept); a failed close is counted
/// and the round goes on.
pub(crate) async fn reap_round<F: ClientFactory>(inner: &Inner<F>) {
    let t = now();
    let candidates: Vec<(usize, _)> = inner
        .each_stripe()
        .enumerate()
        .flat_map(|(at, m)| m.scan(t).into_iter().map(move |id| (at, id)))
        .collect();
    for (at, id) in candidates {
        let close = inner.lock_stripe(at).begin_close(id, now());
        match close {
            // A failure was logged and counted; the round goes on.
            Some(close) => {
                let _ok = inner.perform_close(close).await;
            }
            None => tracing::debug!(client = ?id, "pool: idle candidate used again, kept"),
        }
    }
}
