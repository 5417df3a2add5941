//! Tracks requests in flight on an exported provider so a graceful
//! shutdown can drain them; once closing, new requests are refused.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Inner {
    count: AtomicUsize,
    closing: AtomicBool,
    idle: Notify,
}

/// Shared in-flight counter of one export. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct InFlight {
    inner: Arc<Inner>,
}

/// Held while one request runs; dropping it ends the request.
#[derive(Debug)]
pub struct InFlightGuard {
    inner: Arc<Inner>,
}

impl InFlight {
    /// A tracker with no request in flight, not closing. Hand it to the
    /// provider's server and to [`crate::ExportSpec::in_flight`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a request, or `None` once the export is closing (answer it
    /// with a retryable "closing" error so the caller picks another endpoint).
    pub fn enter(&self) -> Option<InFlightGuard> {
        if self.inner.closing.load(Ordering::SeqCst) {
            return None;
        }
        self.inner.count.fetch_add(1, Ordering::SeqCst);
        if self.inner.closing.load(Ordering::SeqCst) {
            drop(InFlightGuard {
                inner: self.inner.clone(),
            });
            return None;
        }
        Some(InFlightGuard {
            inner: self.inner.clone(),
        })
    }

    /// Requests running now.
    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::SeqCst)
    }

    /// Whether new requests are refused.
    pub fn is_closing(&self) -> bool {
        self.inner.closing.load(Ordering::SeqCst)
    }

    pub(crate) fn close(&self) {
        self.inner.closing.store(true, Ordering::SeqCst);
    }

    /// Waits until no request runs, at most `limit`. True when drained.
    pub async fn drained(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.inner.idle.notified();
                if self.count() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.inner.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.inner.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drains_running_requests_and_refuses_new_ones_when_closing() {
        let f = InFlight::default();
        let g = f.enter().unwrap();
        f.close();
        assert!(f.enter().is_none());
        assert!(!f.drained(Duration::from_millis(100)).await);
        let f2 = f.clone();
        let h = tokio::spawn(async move { f2.drained(Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        drop(g);
        assert!(h.await.unwrap());
        assert_eq!(f.count(), 0);
    }
}
