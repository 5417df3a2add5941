//! Lifetimes of an engine's subscriptions, as a sans-IO machine: which
//! references are subscribed and how often, which provider apps need a
//! resolver (one per app, counted by the references that name it and by the
//! mapping followers attached to it), which interfaces need a mapping
//! follower, which handle hold is each reference's current one, when a
//! reference whose handles are all gone is unsubscribed (its linger), and
//! whether the engine is shut down. The coordinator actor asks it before
//! it starts or stops any actor and performs what it answers; time is an
//! input, with one [`Lifetimes::poll_timeout`] / [`Lifetimes::handle_timeout`]
//! pair for the lingers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::keys::Reference;

/// Why the machine refused a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LifetimeRefused {
    /// The engine is shut down.
    #[error("the engine is shut down")]
    ShutDown,
    /// The reference names no app and no interface: nothing to follow.
    #[error("{0} names no provider app and no interface")]
    NoProviderApps(String),
    /// The reference is not subscribed.
    #[error("{0} is not subscribed")]
    NotSubscribed(String),
}

/// The answer to [`Lifetimes::subscribe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscribeOutcome {
    /// A new subscription: start its directory with the handle hold
    /// `hold`, after starting a resolver for each of `start_resolvers` (the
    /// reference's apps no other subscription needed) and, when `follow`
    /// names an interface, its mapping follower.
    New {
        /// Apps whose resolver must start now.
        start_resolvers: Vec<String>,
        /// The interface whose mapping follower must start now.
        follow: Option<String>,
        /// Number of the handles' hold.
        hold: u64,
    },
    /// The reference was subscribed already (any linger is cancelled): hand
    /// out a handle on the live hold, or on a new hold numbered `Some(n)`
    /// when every handle of it was dropped.
    Again {
        /// Number of the new hold, when one is needed.
        new_hold: Option<u64>,
    },
}

/// A subscription that ended: stop its directory, then the resolvers and
/// the mapping follower no one needs any more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// The reference unsubscribed.
    pub reference: Reference,
    /// Apps whose resolver must stop now.
    pub stop_resolvers: Vec<String>,
    /// The interface whose mapping follower must stop now.
    pub unfollow: Option<String>,
}

/// One subscribed reference.
#[derive(Debug)]
struct RefLife {
    /// `subscribe` calls not yet unsubscribed.
    subscriptions: usize,
    /// Number of the current handle hold.
    hold: u64,
    /// When the reference is unsubscribed, set while no handle of it lives.
    linger_until: Option<Instant>,
    /// Apps attached through the interface's mapping (references without
    /// apps), each holding one count on its resolver.
    mapped: BTreeSet<String>,
}

/// The subscriptions of one engine (see the module docs).
#[derive(Debug, Default)]
pub struct Lifetimes {
    shut_down: bool,
    refs: HashMap<Reference, RefLife>,
    /// Counted needs of each app's resolver.
    resolvers: BTreeMap<String, usize>,
    /// Counted followers of each interface's mapping.
    interfaces: BTreeMap<String, usize>,
    next_hold: u64,
}

impl Lifetimes {
    /// No subscription yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the engine is shut down.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Whether `reference` is subscribed.
    pub fn is_subscribed(&self, reference: &Reference) -> bool {
        self.refs.contains_key(reference)
    }

    /// The apps whose resolver is needed now.
    pub fn resolvers(&self) -> impl Iterator<Item = &str> {
        self.resolvers.keys().map(String::as_str)
    }

    /// Subscribes `reference` once more. `hold_alive`: whether a handle of
    /// its current hold still exists (the shell knows; it is ignored for a
    /// new subscription).
    pub fn subscribe(
        &mut self,
        reference: &Reference,
        hold_alive: bool,
    ) -> Result<SubscribeOutcome, LifetimeRefused> {
        if self.shut_down {
            return Err(LifetimeRefused::ShutDown);
        }
        if reference.apps.is_empty() && reference.interface.is_empty() {
            return Err(LifetimeRefused::NoProviderApps(reference.subscribe_key()));
        }
        let next = self.next_hold.wrapping_add(1);
        if let Some(r) = self.refs.get_mut(reference) {
            r.subscriptions = r.subscriptions.saturating_add(1);
            r.linger_until = None;
            if hold_alive {
                return Ok(SubscribeOutcome::Again { new_hold: None });
            }
            self.next_hold = next;
            r.hold = next;
            return Ok(SubscribeOutcome::Again {
                new_hold: Some(next),
            });
        }
        self.next_hold = next;
        let start_resolvers = reference
            .apps
            .iter()
            .filter(|app| Self::take(&mut self.resolvers, app))
            .cloned()
            .collect();
        let follow = (reference.apps.is_empty()
            && Self::take(&mut self.interfaces, &reference.interface))
        .then(|| reference.interface.clone());
        self.refs.insert(
            reference.clone(),
            RefLife {
                subscriptions: 1,
                hold: next,
                linger_until: None,
                mapped: BTreeSet::new(),
            },
        );
        Ok(SubscribeOutcome::New {
            start_resolvers,
            follow,
            hold: next,
        })
    }

    /// Ends one subscription of `reference`; the last one releases it.
    pub fn unsubscribe(
        &mut self,
        reference: &Reference,
    ) -> Result<Option<Released>, LifetimeRefused> {
        if self.shut_down {
            return Err(LifetimeRefused::ShutDown);
        }
        let Some(r) = self.refs.get_mut(reference) else {
            return Err(LifetimeRefused::NotSubscribed(reference.subscribe_key()));
        };
        r.subscriptions = r.subscriptions.saturating_sub(1);
        if r.subscriptions > 0 {
            return Ok(None);
        }
        Ok(self.release(reference))
    }

    /// Every handle of hold `hold` of `reference` was dropped at `now`: the
    /// reference is unsubscribed after `linger` unless it is subscribed
    /// again by then (no linger: it stays until unsubscribed). A hold that
    /// is not the current one is ignored, and so is a linger already
    /// running (its deadline stands: a shell restart reports every dead
    /// hold again).
    pub fn handles_dropped(
        &mut self,
        reference: &Reference,
        hold: u64,
        now: Instant,
        linger: Option<Duration>,
    ) {
        if self.shut_down {
            return;
        }
        let (Some(r), Some(linger)) = (self.refs.get_mut(reference), linger) else {
            return;
        };
        if r.hold == hold && r.linger_until.is_none() {
            // A linger past the clock's range never ends.
            r.linger_until = now.checked_add(linger);
        }
    }

    /// When [`Lifetimes::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.refs.values().filter_map(|r| r.linger_until).min()
    }

    /// The lingers that ran out by `now`: each reference is released.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Released> {
        let mut due: Vec<Reference> = self
            .refs
            .iter()
            .filter(|(_, r)| r.linger_until.is_some_and(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect();
        due.sort_by_key(Reference::subscribe_key);
        due.iter().filter_map(|r| self.release(r)).collect()
    }

    /// The mapping of a followed reference lists `app`: attach it (once).
    /// `Some(start)`: attach, after starting its resolver when `start`.
    pub fn attach_mapped(&mut self, reference: &Reference, app: &str) -> Option<bool> {
        if self.shut_down {
            return None;
        }
        let r = self.refs.get_mut(reference)?;
        if !reference.apps.is_empty() || !r.mapped.insert(app.to_string()) {
            return None;
        }
        Some(Self::take(&mut self.resolvers, app))
    }

    /// The attach of `app` to `reference` failed (its resolver could not
    /// start): forget it, so the next mapping event tries again.
    pub fn attach_failed(&mut self, reference: &Reference, app: &str) {
        if let Some(r) = self.refs.get_mut(reference) {
            if r.mapped.remove(app) {
                Self::give(&mut self.resolvers, app);
            }
        }
    }

    /// The mapping of a followed reference no longer lists `app`.
    /// `Some(stop)`: detach it, then stop its resolver when `stop`.
    pub fn detach_mapped(&mut self, reference: &Reference, app: &str) -> Option<bool> {
        let r = self.refs.get_mut(reference)?;
        if !r.mapped.remove(app) {
            return None;
        }
        Some(Self::give(&mut self.resolvers, app))
    }

    /// The apps attached to `reference` through its mapping.
    pub fn mapped(&self, reference: &Reference) -> impl Iterator<Item = &str> {
        self.refs
            .get(reference)
            .into_iter()
            .flat_map(|r| r.mapped.iter().map(String::as_str))
    }

    /// The references following `interface`'s mapping.
    pub fn followers<'a>(&'a self, interface: &'a str) -> impl Iterator<Item = &'a Reference> {
        self.refs
            .keys()
            .filter(move |r| r.apps.is_empty() && r.interface == interface)
    }

    /// Shuts down: every later call is refused and every count dropped
    /// (the shell stops every actor). True the first time.
    pub fn shut_down(&mut self) -> bool {
        let first = !self.shut_down;
        self.shut_down = true;
        self.refs.clear();
        self.resolvers.clear();
        self.interfaces.clear();
        first
    }

    fn release(&mut self, reference: &Reference) -> Option<Released> {
        let r = self.refs.remove(reference)?;
        let stop_resolvers = reference
            .apps
            .iter()
            .chain(r.mapped.iter())
            .filter(|app| Self::give(&mut self.resolvers, app))
            .cloned()
            .collect();
        let unfollow = (reference.apps.is_empty()
            && Self::give(&mut self.interfaces, &reference.interface))
        .then(|| reference.interface.clone());
        Some(Released {
            reference: reference.clone(),
            stop_resolvers,
            unfollow,
        })
    }

    /// Takes one count on `key`; true when it is the first.
    fn take(counts: &mut BTreeMap<String, usize>, key: &str) -> bool {
        let n = counts.entry(key.to_string()).or_default();
        *n = n.saturating_add(1);
        *n == 1
    }

    /// Gives one count on `key` back; true when it was the last.
    fn give(counts: &mut BTreeMap<String, usize>, key: &str) -> bool {
        let Some(n) = counts.get_mut(key) else {
            return false;
        };
        *n = n.saturating_sub(1);
        if *n > 0 {
            return false;
        }
        counts.remove(key);
        true
    }
}

#[cfg(test)]
mod tests;
