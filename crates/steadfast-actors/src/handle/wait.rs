//! Waiting on a directory without polling: [`Directory::ready`],
//! [`Directory::select_ready`] and [`Directory::changes`]. A waiter sleeps
//! on the directory's change notification (woken by every publish and by
//! the close) and its deadline; on timeout it gets a typed [`NoEndpoint`]
//! naming why the directory serves nothing.
//!
//! Demand-driven re-resolve: while a waiter finds the directory empty
//! because its metadata is unresolved, it asks the directory, once per
//! `min_probe_interval` (read live from the engine's
//! [`CallerConfig`](crate::CallerConfig)), to have its resolvers retry now,
//! and keeps asking every interval while it waits. The directory's
//! [`ProbeThrottle`](steadfast_core::ProbeThrottle) lets one ask through
//! per interval whatever the number of waiters, so a healed metadata
//! service is noticed within one interval instead of the grown backoff.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use steadfast_core::Lease;
use steadfast_core::{DirectorySnapshot, DirectoryStatus, NoEndpoint, NoEndpointReason};
use tokio::time::Instant;

use super::Directory;
use crate::directory_actor::probe;

/// Far enough to mean "no deadline" without ever overflowing an instant.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// When a wait gives up: an instant of the tokio clock (virtual under a
/// paused clock). Build it from a [`Duration`] (from now, computed when the
/// conversion runs), a [`tokio::time::Instant`] or a [`std::time::Instant`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(Instant);

impl Deadline {
    /// `timeout` from now (saturating: an overlong timeout is a very
    /// distant deadline, never an overflow).
    pub fn after(timeout: Duration) -> Self {
        let now = Instant::now();
        let at = now
            .checked_add(timeout)
            .or_else(|| now.checked_add(FAR))
            .unwrap_or(now);
        Self(at)
    }

    /// At `instant`.
    pub fn at(instant: Instant) -> Self {
        Self(instant)
    }

    /// The instant.
    pub fn instant(&self) -> Instant {
        self.0
    }

    /// Whether it has passed at `now`.
    pub fn passed(&self, now: Instant) -> bool {
        now >= self.0
    }
}

impl From<Duration> for Deadline {
    fn from(timeout: Duration) -> Self {
        Self::after(timeout)
    }
}

impl From<Instant> for Deadline {
    fn from(instant: Instant) -> Self {
        Self(instant)
    }
}

impl From<std::time::Instant> for Deadline {
    fn from(instant: std::time::Instant) -> Self {
        Self(Instant::from_std(instant))
    }
}

impl Directory {
    /// Waits until the directory serves at least one endpoint, at most until
    /// `deadline` (a [`Duration`] from now or an instant), woken by each
    /// publish, never polling the actor. Returns the ready snapshot; on
    /// timeout, why the directory serves nothing
    /// ([`NoEndpoint::of_status`] of its status then); at once
    /// `NotSubscribed` when the directory is closed (unsubscribed, shut
    /// down). While its metadata is unresolved, the wait asks for a
    /// demand-driven re-resolve (see the module docs).
    pub async fn ready(
        &self,
        deadline: impl Into<Deadline>,
    ) -> Result<Arc<DirectorySnapshot>, NoEndpoint> {
        let deadline = deadline.into();
        self.wait_until(deadline, |d| {
            let snapshot = d.shared.published.snapshot();
            if snapshot.is_closed() {
                return Err(not_subscribed());
            }
            match NoEndpoint::of_status(snapshot.status()) {
                None => Ok(snapshot),
                Some(why) => Err(why),
            }
        })
        .await
    }

    /// Waits like [`Directory::ready`] and leases one endpoint (see
    /// [`Directory::select`]) as soon as the directory has one to give.
    pub async fn select_ready(
        &self,
        deadline: impl Into<Deadline>,
    ) -> Result<Lease<'_>, NoEndpoint> {
        let deadline = deadline.into();
        self.wait_until(deadline, Self::select).await
    }

    /// A stream of `(version, status)`: the current one first, then each
    /// change. Latest wins: a consumer slower than the changes sees the
    /// newest state, never a backlog (nothing is queued). It ends when the
    /// directory closes. The stream holds a handle of the directory (so it
    /// keeps the engine running, see [`Directory`]'s lifetime).
    pub fn changes(&self) -> impl Stream<Item = (u64, DirectoryStatus)> + Send + 'static {
        let dir = self.clone();
        futures::stream::unfold((dir, None), |(dir, last)| async move {
            let item = dir.next_change(last).await?;
            let version = item.0;
            Some((item, (dir, Some(version))))
        })
    }

    /// The first state whose version differs from `last`, or `None` once
    /// the directory is closed.
    async fn next_change(&self, last: Option<u64>) -> Option<(u64, DirectoryStatus)> {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a publish in between wakes us.
            changed.as_mut().enable();
            let snapshot = self.shared.published.snapshot();
            if snapshot.is_closed() {
                return None;
            }
            if last != Some(snapshot.version()) {
                return Some((snapshot.version(), snapshot.status().clone()));
            }
            changed.await;
        }
    }

    /// Runs `attempt` now and after every publish until it succeeds, the
    /// directory closes, or `deadline` passes (then its last refusal). While
    /// the refusal is unresolved metadata, asks for a demand probe every
    /// `min_probe_interval`; while it is a state that time alone may end
    /// (every endpoint ejected), looks again every interval as well.
    async fn wait_until<'s, T>(
        &'s self,
        deadline: Deadline,
        attempt: impl Fn(&'s Self) -> Result<T, NoEndpoint>,
    ) -> Result<T, NoEndpoint> {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            // Registered before the attempt, so a publish in between wakes us.
            changed.as_mut().enable();
            let why = match attempt(self) {
                Ok(t) => return Ok(t),
                Err(why) => why,
            };
            let now = Instant::now();
            if why.reason == NoEndpointReason::NotSubscribed || deadline.passed(now) {
                return Err(why);
            }
            let mut wake = deadline.instant();
            let recheck = match why.reason {
                NoEndpointReason::MetadataUnresolved(_) => {
                    probe::demand(&self.shared, &self.addr, now.into_std());
                    true
                }
                NoEndpointReason::AllEjected { .. } => true,
                _ => false,
            };
            if recheck {
                let interval = self.shared.probe_interval();
                if let Some(next) = now.checked_add(interval) {
                    wake = wake.min(next);
                }
            }
            // Woken by a publish, the next probe, or the deadline.
            let _ = tokio::time::timeout_at(wake, changed).await;
        }
    }
}

fn not_subscribed() -> NoEndpoint {
    NoEndpoint::new(NoEndpointReason::NotSubscribed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_from_durations_and_instants_never_overflow() {
        let now = Instant::now();
        let d = Deadline::from(Duration::from_millis(250));
        assert!(d.instant() >= now + Duration::from_millis(250));
        assert!(!d.passed(now));
        assert!(d.passed(now + Duration::from_secs(1)));
        let far = Deadline::from(Duration::MAX);
        assert!(far.instant() > now + Duration::from_secs(3600 * 24 * 365));
        assert_eq!(Deadline::from(now), Deadline::at(now));
        assert_eq!(Deadline::from(now.into_std()), Deadline::at(now));
        assert!(
            Deadline::at(now).passed(now),
            "a deadline of now has passed"
        );
    }
}
