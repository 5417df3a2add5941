//! One app of N instances, fully resolved and ready, on the embedded
//! [`MemoryRegistry`] or on a real etcd, plus the writer the benchmark
//! changes it through (on the benchmark's thread, never the engine's) and
//! the marker instance whose changes are observed in the published snapshot.
//!
//! The marker carries weight `u32::MAX` against weight 1 for every other
//! instance, so a weighted point read of the published snapshot
//! (`DirectorySnapshot::pick`, two binary searches, whatever strategy the
//! directory's callers use) lands on it with probability > 0.99997 at 100k
//! while it is present: a changed marker incarnation is seen on the first
//! poll after it is published, and its removal as soon as the read lands
//! on anything else.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use steadfast::{Directory, DirectoryStatus, Engine, MemoryRegistry, MetadataInfo, Reference};
use steadfast::{Registry, ServiceInstance};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdClient, EtcdConfig, EtcdRegistry, KeyLayout};
use steadfast_nacos::harness::RnacosServer;
use steadfast_nacos::{NacosConfig, NacosRegistry};
use steadfast_testkit::{InstanceBuilder, MetadataBuilder, ScriptedFetcher};

use crate::engine_thread::EngineThread;
use crate::BoxError;

/// The provider app.
pub const APP: &str = "inc-provider";
const REVISIONS: usize = 10;
const IFACES: [&str; 3] = ["inc.Alpha", "inc.Beta", "inc.Gamma"];
const SUBSCRIBED: &str = "inc.Beta";
/// Export time of sequence number 0 (every change gets a later one).
const BASE_MS: u64 = 1_700_000_000_000;
/// Puts in flight on the etcd writer.
pub const ETCD_CONCURRENCY: usize = 64;
/// Deadline for the warm-up (registry filled, directory ready with N).
const WARM_DEADLINE: Duration = Duration::from_secs(120);

/// Where the registry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The in-process [`MemoryRegistry`].
    Embedded,
    /// A real etcd started by the harness, via the JSON gateway.
    Etcd,
    /// A real rnacos started by the harness, over the Nacos gRPC protocol.
    Nacos,
}

impl Kind {
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Embedded => "embedded",
            Kind::Etcd => "etcd",
            Kind::Nacos => "nacos",
        }
    }
}

/// Writes instance records, from the benchmark's thread.
#[derive(Clone)]
pub enum Writer {
    /// Straight into the shared in-memory state.
    Memory(MemoryRegistry),
    /// Lease-less puts and deletes through a client of its own.
    Etcd(Arc<EtcdClient>, Arc<KeyLayout>),
    /// Registrations of a Nacos client of its own (the provider side).
    Nacos(NacosRegistry),
}

impl Writer {
    /// Upserts `inst` (a restart when its id exists, else an add).
    pub async fn put(&self, inst: ServiceInstance) -> Result<(), BoxError> {
        match self {
            Writer::Memory(r) => r.put(inst),
            Writer::Etcd(c, l) => {
                let value = serde_json::to_vec(&inst)?;
                c.put(l.instance_key(APP, &inst.id).as_bytes(), &value, 0)
                    .await?;
            }
            Writer::Nacos(r) => r.register(inst).await?,
        }
        Ok(())
    }

    /// Removes instance `id`.
    pub async fn remove(&self, id: &str) -> Result<(), BoxError> {
        match self {
            Writer::Memory(r) => {
                r.remove(APP, id);
            }
            Writer::Etcd(c, l) => {
                c.delete(l.instance_key(APP, id).as_bytes()).await?;
            }
            Writer::Nacos(r) => {
                // Every id here is `host:port`, what Nacos keys by.
                let (host, port) = id.rsplit_once(':').ok_or("id is not host:port")?;
                r.unregister(ServiceInstance::new(APP, host, port.parse()?))
                    .await?;
            }
        }
        Ok(())
    }

    /// Writes all of `insts` (one snapshot on memory, concurrent puts on etcd).
    async fn put_all(&self, insts: Vec<ServiceInstance>) -> Result<(), BoxError> {
        match self {
            Writer::Memory(r) => r.set_instances(APP, insts),
            Writer::Etcd(..) | Writer::Nacos(..) => {
                let results: Vec<_> = stream::iter(insts)
                    .map(|i| self.put(i))
                    .buffer_unordered(ETCD_CONCURRENCY)
                    .collect()
                    .await;
                results.into_iter().collect::<Result<Vec<()>, _>>()?;
            }
        }
        Ok(())
    }
}

/// The revisions of the provider, 3 services each.
fn metadata() -> Vec<MetadataInfo> {
    (0..REVISIONS)
        .map(|r| {
            let mut b = MetadataBuilder::new(APP);
            for (k, iface) in IFACES.iter().enumerate() {
                b = b
                    .service(*iface, "tri", 50051 + k as u16)
                    .param("timestamp", format!("{}", 1_700_000_000 + r))
                    .param("timeout", "3000");
            }
            b.build()
        })
        .collect()
}

/// Ordinary instance `k` (weight 1) at incarnation `seq`.
pub fn plain(revisions: &[String], k: usize, seq: u64) -> ServiceInstance {
    let host = format!("10.{}.{}.{}", (k >> 16) & 255, (k >> 8) & 255, k & 255);
    InstanceBuilder::new(APP, host, 20_000)
        .weight(1)
        .revision(revisions[k % revisions.len()].clone())
        .incarnation(BASE_MS + seq, format!("b{seq}"))
        .build()
}

/// The marker: generation `gen` (a new generation is a new id), weight
/// `u32::MAX`, incarnation `seq`.
pub fn marker(revisions: &[String], gen: u16, seq: u64) -> ServiceInstance {
    InstanceBuilder::new(APP, "192.168.0.1", 40_000u16.saturating_add(gen))
        .weight(u32::MAX)
        .revision(revisions[0].clone())
        .incarnation(BASE_MS + seq, format!("m{seq}"))
        .build()
}

/// The marker sequence number the published snapshot shows now: `Some(seq)`
/// when a weighted read of it lands on the marker generation `id`, `None`
/// on any other endpoint (see the module docs).
pub async fn picked_marker(dir: &Directory, id: &str) -> Result<Option<u64>, BoxError> {
    let snapshot = dir.snapshot()?;
    let Some(pick) = snapshot.pick(steadfast_actors::thread_random()) else {
        return Ok(None);
    };
    Ok((pick.instance_id() == id).then(|| {
        pick.incarnation()
            .map_or(0, |i| i.export_ms.saturating_sub(BASE_MS))
    }))
}

/// A ready app of `n` instances (the marker is one of them).
pub struct Fixture {
    /// Instances of the app, marker included.
    pub n: usize,
    /// Changes the registry.
    pub writer: Writer,
    /// The engine, on its own thread.
    pub engine: EngineThread,
    /// The subscribed directory.
    pub dir: Directory,
    /// Revision strings, for building instances.
    pub revisions: Vec<String>,
    /// The marker's generation and whether it is registered now.
    pub marker_gen: u16,
    /// Whether the marker is registered.
    pub marker_present: bool,
    /// Last sequence number used (incarnations only grow).
    pub seq: u64,
    /// Warm-up: registry filled -> directory ready with n (ms).
    pub warm_ms: f64,
    /// Time to write the n records (ms).
    pub fill_ms: f64,
    _etcd: Option<EtcdServer>,
    _nacos: Option<RnacosServer>,
    /// The engine's Nacos client (when on Nacos): when its last push came.
    pub nacos_client: Option<NacosRegistry>,
}

impl Fixture {
    /// Starts registry (and etcd), fills it with `n` instances, starts the
    /// engine on its own thread and waits until the directory is ready.
    pub async fn start(kind: Kind, n: usize) -> Result<Self, BoxError> {
        let metas = metadata();
        let revisions: Vec<String> = metas.iter().map(|m| m.revision.clone()).collect();
        let fetcher = ScriptedFetcher::new();
        metas.iter().for_each(|m| fetcher.serve(m.clone()));
        let mut insts: Vec<ServiceInstance> = (0..n - 1).map(|k| plain(&revisions, k, 0)).collect();
        insts.push(marker(&revisions, 0, 0));

        let mut nacos = None;
        let mut nacos_client = None;
        let (writer, registry, etcd): (Writer, Arc<dyn Registry>, _) = match kind {
            Kind::Embedded => {
                let r = MemoryRegistry::new();
                (Writer::Memory(r.clone()), Arc::new(r), None)
            }
            Kind::Etcd => {
                let etcd =
                    EtcdServer::start_with_args(&["--quota-backend-bytes=8589934592"]).await?;
                let prefix = unique_prefix();
                let mut config = EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix);
                config.request_timeout = Duration::from_secs(60);
                let client = EtcdClient::new(
                    vec![etcd.endpoint()],
                    Duration::from_secs(30),
                    Duration::from_secs(30),
                )?;
                let w = Writer::Etcd(Arc::new(client), Arc::new(KeyLayout::new(&prefix)));
                (w, Arc::new(EtcdRegistry::new(config)?), Some(etcd))
            }
            Kind::Nacos => {
                let server = RnacosServer::start().await?;
                let mut config = NacosConfig::new([server.grpc_addr()]);
                config.request_timeout = Duration::from_secs(60);
                let w = Writer::Nacos(NacosRegistry::new(config.clone()));
                nacos = Some(server);
                let consumer = NacosRegistry::new(config);
                nacos_client = Some(consumer.clone());
                (w, Arc::new(consumer), None)
            }
        };
        let t = Instant::now();
        writer.put_all(insts).await?;
        let fill_ms = t.elapsed().as_secs_f64() * 1e3;

        let engine = EngineThread::spawn(move || {
            Engine::builder()
                .registry_arc(registry)
                .fetcher(fetcher)
                .seed(7)
                .start()
        })?;
        let t = Instant::now();
        let dir = engine
            .engine
            .subscribe(Reference::new(SUBSCRIBED, "tri", [APP]))
            .await?;
        loop {
            let status = dir.status().await?;
            if matches!(&status, DirectoryStatus::Ready { endpoints, degraded, .. }
                if *endpoints == n && degraded.is_empty())
            {
                break;
            }
            if t.elapsed() > WARM_DEADLINE {
                return Err(format!("warm-up timed out: {status:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let warm_ms = t.elapsed().as_secs_f64() * 1e3;
        Ok(Self {
            n,
            writer,
            engine,
            dir,
            revisions,
            marker_gen: 0,
            marker_present: true,
            seq: 0,
            warm_ms,
            fill_ms,
            _etcd: etcd,
            _nacos: nacos,
            nacos_client,
        })
    }

    /// The marker's current id.
    pub fn marker_id(&self) -> String {
        marker(&self.revisions, self.marker_gen, 0).id
    }

    /// The next sequence number.
    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Shuts down engine and etcd.
    pub fn stop(self) {
        self.engine.stop();
    }
}
