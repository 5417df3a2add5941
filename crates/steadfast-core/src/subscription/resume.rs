//! Restart clean: a subscription machine whose actor panicked is not
//! repaired, it is replaced. The new machine starts from its inputs (the
//! config, the seed, the subscribers the shell holds) and takes over, in a
//! [`SubscriptionResume`], only what the subscribers were handed and what
//! the registry cannot tell again:
//! - each app's registry state and version as last delivered, and the
//!   version of that delivery (the resolvers hold it; the new machine's
//!   deliveries come after it);
//! - the stale mark and the failing subscribe (an outage under way is still
//!   the same one: its start and its attempts are what the directories
//!   show);
//! - the mass-expiry hold (the held instances with their deadlines, and the
//!   recovery window): a registry that expired every lease while frozen does
//!   not list them again, so a replacement that dropped them would flap the
//!   directories to empty;
//! - the next token (no answer meant for the old machine matches a new call).
//!
//! Everything else starts over: watches, resyncs, timers, backoffs (the
//! next re-open is at once, then 1 s, 2 s...), gap asks. Every watch is opened again, and each app's next delivery is its
//! whole state, so whatever the panic left half-written in the old machine
//! is replaced by what the registry says as soon as it answers. Until then
//! subscribers keep what they hold (nothing is delivered but a hold's end).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use super::hold::Hold;
use super::state::AppSub;
use super::{SubscriptionAction, SubscriptionMachine};
use crate::change::Version;
use crate::instance::Instance;
use crate::pending::RegistryFailure;
use crate::resolver::Token;

/// What a replacement subscription machine takes over from the one it
/// replaces ([`SubscriptionMachine::resume_point`],
/// [`SubscriptionMachine::resume`]).
#[derive(Clone, Debug, Default)]
pub struct SubscriptionResume {
    apps: BTreeMap<String, Carried>,
    next_token: Token,
    last_event: Option<Instant>,
}

impl SubscriptionResume {
    /// Apps carried over.
    pub fn apps(&self) -> impl Iterator<Item = &str> {
        self.apps.keys().map(String::as_str)
    }
}

/// One app's part of a [`SubscriptionResume`].
#[derive(Clone, Debug, Default)]
pub(super) struct Carried {
    /// Version of the registry state held.
    pub(super) version: Option<Version>,
    /// The registry's instances at it, in registry order.
    pub(super) instances: Vec<Arc<Instance>>,
    /// Version of the latest delivery.
    pub(super) out: Option<Version>,
    pub(super) stale_since: Option<Instant>,
    /// The failing subscribe the subscribers were told of (since when,
    /// attempts, last error): the same failure, not a new one.
    pub(super) failing: Option<RegistryFailure>,
    pub(super) hold: Hold,
}

impl SubscriptionMachine {
    /// What a replacement of this machine takes over (see the module docs).
    pub fn resume_point(&self) -> SubscriptionResume {
        SubscriptionResume {
            apps: self
                .apps
                .iter()
                .map(|(app, sub)| (app.clone(), sub.carry()))
                .collect(),
            next_token: self.next_token,
            last_event: self.last_event,
        }
    }

    /// This (new) machine replaces one that stopped at `point`, for the
    /// `subscribers` (`(app, id)`) the shell holds: every app is subscribed
    /// again from what it carries (an app the point does not carry starts
    /// fresh, one without subscriber is dropped), every watch is opened
    /// again, the hold timers are armed, and held instances whose grace
    /// ended meanwhile leave.
    pub fn resume(
        &mut self,
        point: SubscriptionResume,
        subscribers: impl IntoIterator<Item = (String, u64)>,
        now: Instant,
    ) -> Vec<SubscriptionAction> {
        if self.closed {
            return Vec::new();
        }
        let mut ids: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for (app, id) in subscribers {
            ids.entry(app).or_default().insert(id);
        }
        let SubscriptionResume {
            mut apps,
            next_token,
            last_event,
        } = point;
        self.next_token = self.next_token.max(next_token);
        self.last_event = self.last_event.max(last_event);
        for (app, subs) in ids {
            // An app not carried starts from nothing, as a new subscription.
            let carried = apps.remove(&app).unwrap_or_default();
            self.apps.insert(app, AppSub::resumed(subs, carried));
        }
        self.each_app(now, |sub, ctx| {
            sub.open_watch(ctx);
            sub.deliver_expired(now, ctx);
        })
    }
}
