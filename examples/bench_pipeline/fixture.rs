//! The workload: one provider app over [`REVISIONS`] revisions, and the
//! engine's sans-IO stages (resolver, directory, published slot) driven
//! from the benchmark's own thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use steadfast::{BackoffPolicy, MetadataInfo, Reference, ServiceInstance, CLOSING_KEY};
use steadfast_core::{
    Applied, Delivery, DirectoryMachine, Feed, Instance, Published, ResolverAction,
    ResolverMachine, RevisionInterner, Version,
};
use steadfast_testkit::{InstanceBuilder, MetadataBuilder};

/// The provider app.
pub const APP: &str = "bench-provider";
/// Revisions of the app (instances round-robin over them).
pub const REVISIONS: usize = 100;
/// Every `NO_KEY`-th revision does not export the subscribed service.
const NO_KEY: usize = 20;
const IFACES: [&str; 3] = ["bench.Alpha", "bench.Beta", "bench.Gamma"];
/// The subscribed service.
pub const SUBSCRIBED: &str = "bench.Beta";
const BASE_WEIGHT: u32 = 100;

/// The reference's subscribe key.
pub fn key() -> String {
    Reference::new(SUBSCRIBED, "tri", [APP]).subscribe_key()
}

/// The revisions' metadata, 3 services each (2 for every `NO_KEY`-th).
pub fn metadata() -> Vec<Arc<MetadataInfo>> {
    (0..REVISIONS)
        .map(|r| {
            let mut b = MetadataBuilder::new(APP);
            for (k, iface) in IFACES.iter().enumerate() {
                if r % NO_KEY == NO_KEY - 1 && *iface == SUBSCRIBED {
                    continue;
                }
                b = b
                    .service(*iface, "tri", 50051 + k as u16)
                    .param("timestamp", format!("{}", 1_700_000_000 + r))
                    .param("timeout", "3000");
            }
            Arc::new(b.build())
        })
        .collect()
}

/// Whether instance `i` of any round serves the subscribed key.
pub fn serves(i: usize) -> bool {
    !i.is_multiple_of(97) && !i.is_multiple_of(89) && i % REVISIONS % NO_KEY != NO_KEY - 1
}

/// The record of instance `i` in `round` and `boot`: `round` sets its port
/// (hence its id), `boot` its weight and incarnation. Every 97th is
/// unhealthy, every 89th closing; weights vary with `i`.
pub fn record(i: usize, round: u32, boot: u32, metas: &[Arc<MetadataInfo>]) -> ServiceInstance {
    let host = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
    let mut b = InstanceBuilder::new(APP, host, 20_000u16.wrapping_add(round as u16))
        .weight(BASE_WEIGHT + boot % 1000 + (i % 5) as u32)
        .healthy(!i.is_multiple_of(97))
        .revision(metas[i % REVISIONS].revision.clone())
        .incarnation(1_700_000_000_000 + u64::from(boot), format!("b{boot}-{i}"));
    if i.is_multiple_of(89) {
        b = b.metadata(CLOSING_KEY, "true");
    }
    b.build()
}

/// Every record of a full state of `n` instances for `round`.
pub fn records(n: usize, round: u32, metas: &[Arc<MetadataInfo>]) -> Vec<ServiceInstance> {
    (0..n).map(|i| record(i, round, round, metas)).collect()
}

/// [`record`] decoded as the registry decodes it.
pub fn instance(
    i: usize,
    round: u32,
    boot: u32,
    metas: &[Arc<MetadataInfo>],
    interner: &mut RevisionInterner,
) -> Arc<Instance> {
    Arc::new(Instance::decode(&record(i, round, boot, metas), interner))
}

/// A full Reset of `n` instances for `round`.
pub fn reset(
    n: usize,
    round: u32,
    metas: &[Arc<MetadataInfo>],
    interner: &mut RevisionInterner,
) -> Vec<Arc<Instance>> {
    (0..n)
        .map(|i| instance(i, round, round, metas, interner))
        .collect()
}

/// The engine's sans-IO stages for one app and one reference.
pub struct Engine {
    /// The app's resolver.
    pub resolver: ResolverMachine,
    /// The reference's directory.
    pub directory: DirectoryMachine,
    /// Where the directory's snapshots are published for readers.
    pub published: Published,
    /// Generation of the latest delivery.
    pub generation: u64,
    now: Instant,
}

/// CPU spent in each stage of one engine round.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stages {
    /// `on_delivery`, including the drop of the replaced table.
    pub deliver: f64,
    /// `take_updates`: the URL list (or patch).
    pub take: f64,
    /// `DirectoryMachine::apply_at`: the endpoint set and snapshot.
    pub apply: f64,
    /// `Published::store`.
    pub store: f64,
    /// Dropping the replaced snapshot (URLs, chunks).
    pub free: f64,
}

impl Engine {
    /// A resolver with every revision resolved, and a directory holding
    /// `first` (applied and published).
    pub fn warmed(first: Vec<Arc<Instance>>, metas: &HashMap<String, Arc<MetadataInfo>>) -> Self {
        let now = Instant::now();
        let mut resolver = ResolverMachine::new(APP, BackoffPolicy::default(), 7);
        let key = key();
        assert!(resolver.subscribe_at(&key, now).is_empty());
        let mut engine = Self {
            resolver,
            directory: DirectoryMachine::new(key, &[APP.to_string()], 7),
            published: Published::default(),
            generation: 1,
            now,
        };
        let feed = Feed::Reset {
            version: Version::at(1),
            items: first,
        };
        let actions = engine.resolver.on_delivery(delivery(feed), now);
        for a in actions {
            if let ResolverAction::Fetch {
                revision, token, ..
            } = a
            {
                let info = Ok(metas[&revision].clone());
                assert!(engine
                    .resolver
                    .on_fetch_result(&revision, token, info, now)
                    .is_empty());
            }
        }
        assert!(engine.resolver.unresolved().is_none(), "all resolved");
        engine.flush(&mut None);
        engine
    }

    /// Takes the resolver's updates, applies them and publishes, freeing
    /// what they replace right here (no deferral). Records per-stage CPU
    /// into `stages` when given (that costs a few clock reads).
    /// Returns whether every update was a patch.
    fn flush(&mut self, stages: &mut Option<(&mut Stages, cpu_time::ThreadTime)>) -> bool {
        let updates = self.resolver.take_updates();
        lap(stages, |s| &mut s.take);
        let mut patches = !updates.is_empty();
        for update in updates {
            patches &= !update.change.is_reset();
            let (applied, old) = self.directory.apply_at(
                update,
                std::time::Instant::now(),
                std::time::Duration::from_secs(30),
            );
            assert_eq!(applied, Applied::Yes);
            lap(stages, |s| &mut s.apply);
            let prev = self.published.store(self.directory.snapshot().clone());
            lap(stages, |s| &mut s.store);
            drop((old, prev));
            lap(stages, |s| &mut s.free);
        }
        patches
    }

    /// One delivery through every stage: resolver, updates, directory,
    /// publish, frees. `Some(stages)`: time each stage. Returns whether the
    /// directory got patches (not a full list).
    pub fn round(&mut self, feed: Feed, stages: Option<&mut Stages>) -> bool {
        let mut stages = stages.map(|s| (s, cpu_time::ThreadTime::now()));
        let actions = self.resolver.on_delivery(delivery(feed), self.now);
        debug_assert!(actions.is_empty(), "a warm resolver does not fetch");
        drop(actions);
        lap(&mut stages, |s| &mut s.deliver);
        self.flush(&mut stages)
    }
}

impl Engine {
    /// The next registry delivery: the whole state `items`.
    pub fn reset_feed(&mut self, items: Vec<Arc<Instance>>) -> Feed {
        self.generation += 1;
        Feed::Reset {
            version: Version::at(self.generation),
            items,
        }
    }

    /// The next registry delivery: `upserts` on top of the previous one.
    pub fn delta_feed(&mut self, upserts: Vec<Arc<Instance>>) -> Feed {
        self.generation += 1;
        Feed::Delta {
            base: Version::at(self.generation - 1),
            version: Version::at(self.generation),
            upserts,
            removals: Vec::new(),
        }
    }
}

/// A fresh registry delivery of `feed`.
fn delivery(feed: Feed) -> Delivery {
    Delivery {
        feed,
        held: None,
        stale_since: None,
    }
}

/// Adds the CPU since the last lap to the stage `field` picks.
fn lap(
    stages: &mut Option<(&mut Stages, cpu_time::ThreadTime)>,
    field: impl Fn(&mut Stages) -> &mut f64,
) {
    if let Some((s, t)) = stages {
        *field(s) += t.elapsed().as_secs_f64() * 1e3;
        *t = cpu_time::ThreadTime::now();
    }
}
