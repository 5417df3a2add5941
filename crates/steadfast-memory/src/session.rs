//! The registry-session fault of the [`MemoryRegistry`]:
//! [`MemoryRegistry::lose_session`] plays an etcd lease expiry (or a backend
//! restart that forgot this client).
//!
//! What it does, in order:
//! 1. every record registered through the [`steadfast_core::Registry`] trait
//!    (`register`, not yet `unregister`ed) is removed, and its watchers are
//!    told (one Delta per removal), as etcd tells them of expired keys.
//!    Records put directly with [`MemoryRegistry::put`] /
//!    `set_instances` are NOT removed: a test puts them to play other
//!    clients, whose sessions are not lost;
//! 2. every live watch stream of every app ends (the client must
//!    re-subscribe);
//! 3. `SessionEvent::Lost` is sent on every stream returned by
//!    [`steadfast_core::Registry::sessions`].

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::channel::mpsc;
use futures::StreamExt;
use steadfast_core::{SessionEvent, SessionStream};

use crate::MemoryRegistry;

/// Registrations made through the trait, and the session streams handed out.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    registered: Mutex<BTreeSet<(String, String)>>,
    /// Bounded: a stream whose consumer has a loss still unread gets no
    /// second one (one pending `Lost` already tells it to re-establish).
    streams: Mutex<Vec<mpsc::Sender<SessionEvent>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sessions {
    /// A record registered through the trait.
    pub(crate) fn registered(&self, app: &str, id: &str) {
        lock(&self.registered).insert((app.to_string(), id.to_string()));
    }

    /// A record unregistered through the trait.
    pub(crate) fn unregistered(&self, app: &str, id: &str) {
        lock(&self.registered).remove(&(app.to_string(), id.to_string()));
    }

    /// A new session stream.
    pub(crate) fn stream(&self) -> SessionStream {
        // Room for one event (the channel adds one slot per sender).
        let (tx, rx) = mpsc::channel(0);
        lock(&self.streams).push(tx);
        rx.boxed()
    }
}

impl MemoryRegistry {
    #[cfg(any(test, feature = "faults"))]
    /// Loses this client's session (see the module docs): drops every
    /// record registered through the trait, ends every live watch, and
    /// sends `SessionEvent::Lost` on every session stream. Returns the
    /// number of records dropped.
    pub fn lose_session(&self) -> usize {
        let sessions = &self.inner.sessions;
        let dropped = std::mem::take(&mut *lock(&sessions.registered));
        let mut n = 0;
        for (app, id) in &dropped {
            if self.remove(app, id) {
                n += 1;
            }
        }
        // Tell the session streams before the watches end, as a real backend
        // does (the session is gone first), so a client re-establishes its
        // watches on the session's spread rather than on a watch-end retry.
        let event = SessionEvent::Lost {
            reason: format!("memory registry: session lost, {n} record(s) dropped"),
        };
        lock(&sessions.streams).retain_mut(|tx| match tx.try_send(event.clone()) {
            Ok(()) => true,
            Err(e) => e.is_full(),
        });
        let apps: Vec<String> = self.state().apps.keys().cloned().collect();
        for app in &apps {
            self.end_watches(app);
        }
        tracing::debug!(dropped = n, "memory registry lost the session");
        n
    }

    /// Records registered through the trait and not unregistered (what a
    /// session loss drops).
    pub fn session_records(&self) -> usize {
        lock(&self.inner.sessions.registered).len()
    }
}
