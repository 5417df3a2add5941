//! [`ScriptedFetcher`]: a [`MetadataFetcher`] that serves metadata from a
//! table and fails, or hangs, exactly when a test says so.
//!
//! How one `fetch(instance, revision)` plays out:
//!
//! 1. At the call, the fetch is counted (per revision, per instance id, in
//!    total) and becomes in flight.
//! 2. If the revision is blocked at the call, the returned future hangs until
//!    [`ScriptedFetcher::release`]; it is cancel-safe (dropping it just
//!    withdraws the fetch).
//! 3. The script is then consulted, first match wins: instance failed
//!    ([`ScriptedFetcher::fail_instance`], no fail-next budget is spent),
//!    fail-next budget of the revision, persistent failure of the revision,
//!    served metadata, else [`FetchError::UnknownRevision`]. An unblocked
//!    fetch consults it at the call; a blocked one when it resumes.
//!
//! The served metadata is returned as is, even when its app differs from the
//! instance's, so mismatches can be tested with
//! [`ScriptedFetcher::serve_under`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::{BoxFuture, FutureExt};
use steadfast_core::{FetchError, MetadataFetcher, MetadataInfo, ServiceInstance};
use tokio::sync::Notify;

/// The error scripted failures return unless told otherwise:
/// `FetchError::Unreachable("scripted")`.
pub fn scripted_error() -> FetchError {
    FetchError::Unreachable("scripted".to_string())
}

/// One active block of a revision.
#[derive(Debug)]
struct Block {
    /// Distinguishes this block from earlier/later blocks of the revision.
    epoch: u64,
    /// Fetches currently waiting at this block.
    waiting: usize,
}

/// The mutable script and counters.
#[derive(Debug, Default)]
struct Script {
    served: HashMap<String, MetadataInfo>,
    fail_next: HashMap<String, (usize, FetchError)>,
    fail_always: HashMap<String, FetchError>,
    failed_instances: HashSet<String>,
    blocks: HashMap<String, Block>,
    next_epoch: u64,
    calls: HashMap<String, usize>,
    calls_to: HashMap<String, usize>,
    total_calls: usize,
    in_flight: usize,
    /// Upcoming calls per revision that never answer.
    hang_next: HashMap<String, usize>,
    /// Upcoming calls that panic, and whether inside the future.
    panics: (usize, bool),
}

impl Script {
    /// The outcome of a fetch that is past any block.
    fn resolve(&mut self, instance_id: &str, revision: &str) -> Result<MetadataInfo, FetchError> {
        if self.failed_instances.contains(instance_id) {
            return Err(scripted_error());
        }
        if let Some((n, err)) = self.fail_next.get_mut(revision) {
            if *n > 0 {
                *n -= 1;
                return Err(err.clone());
            }
        }
        if let Some(err) = self.fail_always.get(revision) {
            return Err(err.clone());
        }
        self.served
            .get(revision)
            .cloned()
            .ok_or_else(|| FetchError::UnknownRevision(revision.to_string()))
    }
}

/// Shared state of every clone of one fetcher.
#[derive(Debug, Default)]
struct Inner {
    script: Mutex<Script>,
    /// Woken on every release so blocked fetches re-check their block.
    released: Notify,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts a fetch as in flight until dropped.
struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().in_flight -= 1;
    }
}

/// Counts a fetch as waiting at block `epoch` of `revision` until dropped
/// (or until that block is released, whichever comes first).
struct Waiting {
    inner: Arc<Inner>,
    revision: String,
    epoch: u64,
}

impl Waiting {
    fn still_blocked(&self) -> bool {
        self.inner
            .lock()
            .blocks
            .get(&self.revision)
            .is_some_and(|b| b.epoch == self.epoch)
    }

    /// Resolves once this fetch's block is released. Cancel-safe.
    async fn until_released(&self) {
        loop {
            let notified = self.inner.released.notified();
            futures::pin_mut!(notified);
            // Register interest before checking, so no release is missed.
            notified.as_mut().enable();
            if !self.still_blocked() {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut script = self.inner.lock();
        if let Some(block) = script.blocks.get_mut(&self.revision) {
            if block.epoch == self.epoch {
                block.waiting -= 1;
            }
        }
    }
}

/// A scriptable [`MetadataFetcher`]; cheap to clone, clones share the script.
#[derive(Clone, Debug, Default)]
pub struct ScriptedFetcher {
    inner: Arc<Inner>,
}

impl ScriptedFetcher {
    /// Creates a fetcher serving nothing.
    pub fn new() -> Self {
        Self::default()
    }

    // ----- the table -------------------------------------------------------

    /// Serves `info` for `info.revision` (replacing what was served).
    pub fn serve(&self, info: MetadataInfo) {
        let revision = info.revision.clone();
        self.serve_under(&revision, info);
    }

    /// Serves `info` for `revision`, whatever `info.revision` says (to test
    /// mismatched answers).
    pub fn serve_under(&self, revision: &str, info: MetadataInfo) {
        self.inner.lock().served.insert(revision.to_string(), info);
    }

    /// Stops serving `revision`: later fetches get `UnknownRevision`.
    pub fn forget(&self, revision: &str) {
        self.inner.lock().served.remove(revision);
    }

    // ----- failures --------------------------------------------------------

    /// Makes the next `n` fetches of `revision` fail with [`scripted_error`]
    /// (replaces any remaining budget; 0 cancels it).
    pub fn fail_next(&self, revision: &str, n: usize) {
        self.fail_next_with(revision, n, scripted_error());
    }

    /// Makes the next `n` fetches of `revision` fail with `error` (replaces
    /// any remaining budget; 0 cancels it).
    pub fn fail_next_with(&self, revision: &str, n: usize, error: FetchError) {
        self.inner
            .lock()
            .fail_next
            .insert(revision.to_string(), (n, error));
    }

    /// Makes every fetch of `revision` fail with [`scripted_error`] until
    /// [`heal`](Self::heal).
    pub fn fail_always(&self, revision: &str) {
        self.fail_always_with(revision, scripted_error());
    }

    /// Makes every fetch of `revision` fail with `error` until
    /// [`heal`](Self::heal).
    pub fn fail_always_with(&self, revision: &str, error: FetchError) {
        self.inner
            .lock()
            .fail_always
            .insert(revision.to_string(), error);
    }

    /// Ends the persistent failure of `revision` (fail-next budgets stay).
    pub fn heal(&self, revision: &str) {
        self.inner.lock().fail_always.remove(revision);
    }

    /// Makes every fetch from instance `instance_id` fail with
    /// [`scripted_error`] until [`heal_instance`](Self::heal_instance).
    pub fn fail_instance(&self, instance_id: &str) {
        self.inner
            .lock()
            .failed_instances
            .insert(instance_id.to_string());
    }

    /// Ends the failure of instance `instance_id`.
    pub fn heal_instance(&self, instance_id: &str) {
        self.inner.lock().failed_instances.remove(instance_id);
    }

    // ----- blocking --------------------------------------------------------

    /// Makes fetches of `revision` called from now on hang until
    /// [`release`](Self::release). Blocking an already blocked revision
    /// changes nothing.
    pub fn block(&self, revision: &str) {
        let mut script = self.inner.lock();
        let epoch = script.next_epoch;
        if let std::collections::hash_map::Entry::Vacant(slot) =
            script.blocks.entry(revision.to_string())
        {
            slot.insert(Block { epoch, waiting: 0 });
            script.next_epoch += 1;
        }
    }

    /// Lets every fetch waiting at the block of `revision` proceed and stops
    /// blocking new ones.
    pub fn release(&self, revision: &str) {
        if self.inner.lock().blocks.remove(revision).is_some() {
            self.inner.released.notify_waiters();
        }
    }

    /// Releases every blocked revision.
    pub fn release_all(&self) {
        self.inner.lock().blocks.clear();
        self.inner.released.notify_waiters();
    }

    /// Fetches currently waiting at the block of `revision` (dropped ones
    /// and released ones are not counted).
    pub fn blocked_now(&self, revision: &str) -> usize {
        self.inner
            .lock()
            .blocks
            .get(revision)
            .map_or(0, |b| b.waiting)
    }

    // ----- counters --------------------------------------------------------

    /// Fetches of `revision` so far (whatever their outcome).
    pub fn calls(&self, revision: &str) -> usize {
        self.inner.lock().calls.get(revision).copied().unwrap_or(0)
    }

    /// Fetches from instance `instance_id` so far (whatever their outcome).
    pub fn calls_to(&self, instance_id: &str) -> usize {
        self.inner
            .lock()
            .calls_to
            .get(instance_id)
            .copied()
            .unwrap_or(0)
    }

    /// All fetches so far.
    pub fn total_calls(&self) -> usize {
        self.inner.lock().total_calls
    }

    /// The next `n` calls for `revision` never answer (a hung provider);
    /// the engine's deadline ends them.
    pub fn hang_next(&self, revision: &str, n: usize) {
        self.inner.lock().hang_next.insert(revision.to_string(), n);
    }

    /// The next `n` calls panic (user code gone wrong): inside the returned
    /// future when `while_polled`, else in the call itself.
    pub fn panic_next(&self, n: usize, while_polled: bool) {
        self.inner.lock().panics = (n, while_polled);
    }

    /// Fetches started and neither finished nor dropped.
    pub fn in_flight(&self) -> usize {
        self.inner.lock().in_flight
    }
}

impl MetadataFetcher for ScriptedFetcher {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let inner = Arc::clone(&self.inner);
        let mut script = inner.lock();
        *script.calls.entry(revision.to_string()).or_default() += 1;
        *script.calls_to.entry(instance.id.clone()).or_default() += 1;
        script.total_calls += 1;
        if script.panics.0 > 0 {
            script.panics.0 -= 1;
            let while_polled = script.panics.1;
            drop(script);
            if while_polled {
                return async { panic!("scripted panic while polled") }.boxed();
            }
            panic!("scripted panic at the call");
        }
        script.in_flight += 1;
        let in_flight = InFlight(Arc::clone(&inner));
        if let Some(n) = script.hang_next.get_mut(revision).filter(|n| **n > 0) {
            *n -= 1;
            drop(script);
            return async move {
                let _in_flight = in_flight;
                futures::future::pending().await
            }
            .boxed();
        }

        let Some(block) = script.blocks.get_mut(revision) else {
            let result = script.resolve(&instance.id, revision);
            drop(script);
            return async move {
                drop(in_flight);
                result
            }
            .boxed();
        };
        block.waiting += 1;
        let waiting = Waiting {
            inner: Arc::clone(&inner),
            revision: revision.to_string(),
            epoch: block.epoch,
        };
        drop(script);
        let instance_id = instance.id.clone();
        async move {
            waiting.until_released().await;
            let revision = waiting.revision.clone();
            drop(waiting);
            // Release the lock before the in-flight guard takes it again.
            let result = inner.lock().resolve(&instance_id, &revision);
            drop(in_flight);
            result
        }
        .boxed()
    }
}

/// Publishing into a scripted fetcher serves the metadata, as a provider's
/// own MetadataService would; withdrawing forgets it.
impl steadfast_core::MetadataPublisher for ScriptedFetcher {
    fn publish(
        &self,
        info: MetadataInfo,
    ) -> futures::future::BoxFuture<'static, Result<(), steadfast_core::PublishError>> {
        self.serve(info);
        Box::pin(async { Ok(()) })
    }

    fn withdraw(
        &self,
        _app: &str,
        revision: &str,
    ) -> futures::future::BoxFuture<'static, Result<(), steadfast_core::PublishError>> {
        self.forget(revision);
        Box::pin(async { Ok(()) })
    }
}
