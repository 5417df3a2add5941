//! What the subscription machine asks its actor shell to do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::change::{Change, Version};
use crate::instance::Instance;
use crate::resolver::Token;
use crate::update::HeldInstances;

/// Who an action's message goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// Every subscriber of the app.
    All,
    /// One subscriber (a new one catching up).
    One(u64),
}

/// What a timer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// Re-open a failed or ended watch (a retry).
    Reopen,
    /// Probe a registry that is down (a retry).
    Probe,
    /// Re-read the app in full (periodic, on resume, or a failed resync
    /// retried).
    Resync,
    /// Drop held instances whose grace ended.
    HoldEnd,
}

/// The instances a delivery carries: the app's whole state (registry
/// instances plus held ones, in registry order; sent first, to a subscriber
/// catching up, and when a change touched a large part of the app) or what
/// changed).
pub type Feed = Change<Arc<Instance>>;

/// A change of an app's instances as delivered to subscribers.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The instances: all of them, or what changed, at the delivery's
    /// version (the registry's, or a step after it for a change the machine
    /// made on its own: a held instance released).
    pub feed: Feed,
    /// Set while instances of a mass expiry are held (they are part of the
    /// state the feed builds).
    pub held: Option<HeldInstances>,
    /// Since when the app's registry state is stale, as of this delivery
    /// (`None`: fresh). A delivery sent during an outage (a hold ending, a
    /// restart, a subscriber catching up) carries the outage's start, so a
    /// receiver takes staleness from here and never infers freshness from
    /// the mere arrival of a delivery.
    pub stale_since: Option<Instant>,
}

impl Delivery {
    /// The version of the state after the delivery.
    pub fn version(&self) -> Version {
        self.feed.version()
    }
}

/// Something the actor shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum SubscriptionAction {
    /// Call `Registry::watch(app)` under `deadline`; report with `token`.
    OpenWatch {
        /// App to watch.
        app: String,
        /// Token of the watch (its open call and its stream).
        token: Token,
        /// Deadline of the open call.
        deadline: Duration,
    },
    /// The watch with `token` opened and is wanted: read its stream.
    ReadStream {
        /// App watched.
        app: String,
        /// Token of the watch.
        token: Token,
    },
    /// Call `Registry::list(app)` under `deadline`; report with `token`.
    List {
        /// App to list.
        app: String,
        /// Token of the call.
        token: Token,
        /// Deadline of the call.
        deadline: Duration,
    },
    /// Call [`super::SubscriptionMachine::on_timer`] with `token` after `delay`.
    ArmTimer {
        /// App the timer belongs to.
        app: String,
        /// Timer token.
        token: Token,
        /// Delay from now.
        delay: Duration,
        /// What the timer is for.
        kind: TimerKind,
    },
    /// The timer, call or stream with `token` is no longer wanted.
    Cancel {
        /// Its token.
        token: Token,
    },
    /// Send a delivery.
    Deliver {
        /// App of the delivery.
        app: String,
        /// Recipients.
        to: To,
        /// The delivery.
        delivery: Delivery,
    },
    /// Tell subscribers the app's state is stale since `stale_since`.
    Health {
        /// App.
        app: String,
        /// Recipients.
        to: To,
        /// Since when the state is stale (`None`: fresh).
        stale_since: Option<Instant>,
    },
    /// Opening the app's watch keeps failing (`Some`: since when, attempts,
    /// last error) or succeeded again (`None`): tell subscribers, so a
    /// directory with no state yet says why (`Pending { subscribe }`).
    SubscribeFailing {
        /// App.
        app: String,
        /// Recipients.
        to: To,
        /// The failure, while it lasts.
        failure: Option<crate::pending::RegistryFailure>,
    },
    /// A resync found the pushed state wrong (notifications were missed) and
    /// delivered the listed state: log and count it, one missed
    /// notification per instance that differed ([`SubscriptionAction::missed`]).
    Reconciled {
        /// App.
        app: String,
        /// Instances the pushed state lacked.
        added: usize,
        /// Instances the pushed state had but the registry does not.
        removed: usize,
        /// Instances whose record differed.
        changed: usize,
    },
    /// An event or listing was not newer than the state held and was
    /// ignored (a replay of an older state is never served): log and count.
    IgnoredOlder {
        /// App.
        app: String,
        /// Version of the ignored event.
        version: Version,
        /// Version of the state held.
        held: Version,
    },
    /// A delta did not follow the state held (a notification was lost):
    /// it was not applied, and the app is re-read when [`SubscriptionAction::List`]
    /// says so (one re-read per gap, see [`crate::change::ResetAsk`]): log
    /// and count.
    Gap {
        /// App.
        app: String,
        /// Version of the state held.
        held: Option<Version>,
        /// The version the delta applies on.
        base: Version,
        /// Whether a re-read was asked for now.
        asked: bool,
    },
    /// Instances of a mass expiry after a registry recovery are now held:
    /// log and count it.
    Holding {
        /// App.
        app: String,
        /// Instances newly held.
        newly_held: usize,
        /// The hold as a whole.
        held: HeldInstances,
    },
}

impl SubscriptionAction {
    /// For [`SubscriptionAction::Reconciled`], the instances that differed
    /// (added, removed or changed): the unit of the missed-notification
    /// count, as the etcd backend counts its re-reads. 0 for any other
    /// action.
    pub fn missed(&self) -> usize {
        match self {
            SubscriptionAction::Reconciled {
                added,
                removed,
                changed,
                ..
            } => added.saturating_add(*removed).saturating_add(*changed),
            _ => 0,
        }
    }
}
