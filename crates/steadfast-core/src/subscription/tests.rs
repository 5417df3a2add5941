//! Hand-stepped-clock tests of the subscription machine. `Sim` plays the
//! actor and a registry that is up or down, answering calls at once (or
//! holding list answers back) and firing timers in due order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::backoff::BackoffPolicy;
use crate::change::Change;
use crate::event::Version;
use crate::instance::{Instance, RevisionInterner};
use crate::model::ServiceInstance;
use crate::recover::RecoverPolicy;
use crate::update::HeldInstances;

pub(super) const A: &str = "a";

pub(super) fn insts(ports: &[u16]) -> Vec<ServiceInstance> {
    ports
        .iter()
        .map(|p| ServiceInstance::new(A, "10.0.0.1", *p))
        .collect()
}

/// `state` decoded, as a registry hands it out.
pub(super) fn decode(state: &[ServiceInstance]) -> Vec<Arc<Instance>> {
    let mut revs = RevisionInterner::default();
    state
        .iter()
        .map(|i| Arc::new(Instance::decode(i, &mut revs)))
        .collect()
}

/// A Reset of `state` at `version`.
pub(super) fn reset(state: &[ServiceInstance], version: u64) -> RegistryEvent {
    RegistryEvent::Reset {
        version: Version::at(version),
        items: decode(state),
    }
}

/// A delivery as a subscriber sees it: the whole state its feeds built.
#[derive(Clone, Debug)]
pub(super) struct Seen {
    pub(super) version: Version,
    /// Sorted by id.
    pub(super) instances: Vec<ServiceInstance>,
    pub(super) held: Option<HeldInstances>,
    pub(super) stale_since: Option<Instant>,
    /// Instances the feed itself carried.
    pub(super) carried: usize,
}

pub(super) fn ports(s: &[ServiceInstance]) -> Vec<u16> {
    let mut p: Vec<u16> = s.iter().map(|i| i.port).collect();
    p.sort_unstable();
    p
}

/// Default config with a jitter-free backoff, so delays are exact.
pub(super) fn config() -> SubscriptionConfig {
    let backoff = BackoffPolicy {
        jitter: 0.0,
        ..BackoffPolicy::default()
    };
    SubscriptionConfig {
        recover: RecoverPolicy::new(backoff).with_probe(DEFAULT_PROBE_INTERVAL),
        ..SubscriptionConfig::default()
    }
}

pub(super) struct Sim {
    pub(super) m: SubscriptionMachine,
    pub(super) t0: Instant,
    pub(super) now: Instant,
    pub(super) timers: BTreeMap<Token, (String, Instant)>,
    pub(super) up: bool,
    pub(super) state: Vec<ServiceInstance>,
    /// The registry's version and the state it was taken of.
    pub(super) version: (u64, Vec<ServiceInstance>),
    pub(super) answer_lists: bool,
    /// Lists held back, with what they listed.
    pub(super) pending_lists: Vec<(Token, Listing)>,
    pub(super) stream: Option<Token>,
    /// Version of the latest event the stream yielded (a delta's base: the
    /// source does not know about changes it failed to notify).
    pub(super) sent: u64,
    pub(super) log: Vec<(Instant, SubscriptionAction)>,
    pub(super) opens: usize,
    pub(super) lists: usize,
}

impl Sim {
    pub(super) fn new(config: SubscriptionConfig, state: Vec<ServiceInstance>) -> Self {
        Self::with_machine(SubscriptionMachine::new(config, 7), state)
    }

    pub(super) fn with_machine(m: SubscriptionMachine, state: Vec<ServiceInstance>) -> Self {
        let t0 = Instant::now();
        let mut sim = Self {
            m,
            t0,
            now: t0,
            timers: BTreeMap::new(),
            up: true,
            version: (1, state.clone()),
            state,
            answer_lists: true,
            pending_lists: Vec::new(),
            stream: None,
            sent: 0,
            log: Vec::new(),
            opens: 0,
            lists: 0,
        };
        let acts = sim.m.subscribe(A, 1, t0);
        sim.perform(acts);
        sim
    }

    pub(super) fn perform(&mut self, acts: Vec<SubscriptionAction>) {
        let mut queue: VecDeque<SubscriptionAction> = acts.into();
        while let Some(a) = queue.pop_front() {
            self.log.push((self.now, a.clone()));
            let now = self.now;
            let more = match a {
                SubscriptionAction::OpenWatch { app, token, .. } => {
                    self.opens += 1;
                    let r = if self.up {
                        Ok(())
                    } else {
                        Err(RegistryError::Unavailable("down".into()))
                    };
                    self.m.on_watch_opened(&app, token, r, now)
                }
                SubscriptionAction::ReadStream { app, token } => {
                    self.stream = Some(token);
                    let v = self.current_version();
                    self.sent = v;
                    let first = reset(&self.state, v);
                    self.m.on_stream_item(&app, token, Ok(first), now)
                }
                SubscriptionAction::List { app, token, .. } => {
                    self.lists += 1;
                    let listing = self.listing();
                    if !self.answer_lists {
                        self.pending_lists.push((token, listing));
                        continue;
                    }
                    let r = if self.up {
                        Ok(listing)
                    } else {
                        Err(RegistryError::Timeout)
                    };
                    self.m.on_list_result(&app, token, r, now)
                }
                SubscriptionAction::ArmTimer {
                    app, token, delay, ..
                } => {
                    self.timers.insert(token, (app, now + delay));
                    continue;
                }
                SubscriptionAction::Cancel { token } => {
                    self.timers.remove(&token);
                    if self.stream == Some(token) {
                        self.stream = None;
                    }
                    continue;
                }
                _ => continue,
            };
            queue.extend(more);
        }
    }

    pub(super) fn advance_to(&mut self, t: Instant) {
        loop {
            let next = self
                .timers
                .iter()
                .filter(|(_, (_, due))| *due <= t)
                .min_by_key(|(tok, (_, due))| (*due, **tok))
                .map(|(tok, (app, due))| (*tok, app.clone(), *due));
            let Some((token, app, due)) = next else {
                break;
            };
            self.timers.remove(&token);
            self.now = due;
            let acts = self.m.on_timer(&app, token, due);
            self.perform(acts);
        }
        self.now = t;
    }

    pub(super) fn advance(&mut self, d: Duration) {
        self.advance_to(self.now + d);
    }

    /// The registry's version of its current state: a state changed since
    /// the last version taken (silently or not) is a new version.
    pub(super) fn current_version(&mut self) -> u64 {
        if self.version.1 != self.state {
            self.version = (self.version.0 + 1, self.state.clone());
        }
        self.version.0
    }

    /// What a list answers now.
    pub(super) fn listing(&mut self) -> Listing {
        Listing {
            version: Version::at(self.current_version()),
            instances: decode(&self.state),
        }
    }

    /// The registry changes and notifies the watch with its whole state.
    pub(super) fn push(&mut self, state: Vec<ServiceInstance>) {
        self.state = state;
        if let Some(token) = self.stream {
            let v = self.current_version();
            self.sent = v;
            let event = reset(&self.state, v);
            let acts = self.m.on_stream_item(A, token, Ok(event), self.now);
            self.perform(acts);
        }
    }

    /// The registry changes and notifies the watch with a delta.
    pub(super) fn push_delta(&mut self, add: &[u16], remove: &[u16]) {
        self.state
            .retain(|i| !remove.contains(&i.port) && !add.contains(&i.port));
        self.state.extend(insts(add));
        let version = self.current_version();
        if let Some(token) = self.stream {
            let base = std::mem::replace(&mut self.sent, version);
            let event = RegistryEvent::Delta {
                base: Version::at(base),
                version: Version::at(version),
                upserts: decode(&insts(add)),
                removals: insts(remove)
                    .iter()
                    .map(|i| Arc::from(i.id.as_str()))
                    .collect(),
            };
            let acts = self.m.on_stream_item(A, token, Ok(event), self.now);
            self.perform(acts);
        }
    }

    pub(super) fn err_item(&mut self) {
        let token = self.stream.expect("a stream");
        let err = Err(RegistryError::Unavailable("frozen".into()));
        let acts = self.m.on_stream_item(A, token, err, self.now);
        self.perform(acts);
    }

    pub(super) fn end_stream(&mut self) {
        let token = self.stream.take().expect("a stream");
        let acts = self.m.on_stream_end(A, token, self.now);
        self.perform(acts);
    }

    pub(super) fn answer_pending_lists(&mut self) {
        for (token, listing) in std::mem::take(&mut self.pending_lists) {
            let acts = self.m.on_list_result(A, token, Ok(listing), self.now);
            self.perform(acts);
        }
    }

    /// Every delivery to subscriber 1, as the state it built.
    pub(super) fn deliveries(&self) -> Vec<(Instant, Seen)> {
        let mut view: BTreeMap<String, ServiceInstance> = BTreeMap::new();
        let mut held_gen: Option<Version> = None;
        let mut out = Vec::new();
        for (t, a) in &self.log {
            let SubscriptionAction::Deliver { delivery, to, .. } = a else {
                continue;
            };
            if !matches!(to, To::All | To::One(1)) {
                continue;
            }
            match &delivery.feed {
                Change::Reset { items: all, .. } => {
                    view = all
                        .iter()
                        .map(|i| (i.id().to_string(), i.to_record(A)))
                        .collect();
                }
                Feed::Delta {
                    base,
                    upserts,
                    removals,
                    ..
                } => {
                    assert_eq!(held_gen, Some(*base), "a delta on top of what is held");
                    for id in removals {
                        view.remove(id.as_ref());
                    }
                    for i in upserts {
                        view.insert(i.id().to_string(), i.to_record(A));
                    }
                }
            }
            held_gen = Some(delivery.version());
            out.push((
                *t,
                Seen {
                    version: delivery.version(),
                    instances: view.values().cloned().collect(),
                    held: delivery.held,
                    stale_since: delivery.stale_since,
                    carried: delivery.feed.len(),
                },
            ));
        }
        out
    }

    /// The machine is replaced (its actor panicked): a new one resumes
    /// from the old one's resume point for subscriber 1; its stream is gone.
    pub(super) fn replace(&mut self) -> Vec<SubscriptionAction> {
        let point = self.m.resume_point();
        let mut fresh = SubscriptionMachine::new(*self.m.config(), 8);
        let acts = fresh.resume(point, [(A.to_string(), 1)], self.now);
        self.m = fresh;
        self.stream = None;
        acts
    }

    pub(super) fn last(&self) -> Seen {
        self.deliveries().last().expect("a delivery").1.clone()
    }

    pub(super) fn count(&self, f: impl Fn(&SubscriptionAction) -> bool) -> usize {
        self.log.iter().filter(|(_, a)| f(a)).count()
    }

    pub(super) fn since_t0(&self) -> Duration {
        self.now - self.t0
    }
}

fn is_health(a: &SubscriptionAction) -> bool {
    matches!(a, SubscriptionAction::Health { .. })
}

#[test]
fn first_subscriber_opens_one_watch_and_later_ones_catch_up() {
    let mut sim = Sim::new(config(), insts(&[1]));
    assert_eq!(sim.opens, 1);
    assert_eq!(ports(&sim.last().instances), [1]);
    let acts = sim.m.subscribe(A, 2, sim.now);
    assert!(matches!(
        &acts[..],
        [SubscriptionAction::Deliver { to: To::One(2), .. }]
    ));
    assert!(
        sim.m.subscribe(A, 2, sim.now).len() == 1,
        "idempotent per id"
    );
    assert!(
        sim.m.unsubscribe(A, 1, sim.now).is_empty(),
        "one subscriber left"
    );
    let cancels = sim.m.unsubscribe(A, 2, sim.now);
    assert!(cancels
        .iter()
        .all(|a| matches!(a, SubscriptionAction::Cancel { .. })));
    assert_eq!(cancels.len(), 2, "the watch and the resync timer");
    assert_eq!(sim.m.apps().count(), 0);
}

#[test]
fn an_err_item_marks_stale_once_and_keeps_the_stream() {
    let mut sim = Sim::new(config(), insts(&[1, 2]));
    let watch = sim.stream.unwrap();
    sim.advance(Duration::from_secs(1));
    sim.err_item();
    sim.err_item();
    assert_eq!(sim.count(is_health), 1, "one stale mark");
    assert_eq!(sim.m.stale_since(A), Some(sim.now));
    assert!(sim.m.is_current_watch(A, watch), "the stream is kept");
    assert_eq!(sim.opens, 1);
    // Kept while it may heal: at least the backoff cap (30 s), see
    // `outage_tests` for the re-open of a stream that stays silent.
    sim.advance(Duration::from_secs(29));
    assert_eq!(sim.opens, 1, "no re-subscribe while the stream may heal");
    let lists = sim.lists;
    sim.push(insts(&[1, 2, 3]));
    assert_eq!(sim.m.stale_since(A), None, "the next Ok clears the mark");
    assert_eq!(ports(&sim.last().instances), [1, 2, 3]);
    assert_eq!(sim.lists, lists + 1, "a resume resyncs at once");
}

#[test]
fn stream_end_reopens_after_one_backoff_step() {
    let mut sim = Sim::new(config(), insts(&[1]));
    sim.end_stream();
    assert_eq!(sim.count(is_health), 1);
    sim.advance(Duration::from_millis(999));
    assert_eq!(sim.opens, 1);
    sim.advance(Duration::from_millis(1));
    assert_eq!(sim.opens, 2, "re-subscribed after 1 s");
    assert_eq!(sim.m.stale_since(A), None);
    // A panicked stream is an ended stream: same single step.
    let watch = sim.stream.unwrap();
    let panicked = Err(RegistryError::Panicked("boom".into()));
    let acts = sim.m.on_stream_item(A, watch, panicked, sim.now);
    sim.perform(acts);
    sim.end_stream();
    sim.advance(Duration::from_secs(1));
    assert_eq!(sim.opens, 3);
}

/// Seconds from the registry answering again to the re-subscribe, after a
/// `down` outage.
fn resume_delay(config: SubscriptionConfig, down: Duration) -> (f64, usize, usize) {
    let mut sim = Sim::new(config, insts(&[1]));
    sim.up = false;
    sim.end_stream();
    sim.advance(down);
    let (opens, lists) = (sim.opens, sim.lists);
    sim.up = true;
    let back = sim.now;
    for _ in 0..600 {
        if sim.m.stale_since(A).is_none() {
            break;
        }
        sim.advance(Duration::from_millis(100));
    }
    assert_eq!(sim.m.stale_since(A), None);
    let resumed = sim.deliveries().last().unwrap().0;
    ((resumed - back).as_secs_f64(), opens, lists)
}

#[test]
fn after_a_long_outage_the_probe_resubscribes_promptly() {
    let (with_probe, opens, probes) = resume_delay(config(), Duration::from_secs(45));
    let mut no_probe = config();
    no_probe.recover.probe_interval = None;
    let (without, _, _) = resume_delay(no_probe, Duration::from_secs(45));
    eprintln!(
        "45 s outage: resumed {with_probe:.1} s after the registry answered with the probe, \
         {without:.1} s without; {opens} opens and {probes} probes while down"
    );
    assert!(
        with_probe <= 1.0,
        "resumed {with_probe} s after the registry answered"
    );
    assert!(
        without > 10.0,
        "without a probe the grown backoff waits: {without} s"
    );
    // Load while down for 45 s: opens at 1, 2, 4, 8, 16, 30 s; one cheap
    // probe a second once the backoff outgrew it.
    assert!(opens <= 7, "{opens} opens");
    assert!(probes <= 45, "{probes} probes");
}

#[test]
fn one_probe_per_engine_however_many_apps_wait() {
    let mut sim = Sim::new(config(), insts(&[1]));
    sim.up = false;
    for app in ["b", "c"] {
        let acts = sim.m.subscribe(app, 1, sim.now);
        sim.perform(acts);
    }
    sim.end_stream();
    sim.advance(Duration::from_secs(45));
    assert!(sim.lists <= 45, "{} probes for three apps", sim.lists);
    sim.up = true;
    sim.advance(Duration::from_millis(1000));
    for app in [A, "b", "c"] {
        assert_eq!(sim.m.stale_since(app), None, "{app} re-subscribed");
    }
    let pending = sim.timers.len();
    assert_eq!(pending, 3, "one resync timer per app, no probe left");
}

#[test]
fn late_results_with_old_tokens_are_dropped() {
    let mut sim = Sim::new(config(), insts(&[1]));
    let old = sim.stream.unwrap();
    sim.end_stream();
    sim.advance(Duration::from_secs(1));
    let before = sim.log.len();
    let late = Ok(reset(&insts(&[9]), 99));
    assert!(sim.m.on_stream_item(A, old, late, sim.now).is_empty());
    assert!(sim.m.on_stream_end(A, old, sim.now).is_empty());
    assert!(sim.m.on_watch_opened(A, old, Ok(()), sim.now).is_empty());
    assert!(sim.m.on_timer(A, old, sim.now).is_empty());
    assert!(sim
        .m
        .on_list_result(
            A,
            old,
            Ok(Listing {
                version: Version::at(99),
                instances: decode(&insts(&[9])),
            }),
            sim.now,
        )
        .is_empty());
    assert!(sim.m.on_timer("other", 1, sim.now).is_empty());
    assert_eq!(sim.log.len(), before);
    assert_eq!(ports(&sim.last().instances), [1]);
}

#[test]
fn periodic_resync_is_jittered_and_applies_missed_changes() {
    let mut firsts = Vec::new();
    for seed in 0..8 {
        let mut m = SubscriptionMachine::new(config(), seed);
        let t0 = Instant::now();
        let open = m.subscribe(A, 1, t0);
        let SubscriptionAction::OpenWatch { token, .. } = open[0] else {
            panic!("{open:?}")
        };
        m.on_watch_opened(A, token, Ok(()), t0);
        let acts = m.on_stream_item(A, token, Ok(reset(&insts(&[1]), 1)), t0);
        let delay = acts.iter().find_map(|a| match a {
            SubscriptionAction::ArmTimer { delay, .. } => Some(*delay),
            _ => None,
        });
        let delay = delay.expect("a resync timer").as_secs_f64();
        assert!((240.0..=360.0).contains(&delay), "{delay}");
        firsts.push(delay);
    }
    firsts.dedup();
    assert!(firsts.len() > 4, "fleets do not resync in step: {firsts:?}");

    let mut sim = Sim::new(config(), insts(&[1, 2]));
    sim.advance(Duration::from_secs(400));
    assert_eq!(sim.lists, 1, "one resync, nothing differed");
    assert_eq!(sim.deliveries().len(), 1);
    // A notification is lost: the state changes silently.
    sim.state = insts(&[2, 3]);
    sim.advance(Duration::from_secs(400));
    let missed = sim.count(|a| {
        matches!(
            a,
            SubscriptionAction::Reconciled {
                added: 1,
                removed: 1,
                changed: 0,
                ..
            }
        )
    });
    assert_eq!(missed, 1);
    let counted: usize = sim.log.iter().map(|(_, a)| a.missed()).sum();
    assert_eq!(
        counted, 2,
        "one missed notification per instance that differed"
    );
    assert_eq!(
        ports(&sim.last().instances),
        [2, 3],
        "correct within one resync"
    );
}

#[test]
fn a_resync_never_rolls_back_a_newer_push() {
    let mut sim = Sim::new(config(), insts(&[1]));
    sim.answer_lists = false;
    sim.advance(Duration::from_secs(400));
    assert_eq!(sim.pending_lists.len(), 1, "a resync in flight");
    let listed_then = sim.state.clone();
    sim.push(insts(&[1, 2]));
    sim.state = listed_then;
    sim.answer_pending_lists();
    assert_eq!(ports(&sim.last().instances), [1, 2], "the push wins");
    assert_eq!(
        sim.count(|a| matches!(a, SubscriptionAction::Reconciled { .. })),
        0
    );
}

#[test]
fn a_failed_resync_is_retried_on_the_backoff() {
    let mut sim = Sim::new(config(), insts(&[1]));
    sim.answer_lists = false;
    sim.advance(Duration::from_secs(400));
    let (token, _) = sim.pending_lists.pop().unwrap();
    let acts = sim
        .m
        .on_list_result(A, token, Err(RegistryError::Timeout), sim.now);
    assert!(
        matches!(&acts[..], [SubscriptionAction::ArmTimer { delay, .. }] if *delay == Duration::from_secs(1)),
        "{acts:?}"
    );
}

#[test]
fn a_replacement_reopens_every_watch_and_delivers_the_registry_state_whole_after_the_last_delivery()
{
    let mut sim = Sim::new(config(), insts(&[1, 2, 3]));
    let (gen, delivered) = (sim.last().version, sim.deliveries().len());
    // The old actor's timers and stream die with it.
    sim.timers.clear();
    let acts = sim.replace();
    assert!(
        matches!(&acts[..], [SubscriptionAction::OpenWatch { .. }]),
        "nothing is delivered before the registry answers: {acts:?}"
    );
    // Meanwhile the registry changed, unnotified.
    sim.state = insts(&[2, 3, 4]);
    sim.perform(acts);
    assert_eq!(sim.opens, 2);
    let ds = sim.deliveries();
    let last = &ds.last().expect("a delivery").1;
    assert_eq!(ds.len(), delivered + 1, "one delivery");
    assert!(last.version > gen, "after the last one handed out");
    assert_eq!(
        (ports(&last.instances), last.carried),
        (vec![2, 3, 4], 3),
        "the registry's state, whole (not a delta on the carried state)"
    );
    assert_eq!(sim.timers.len(), 1, "the periodic resync is armed again");
    // From then on, changes travel as what changed.
    sim.push_delta(&[5], &[]);
    assert_eq!(sim.last().carried, 1);
    // Even an unchanged registry gets the whole state delivered once, after
    // the last delivery (it may never have reached the subscribers).
    let gen = sim.last().version;
    sim.timers.clear();
    let acts = sim.replace();
    sim.perform(acts);
    let last = sim.last();
    assert!(last.version > gen && last.carried == 4, "{last:?}");
}

#[test]
fn close_silences_everything_even_a_resume() {
    let mut sim = Sim::new(config(), insts(&[1]));
    let point = sim.m.resume_point();
    let cancels = sim.m.close();
    assert!(cancels
        .iter()
        .all(|a| matches!(a, SubscriptionAction::Cancel { .. })));
    assert!(sim.m.subscribe(A, 3, sim.now).is_empty());
    assert!(sim.m.on_timer(A, 1, sim.now).is_empty());
    assert!(sim
        .m
        .resume(point, [(A.to_string(), 1)], sim.now)
        .is_empty());
    let _ = sim.since_t0();
}

#[test]
fn deltas_and_resets_are_delivered_as_what_changed_and_older_events_are_ignored() {
    let mut sim = Sim::new(config(), insts(&[1, 2, 3]));
    assert_eq!(
        sim.last().carried,
        3,
        "the first delivery is the whole state"
    );
    sim.push_delta(&[4], &[1]);
    let d = sim.last();
    assert_eq!((ports(&d.instances), d.carried), (vec![2, 3, 4], 2));
    // A Reset from the source that changes one instance: a delta of one.
    let mut next = insts(&[2, 3, 4]);
    next[0].weight = 7;
    sim.push(next);
    let d = sim.last();
    assert_eq!(d.carried, 1, "only the changed instance travels");
    assert_eq!(d.instances[0].weight, 7);
    // A replay of an older state is never served.
    let token = sim.stream.unwrap();
    let delivered = sim.deliveries().len();
    let acts = sim
        .m
        .on_stream_item(A, token, Ok(reset(&insts(&[1]), 1)), sim.now);
    assert!(acts
        .iter()
        .any(|a| matches!(a, SubscriptionAction::IgnoredOlder { .. })));
    sim.perform(acts);
    assert_eq!(sim.deliveries().len(), delivered, "nothing delivered");
    assert_eq!(ports(&sim.last().instances), [2, 3, 4]);
}

#[test]
fn a_late_subscriber_gets_the_whole_state_at_the_current_version() {
    let mut sim = Sim::new(config(), insts(&[1, 2]));
    sim.push_delta(&[3], &[]);
    let gen = sim.last().version;
    let acts = sim.m.subscribe(A, 2, sim.now);
    let reset = acts.iter().find_map(|a| match a {
        SubscriptionAction::Deliver {
            to: To::One(2),
            delivery,
            ..
        } => Some(delivery.clone()),
        _ => None,
    });
    let d = reset.expect("a catch-up delivery");
    assert_eq!(d.version(), gen, "the next delta applies on top of it");
    assert!(matches!(&d.feed, Change::Reset { items: all, .. } if all.len() == 3));
}

#[test]
fn a_resync_repairs_a_lost_notification_even_at_the_version_held() {
    let mut sim = Sim::new(config(), insts(&[1]));
    // The registry changes and loses the notification...
    sim.state = insts(&[1, 3]);
    sim.current_version();
    // ...then notifies a later change: the watch is at the registry's
    // version without the lost change.
    sim.push_delta(&[4], &[]);
    assert_eq!(ports(&sim.last().instances), [1, 4]);
    sim.advance(Duration::from_secs(400));
    assert_eq!(
        ports(&sim.last().instances),
        [1, 3, 4],
        "a listing at the version held that differs is the truth"
    );
    assert_eq!(
        sim.count(|a| matches!(a, SubscriptionAction::Reconciled { added: 1, .. })),
        1
    );
}

#[test]
fn an_empty_first_state_is_delivered() {
    let sim = Sim::new(config(), Vec::new());
    let d = sim.last();
    assert!(d.instances.is_empty());
    assert_eq!(d.carried, 0);
}

#[test]
fn a_delta_that_does_not_follow_is_a_gap_answered_by_one_re_read() {
    let mut sim = Sim::new(config(), insts(&[1]));
    let lists = sim.lists;
    // The registry changes twice and notifies only the second change, with
    // the version of the first as its base: the watch never saw it.
    sim.state = insts(&[1, 3]);
    sim.current_version();
    sim.sent = sim.version.0;
    sim.answer_lists = false;
    sim.push_delta(&[4], &[]);
    assert_eq!(ports(&sim.last().instances), [1], "not applied");
    assert_eq!(sim.lists, lists + 1, "re-read at once");
    assert_eq!(
        sim.count(|a| matches!(a, SubscriptionAction::Gap { asked: true, .. })),
        1
    );
    // A change notified while the re-read is under way: kept, and applied
    // once the (older) listing closes the gap; no second re-read.
    sim.push_delta(&[5], &[]);
    assert_eq!(sim.lists, lists + 1, "one re-read per gap");
    let w = &sim.m.inspect_watches()[0];
    assert_eq!((w.resets_asked, w.gap_since), (1, Some(sim.now)));
    sim.answer_pending_lists();
    assert_eq!(
        ports(&sim.last().instances),
        [1, 3, 4, 5],
        "the listing closes the gap, the change kept during it follows"
    );
    assert!(sim.m.inspect_watches()[0].gap_since.is_none());
    assert_eq!(
        sim.count(|a| matches!(a, SubscriptionAction::Reconciled { added: 2, .. })),
        1,
        "counted as missed notifications"
    );
    assert_eq!(sim.lists, lists + 1);
    // Within a second, a new gap waits; after it, it asks again.
    sim.state = insts(&[1, 3, 4, 5, 6]);
    sim.current_version();
    sim.sent = sim.version.0;
    sim.answer_lists = true;
    sim.push_delta(&[7], &[]);
    assert_eq!(sim.lists, lists + 1, "rate limited");
    sim.advance(Duration::from_secs(1));
    sim.sent = sim.version.0 + 1;
    sim.push_delta(&[8], &[]);
    assert_eq!(sim.lists, lists + 2);
    assert_eq!(ports(&sim.last().instances), [1, 3, 4, 5, 6, 7, 8]);
}
