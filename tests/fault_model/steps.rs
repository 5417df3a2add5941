//! The steps of a fault schedule and their seeded generation. A step names
//! what happens (indices are taken modulo what exists when it runs), so a
//! schedule is plain data: it replays from its seed and shrinks by removing
//! steps.

use std::time::Duration;

use rand::Rng;

use super::world::{Behave, DownKind, SimRng, APPS, HOSTS, REFS, REVS};

/// Which actor a restart hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The registry subscription actor.
    Registry,
    /// The metadata cache actor (its flights' futures are lost).
    Cache,
    /// The resolver of app `n`.
    Resolver(usize),
    /// The directory of reference `n`.
    Directory(usize),
}

/// One step of a schedule.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Let virtual time pass, firing everything due.
    Advance(Duration),
    /// Register (or re-register) host `host` of `app` at revision `rev`;
    /// `silent`: the watch never reports it (a missed notification).
    Register {
        /// App index.
        app: usize,
        /// Host index.
        host: usize,
        /// Revision index (`REVS`: the empty revision).
        rev: usize,
        /// Not pushed to watches.
        silent: bool,
    },
    /// Remove one instance of `app`.
    Deregister {
        /// App index.
        app: usize,
        /// Which instance (modulo the present ones).
        pick: usize,
        /// Not pushed to watches.
        silent: bool,
    },
    /// The registry expires all instances of `app` but one at once.
    MassExpiry(usize),
    /// Flip health, weight or closing of one instance of `app`.
    Flip {
        /// App index.
        app: usize,
        /// Which instance.
        pick: usize,
        /// Which attribute.
        what: u8,
    },
    /// The registry goes down: calls fail this way, streams end or go silent.
    RegistryDown(DownKind),
    /// The registry answers again; silent streams catch up.
    RegistryUp,
    /// The stream of `app` yields an error item, then heals by itself.
    StreamGlitch(usize),
    /// The stream of `app` ends.
    StreamEnd(usize),
    /// Polling the stream of `app` panics (an error item, then its end).
    StreamPanic(usize),
    /// Host `host` of `app` now answers fetches this way.
    Provider {
        /// App index.
        app: usize,
        /// Host index.
        host: usize,
        /// The new behaviour.
        behave: Behave,
    },
    /// Subscribe to reference `n` (reference-counted, like the coordinator).
    Subscribe(usize),
    /// Unsubscribe from reference `n`.
    Unsubscribe(usize),
    /// A supervised restart.
    Restart(Target),
    /// The handler of the next delivery to the resolver of app `n`
    /// (`Target::Resolver`) or the next update to the directory of
    /// reference `n` (`Target::Directory`) panics: the message is lost and
    /// the actor restarts under its supervisor.
    Lose(Target),
    /// `Engine::shutdown`.
    Shutdown,
}

/// A schedule: initial registrations and subscriptions, then 30-80 random
/// steps; one schedule in ten shuts the engine down somewhere in the
/// middle. Two in five have no registry fault (so the tight bound of
/// provider faults alone is checked), and three in five end with a
/// redeploy onto a broken provider, so the heal phase has a failing
/// revision with a grown backoff to recover.
pub fn generate(seed: u64) -> Vec<Step> {
    let mut rng = SimRng::new(seed);
    let mut steps = Vec::new();
    for app in 0..APPS.len() {
        for host in 0..rng.gen_range(1..=4) {
            let rev = rng.gen_range(0..REVS);
            steps.push(Step::Register {
                app,
                host,
                rev,
                silent: false,
            });
        }
    }
    for _ in 0..rng.gen_range(1..=2) {
        steps.push(Step::Subscribe(rng.gen_range(0..REFS.len())));
    }
    let registry_faults = rng.gen_bool(0.6);
    let body = rng.gen_range(30..=80);
    let shutdown_at = rng.gen_bool(0.1).then(|| rng.gen_range(0..body));
    for i in 0..body {
        if shutdown_at == Some(i) {
            steps.push(Step::Shutdown);
        }
        steps.push(random_step(&mut rng, registry_faults));
    }
    if rng.gen_bool(0.6) {
        let (app, host) = (rng.gen_range(0..APPS.len()), rng.gen_range(0..HOSTS));
        let behave = if rng.gen_bool(0.5) {
            Behave::Hang
        } else {
            Behave::FailFast
        };
        steps.push(Step::Provider { app, host, behave });
        steps.push(Step::Register {
            app,
            host,
            rev: rng.gen_range(0..REVS),
            silent: false,
        });
        let secs = rng.gen_range(0..=120);
        steps.push(Step::Advance(Duration::from_millis(secs * 1000 + 7)));
    }
    steps
}

fn random_step(rng: &mut SimRng, registry_faults: bool) -> Step {
    let app = rng.gen_range(0..APPS.len());
    let provider = |rng: &mut SimRng| Step::Provider {
        app,
        host: rng.gen_range(0..HOSTS),
        behave: match rng.gen_range(0..10) {
            0..=2 => Behave::Ok,
            3..=4 => Behave::FailFast,
            5..=6 => Behave::Hang,
            7..=8 => Behave::Panic,
            _ => Behave::Wrong,
        },
    };
    let roll = rng.gen_range(0..100);
    if !registry_faults && (53..=64).contains(&roll) {
        return provider(rng);
    }
    match roll {
        0..=31 => Step::Advance(advance(rng)),
        32..=43 => Step::Register {
            app,
            host: rng.gen_range(0..HOSTS),
            rev: rng.gen_range(0..=REVS),
            silent: registry_faults && rng.gen_bool(0.03),
        },
        44..=47 => Step::Deregister {
            app,
            pick: rng.gen(),
            silent: registry_faults && rng.gen_bool(0.03),
        },
        48..=49 => Step::MassExpiry(app),
        50..=52 => Step::Flip {
            app,
            pick: rng.gen(),
            what: rng.gen(),
        },
        53..=55 => Step::RegistryDown(match rng.gen_range(0..4) {
            0 => DownKind::Refused,
            1 => DownKind::Panic,
            2 => DownKind::Rejected,
            _ => DownKind::Hang,
        }),
        56..=59 => Step::RegistryUp,
        60..=61 => Step::StreamGlitch(app),
        62..=63 => Step::StreamEnd(app),
        64 => Step::StreamPanic(app),
        65..=82 => provider(rng),
        83..=89 => Step::Subscribe(rng.gen_range(0..REFS.len())),
        90..=93 => Step::Unsubscribe(rng.gen_range(0..REFS.len())),
        _ => match rng.gen_range(0..6) {
            0 => Step::Restart(Target::Registry),
            1 => Step::Restart(Target::Cache),
            2 => Step::Restart(Target::Resolver(app)),
            3 => Step::Restart(Target::Directory(rng.gen_range(0..REFS.len()))),
            4 => Step::Lose(Target::Resolver(app)),
            _ => Step::Lose(Target::Directory(rng.gen_range(0..REFS.len()))),
        },
    }
}

/// A time step: mostly short, sometimes past several backoff steps.
fn advance(rng: &mut SimRng) -> Duration {
    let ms = match rng.gen_range(0..10) {
        0..=3 => rng.gen_range(1..=100),
        4..=6 => rng.gen_range(100..=2_000),
        7..=8 => rng.gen_range(2_000..=10_000),
        _ => rng.gen_range(10_000..=45_000),
    };
    Duration::from_millis(ms)
}
