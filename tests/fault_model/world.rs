//! The simulated outside world of one schedule: the registry's true state
//! and fault mode, and how each provider instance answers a metadata fetch.
//! Nothing here knows about the engine; the simulator asks the world what a
//! call returns and when. The registry keeps one version counter (like an
//! etcd revision) that grows on every change, notified or not; its events
//! and listings carry it and its records decoded as a backend does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, RngCore};
use steadfast_core::CLOSING_KEY;
use steadfast_core::{
    FetchError, Instance, Listing, MetadataInfo, RegistryError, RegistryEvent, RevisionInterner,
    ServiceInfo, ServiceInstance, Version,
};

/// Provider apps of the model.
pub const APPS: [&str; 2] = ["a", "b"];
/// Hosts per app (instance `k` of app `a` is `a-h<k>:<20000 + k>`).
pub const HOSTS: usize = 5;
/// Revisions per app (`a-r0` ..); index [`REVS`] stands for the empty revision.
pub const REVS: usize = 5;
/// Services a revision may export, by name (match key `<name>:tri`).
pub const SERVICES: [&str; 2] = ["S1", "S2"];

/// What a consumer subscribes to: a match key over provider apps.
pub struct RefSpec {
    /// Subscribe (match) key.
    pub key: &'static str,
    /// Provider apps, sorted.
    pub apps: &'static [&'static str],
}

/// The references a schedule subscribes and unsubscribes.
pub const REFS: [RefSpec; 3] = [
    RefSpec {
        key: "S1:tri",
        apps: &["a"],
    },
    RefSpec {
        key: "S1:tri",
        apps: &["a", "b"],
    },
    RefSpec {
        key: "S2:tri",
        apps: &["b"],
    },
];

/// Largest latency of a registry call or stream item.
pub const REGISTRY_LATENCY: Duration = Duration::from_millis(30);
/// Largest latency of a provider's metadata answer.
pub const FETCH_LATENCY: Duration = Duration::from_millis(50);

/// How one provider instance answers metadata fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behave {
    /// Answers its current revision (the default).
    Ok,
    /// Refuses the connection at once.
    FailFast,
    /// Never answers.
    Hang,
    /// The fetcher panics (the shell turns it into `FetchError::Panicked`).
    Panic,
    /// Answers another revision (a persistent error after the check).
    Wrong,
}

/// How a registry that is down fails its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownKind {
    /// Connection refused at once.
    Refused,
    /// The registry backend panics.
    Panic,
    /// The registry rejects the request (a persistent error).
    Rejected,
    /// Calls never answer (the shell's deadline ends them).
    Hang,
}

/// What a registry call does.
#[derive(Clone, Debug)]
pub enum CallOutcome {
    /// Answers after the delay.
    After(Duration, Result<(), RegistryError>),
    /// Never answers.
    Hang,
}

/// The registry's state and the providers' behaviour.
pub struct World {
    /// Registered instances per app, by id.
    pub apps: BTreeMap<&'static str, BTreeMap<String, ServiceInstance>>,
    /// Metadata per (app, revision).
    pub metadata: BTreeMap<(String, String), MetadataInfo>,
    /// Fault behaviour per instance id (absent: [`Behave::Ok`]).
    pub behave: BTreeMap<String, Behave>,
    /// `Some` while the registry is down.
    pub down: Option<DownKind>,
    /// The registry's version: grows on every change of any app.
    pub version: u64,
    /// Per app, the version of its latest change (notified or not): the
    /// base of its next delta, as the embedded registry sends it.
    pub changed: BTreeMap<String, Version>,
    /// Revision interners per app (as a backend decodes its records).
    interners: BTreeMap<String, RevisionInterner>,
}

/// The revision name of revision `n` of `app` (`None`: the empty revision).
pub fn revision(app: &str, n: usize) -> Option<String> {
    (n < REVS).then(|| format!("{app}-r{n}"))
}

/// The app an instance id belongs to (ids are `<app>-h<k>:<port>`).
pub fn app_of(id: &str) -> &str {
    id.split_once("-h").map_or(id, |(app, _)| app)
}

/// The instance record of host `host` of `app` at revision `rev`.
pub fn instance(app: &str, host: usize, rev: usize) -> ServiceInstance {
    let port = 20000 + host as u16;
    let mut i = ServiceInstance::new(app, format!("{app}-h{host}"), port);
    i.set_revision(revision(app, rev).unwrap_or_else(|| "0".into()));
    i
}

impl World {
    /// A world whose revisions export a random subset of [`SERVICES`].
    pub fn new(rng: &mut SimRng) -> Self {
        let mut metadata = BTreeMap::new();
        for app in APPS {
            for n in 0..REVS {
                let rev = revision(app, n).unwrap_or_default();
                let services = SERVICES
                    .iter()
                    .enumerate()
                    .filter(|_| rng.gen_bool(0.7))
                    .map(|(s, name)| ServiceInfo {
                        name: (*name).into(),
                        group: None,
                        version: None,
                        protocol: "tri".into(),
                        port: 9000 + (n * 10 + s) as u16,
                        path: (*name).into(),
                        params: BTreeMap::new(),
                    })
                    .map(|s| (s.match_key(), s))
                    .collect();
                let info = MetadataInfo {
                    app: app.into(),
                    revision: rev.clone(),
                    services,
                };
                metadata.insert((app.to_string(), rev), info);
            }
        }
        Self {
            apps: APPS.iter().map(|a| (*a, BTreeMap::new())).collect(),
            metadata,
            behave: BTreeMap::new(),
            down: None,
            version: 1,
            changed: BTreeMap::new(),
            interners: BTreeMap::new(),
        }
    }

    /// The registry's current version.
    pub fn current(&self) -> Version {
        Version::at(self.version)
    }

    /// A change of `app` happened (notified or not): the version grows.
    /// Returns the version of the app's previous change (a delta's base)
    /// and the new version.
    pub fn bump(&mut self, app: &str) -> (Version, Version) {
        self.version += 1;
        let now = self.current();
        let base = self
            .changed
            .insert(app.to_string(), now)
            .unwrap_or_default();
        (base, now)
    }

    /// `inst` decoded as the backend decodes it.
    pub fn decode(&mut self, inst: &ServiceInstance) -> Arc<Instance> {
        let revs = self.interners.entry(inst.app.clone()).or_default();
        Arc::new(Instance::decode(inst, revs))
    }

    /// The registry's current state of `app`, decoded.
    fn decoded(&mut self, app: &str) -> Vec<Arc<Instance>> {
        let records: Vec<ServiceInstance> = self.snapshot(app).to_vec();
        records.iter().map(|i| self.decode(i)).collect()
    }

    /// A `list` answer: the state of `app` at the current version.
    pub fn listing(&mut self, app: &str) -> Listing {
        Listing {
            version: self.current(),
            instances: self.decoded(app),
        }
    }

    /// A stream Reset: the state of `app` at the current version.
    pub fn reset(&mut self, app: &str) -> RegistryEvent {
        RegistryEvent::reset(self.listing(app))
    }

    /// The registry's current state of `app` as a snapshot.
    pub fn snapshot(&self, app: &str) -> Arc<Vec<ServiceInstance>> {
        Arc::new(
            self.apps
                .get(app)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default(),
        )
    }

    /// Instances of `app`, mutable.
    pub fn app_mut(&mut self, app: usize) -> &mut BTreeMap<String, ServiceInstance> {
        let name = APPS[app % APPS.len()];
        self.apps.entry(name).or_default()
    }

    /// Flips one of the serving attributes of an instance.
    pub fn flip(inst: &mut ServiceInstance, what: u8) {
        match what % 3 {
            0 => inst.healthy = !inst.healthy,
            1 => inst.weight = if inst.weight == 0 { 100 } else { 0 },
            _ => {
                if inst.is_closing() {
                    inst.metadata.remove(CLOSING_KEY);
                } else {
                    inst.metadata.insert(CLOSING_KEY.into(), "true".into());
                }
            }
        }
    }

    /// What a registry call (watch open or list) does now.
    pub fn registry_call(&self, rng: &mut SimRng) -> CallOutcome {
        let lat = latency(rng, REGISTRY_LATENCY);
        match self.down {
            None => CallOutcome::After(lat, Ok(())),
            Some(DownKind::Hang) => CallOutcome::Hang,
            Some(DownKind::Refused) => {
                CallOutcome::After(lat, Err(RegistryError::Unavailable("refused".into())))
            }
            Some(DownKind::Panic) => CallOutcome::After(
                Duration::ZERO,
                Err(RegistryError::Panicked("registry panicked".into())),
            ),
            Some(DownKind::Rejected) => {
                CallOutcome::After(lat, Err(RegistryError::Rejected("no".into())))
            }
        }
    }

    /// How `inst` answers a fetch of `rev` now: `None` when it hangs.
    pub fn fetch(
        &self,
        inst: &ServiceInstance,
        rev: &str,
        rng: &mut SimRng,
    ) -> Option<(Duration, Result<MetadataInfo, FetchError>)> {
        let lat = latency(rng, FETCH_LATENCY);
        let current = self
            .apps
            .get(app_of(&inst.id))
            .and_then(|m| m.get(&inst.id));
        let answer = match self.behave.get(&inst.id).copied().unwrap_or(Behave::Ok) {
            Behave::Hang => return None,
            Behave::FailFast => Err(FetchError::Unreachable("refused".into())),
            Behave::Panic => {
                return Some((
                    Duration::ZERO,
                    Err(FetchError::Panicked("fetcher panicked".into())),
                ))
            }
            Behave::Wrong => {
                let mut info = self.metadata.values().next().cloned()?;
                info.revision = "wrong".into();
                Ok(info)
            }
            Behave::Ok => match current {
                // A provider serves the revision it runs, nothing else.
                Some(c) if c.revision() == Some(rev) => self
                    .metadata
                    .get(&(inst.app.clone(), rev.to_string()))
                    .cloned()
                    .ok_or_else(|| FetchError::UnknownRevision(rev.into())),
                Some(_) => Err(FetchError::UnknownRevision(rev.into())),
                None => Err(FetchError::Unreachable("gone".into())),
            },
        };
        Some((lat, answer))
    }

    /// Clears every fault: the registry answers, every provider is healthy.
    pub fn heal(&mut self) {
        self.down = None;
        self.behave.clear();
    }
}

/// A random latency in `1 ms..=max`.
pub fn latency(rng: &mut SimRng, max: Duration) -> Duration {
    Duration::from_millis(rng.gen_range(1..=max.as_millis() as u64))
}

/// The world's random numbers: splitmix64, seeded per schedule. Cheap in a
/// debug build, unlike `StdRng` (the machines keep their own `StdRng`s).
pub struct SimRng(u64);

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
}

impl RngCore for SimRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
