//! [`Faulty`]: a metadata fetcher whose calls a test scripts per revision —
//! hang the first n calls, hang every call, fail every call at once, or
//! panic on the next calls (at the call or while polled) — and counts them
//! per revision and per instance.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::{self, BoxFuture, FutureExt};
use steadfast::{FetchError, MetadataFetcher, MetadataInfo, ServiceInstance};

#[derive(Default)]
struct Script {
    served: HashMap<String, MetadataInfo>,
    hang_first: HashMap<String, usize>,
    hang_all: HashSet<String>,
    fail_all: HashSet<String>,
    /// Panics left, and whether they happen inside the future.
    panics: (usize, bool),
    calls: HashMap<String, usize>,
    calls_to: HashMap<String, usize>,
    total: usize,
}

/// A scriptable fetcher; clones share the script.
#[derive(Clone, Default)]
pub struct Faulty(Arc<Mutex<Script>>);

impl Faulty {
    fn lock(&self) -> MutexGuard<'_, Script> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `info` for its revision.
    pub fn serve(&self, info: &MetadataInfo) {
        self.lock()
            .served
            .insert(info.revision.clone(), info.clone());
    }

    /// The next `n` calls for `revision` hang for ever.
    pub fn hang_first(&self, revision: &str, n: usize) {
        self.lock().hang_first.insert(revision.to_string(), n);
    }

    /// Every call for `revision` hangs for ever.
    pub fn hang_all(&self, revision: &str) {
        self.lock().hang_all.insert(revision.to_string());
    }

    /// Every call for `revision` fails at once (connection refused).
    pub fn fail_all(&self, revision: &str) {
        self.lock().fail_all.insert(revision.to_string());
    }

    /// The next `n` calls panic: inside the returned future when
    /// `in_future`, else in the call itself.
    pub fn panic_next(&self, n: usize, in_future: bool) {
        self.lock().panics = (n, in_future);
    }

    /// Calls for `revision` so far.
    pub fn calls(&self, revision: &str) -> usize {
        self.lock().calls.get(revision).copied().unwrap_or(0)
    }

    /// Calls to instance `id` so far.
    pub fn calls_to(&self, id: &str) -> usize {
        self.lock().calls_to.get(id).copied().unwrap_or(0)
    }

    /// All calls so far.
    pub fn total(&self) -> usize {
        self.lock().total
    }
}

impl MetadataFetcher for Faulty {
    fn fetch(
        &self,
        instance: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        let mut s = self.lock();
        *s.calls.entry(revision.to_string()).or_default() += 1;
        *s.calls_to.entry(instance.id.clone()).or_default() += 1;
        s.total += 1;
        if s.panics.0 > 0 {
            s.panics.0 -= 1;
            let in_future = s.panics.1;
            drop(s);
            if in_future {
                return async { panic!("scripted panic while polled") }.boxed();
            }
            panic!("scripted panic at the call");
        }
        let hang_first = s.hang_first.get_mut(revision).filter(|n| **n > 0);
        let hang = match hang_first {
            Some(n) => {
                *n -= 1;
                true
            }
            None => s.hang_all.contains(revision),
        };
        if hang {
            return future::pending().boxed();
        }
        if s.fail_all.contains(revision) {
            return future::ready(Err(FetchError::Unreachable("refused".into()))).boxed();
        }
        let r = s
            .served
            .get(revision)
            .cloned()
            .ok_or_else(|| FetchError::UnknownRevision(revision.to_string()));
        future::ready(r).boxed()
    }
}
