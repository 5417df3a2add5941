//! `select()` throughput and latency, in one run, on thread CPU time.
//!
//! 1. Throughput: an engine (MemoryRegistry, one app of 1000 instances with
//!    weights 1..=100) runs on its own actix arbiter thread; a multi-thread
//!    tokio runtime with 2 workers (an actix-web-like setup, not the
//!    arbiter) runs 1, 2 or 64 tasks calling `Directory::select_now()`, and
//!    in the same run the same tasks do a plain weighted pick over a
//!    `Vec<Endpoint>` with running weight totals (binary search, same
//!    thread-local generator, same `Arc` clone handed back). Each task counts
//!    the thread CPU time of its batches (a batch never yields, so it runs on
//!    one thread); picks per CPU-second is picks/s per thread. Medians over
//!    rounds, the two sides alternating first.
//!    Then every strategy with leases (`Directory::select()`), each against
//!    the plain pick in the same run (same method, medians of the ratio),
//!    the default also with `success()` reported, and the cost of the clock
//!    (`tokio::time::Instant::now()`) a pick reads.
//! 2. Latency during a burst: a writer thread owns the directory's state
//!    machine at 100k endpoints (the `DirectoryMachine` + `Published` pair the
//!    directory actor uses) and applies 1000 single-endpoint patches
//!    (restart, removal or addition), publishing after each, while 2 reader
//!    threads time every `select()`. p99 per burst; median over rounds. The
//!    writer is the directory's machine alone (no registry or actors), so
//!    edits land as fast as a directory can apply them: the hardest case
//!    for the readers.
//!
//! Run: `cargo run --release --example bench_select [-- --quick] [--burst-only]`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use cpu_time::ThreadTime;
use steadfast::{
    Directory, DirectoryUpdate, Endpoint, Engine, MemoryRegistry, Reference, ServiceInstance,
    ServiceUrl, Strategy, UpdateState, UrlChange, Version,
};
use steadfast_actors::thread_random;
use steadfast_core::{DirectoryMachine, Instance, Published, RevisionInterner, ServiceEndpoint};
use steadfast_testkit::{InstanceBuilder, MetadataBuilder, ScriptedFetcher};

/// The engine's default tombstone TTL (no update here names a closing).
const TOMBSTONE_TTL: Duration = Duration::from_secs(30);

const APP: &str = "bench-provider";
const IFACE: &str = "bench.S";
const ENDPOINTS: usize = 1000;
const BATCH: u64 = 1024;
const BURST_SIZE: usize = 100_000;
const BURST_EDITS: u64 = 1000;

/// A plain weighted pick: endpoints and their running weight totals.
struct Plain {
    endpoints: Vec<Endpoint>,
    cum: Vec<u64>,
}

impl Plain {
    fn new(endpoints: Vec<Endpoint>) -> Self {
        let mut total = 0u64;
        let cum = endpoints
            .iter()
            .map(|e| {
                total = total.saturating_add(u64::from(e.weight()));
                total
            })
            .collect();
        Self { endpoints, cum }
    }

    fn pick(&self, r: u64) -> Option<Endpoint> {
        let total = *self.cum.last()?;
        if total == 0 {
            return None;
        }
        let point = ((u128::from(r) * u128::from(total)) >> 64) as u64;
        let i = self.cum.partition_point(|&c| c <= point);
        self.endpoints.get(i).cloned()
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

/// Starts an engine on its own arbiter thread serving a 1000-endpoint
/// directory; returns the handle and a stop switch.
fn engine_directory() -> (
    Directory,
    tokio::sync::oneshot::Sender<()>,
    thread::JoinHandle<()>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let arbiter = thread::spawn(move || {
        let system = actix_rt::System::new();
        system.block_on(async move {
            let meta = MetadataBuilder::new(APP)
                .service(IFACE, "tri", 50051)
                .build();
            let (registry, fetcher) = (MemoryRegistry::new(), ScriptedFetcher::new());
            fetcher.serve(meta.clone());
            let engine = Engine::builder()
                .registry(registry.clone())
                .fetcher(fetcher)
                .seed(7)
                .start()
                .expect("engine starts");
            let reference = Reference::new(IFACE, "tri", [APP]);
            let dir = engine.subscribe(reference).await.expect("subscribe");
            let instances = (0..ENDPOINTS)
                .map(|i| {
                    let host = format!("10.0.{}.{}", i >> 8, i & 255);
                    InstanceBuilder::new(APP, host, 20_000)
                        .weight(1 + (i as u32 * 37) % 100)
                        .revision(meta.revision.clone())
                        .build()
                })
                .collect();
            registry.set_instances(APP, instances);
            for _ in 0..3000 {
                let snap = dir.ready(Duration::from_secs(30)).await.expect("open");
                if snap.len() == ENDPOINTS {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(dir.snapshot().expect("open").len(), ENDPOINTS);
            tx.send(dir).expect("main waits");
            let _ = stop_rx.await;
            engine.shutdown().await;
        });
    });
    let dir = rx.recv().expect("directory ready");
    (dir, stop_tx, arbiter)
}

/// One task: `picks` calls of `f` in batches, yielding between batches;
/// returns the picks made and the thread CPU time of its batches.
async fn task<R, F: Fn() -> R>(f: F, picks: u64) -> (u64, Duration) {
    let (mut done, mut cpu) = (0u64, Duration::ZERO);
    while done < picks {
        {
            // `ThreadTime` is not `Send`: it must not live across the yield.
            let t = ThreadTime::now();
            for _ in 0..BATCH {
                black_box(f());
            }
            cpu += t.elapsed();
        }
        done += BATCH;
        tokio::task::yield_now().await;
    }
    (done, cpu)
}

/// Picks per CPU-second (per thread) of `tasks` tasks sharing `picks`.
fn run<R, F>(rt: &tokio::runtime::Runtime, tasks: u64, picks: u64, f: F) -> f64
where
    R: 'static,
    F: Fn() -> R + Clone + Send + Sync + 'static,
{
    rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|_| tokio::spawn(task(f.clone(), picks / tasks)))
            .collect();
        let (mut n, mut cpu) = (0u64, Duration::ZERO);
        for h in handles {
            let (k, c) = h.await.expect("task");
            n += k;
            cpu += c;
        }
        n as f64 / cpu.as_secs_f64().max(1e-9)
    })
}

fn throughput(rounds: usize, picks: u64) {
    let (dir, stop, arbiter) = engine_directory();
    let plain = Arc::new(Plain::new(dir.snapshot().expect("open").endpoints()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for tasks in [1u64, 2, 64] {
        let (mut sel, mut pl, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds + 1 {
            let d = dir.clone();
            let select = move || d.select_now().expect("open");
            let p = plain.clone();
            let pick = move || p.pick(thread_random());
            let (s, q) = if round % 2 == 0 {
                let s = run(&rt, tasks, picks, select);
                (s, run(&rt, tasks, picks, pick))
            } else {
                let q = run(&rt, tasks, picks, pick);
                (run(&rt, tasks, picks, select), q)
            };
            if round > 0 {
                // Round 0 warms the caches and the thread-local state.
                sel.push(s);
                pl.push(q);
                ratio.push(s / q);
            }
        }
        let (s, q, r) = (median(&mut sel), median(&mut pl), median(&mut ratio));
        println!(
            "  {tasks:>2} task(s) on 2 workers: select_now {:.1} M picks/s/thread, \
             plain {:.1} M picks/s/thread ({:.1} / {:.1} ns per pick)",
            s / 1e6,
            q / 1e6,
            1e9 / s,
            1e9 / q
        );
        println!(
            "target select/plain ratio, {tasks} task(s), non-arbiter thread = {r:.2} (>= 0.5) {}",
            verdict(r >= 0.5)
        );
        println!(
            "target select picks/s per thread, {tasks} task(s), {ENDPOINTS} endpoints = \
             {:.1} M (>= 10 M) {}",
            s / 1e6,
            verdict(s >= 10e6)
        );
    }
    leases(&rt, &dir, &plain, rounds, picks);
    let _ = stop.send(());
    arbiter.join().expect("arbiter thread");
}

/// Medians over `rounds` (after a warm-up round) of `a`'s and `b`'s
/// picks/s and of their ratio, the two sides alternating first.
fn paired<A, B, RA: 'static, RB: 'static>(
    rt: &tokio::runtime::Runtime,
    tasks: u64,
    rounds: usize,
    picks: u64,
    a: A,
    b: B,
) -> (f64, f64, f64)
where
    A: Fn() -> RA + Clone + Send + Sync + 'static,
    B: Fn() -> RB + Clone + Send + Sync + 'static,
{
    let (mut va, mut vb, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds + 1 {
        let (x, y) = if round % 2 == 0 {
            let x = run(rt, tasks, picks, a.clone());
            (x, run(rt, tasks, picks, b.clone()))
        } else {
            let y = run(rt, tasks, picks, b.clone());
            (run(rt, tasks, picks, a.clone()), y)
        };
        if round > 0 {
            va.push(x);
            vb.push(y);
            ratio.push(x / y);
        }
    }
    (median(&mut va), median(&mut vb), median(&mut ratio))
}

/// Every strategy with leases (`Directory::select()`, the lease dropped
/// without an outcome, and for the default also with `success()`), each
/// against the plain weighted pick in the same run; and the cost of the
/// clock a pick reads.
fn leases(
    rt: &tokio::runtime::Runtime,
    dir: &Directory,
    plain: &Arc<Plain>,
    rounds: usize,
    picks: u64,
) {
    for tasks in [1u64, 2, 64] {
        let p = plain.clone();
        let pick = move || p.pick(thread_random());
        for strategy in Strategy::ALL {
            dir.set_strategy(Some(strategy));
            let d = dir.clone();
            let lease = move || d.select().is_ok();
            let (l, q, r) = paired(rt, tasks, rounds, picks, lease, pick.clone());
            println!(
                "  {tasks:>2} task(s): select() lease, {strategy:?}: {:.1} M picks/s/thread \
                 ({:.1} ns), plain {:.1} M ({:.1} ns): ratio {r:.2}",
                l / 1e6,
                1e9 / l,
                q / 1e6,
                1e9 / q
            );
            if strategy == Strategy::default() {
                println!(
                    "target default strategy with lease vs plain weighted pick, {tasks} \
                     task(s) = {r:.2} (>= 0.3) {}",
                    verdict(r >= 0.3)
                );
            }
        }
        dir.set_strategy(None);
        // The same lease at a time read once per batch of 1024 picks (a
        // caller that already holds its request's start time): the cost of
        // the pick without its clock read.
        let d = dir.clone();
        let t = tokio::time::Instant::now();
        let at = move || d.select_at(t).is_ok();
        let (l, q, r) = paired(rt, tasks, rounds, picks, at, pick.clone());
        println!(
            "  {tasks:>2} task(s): select_at(now given) lease, default strategy: {:.1} M/s/thread \
             ({:.1} ns), plain {:.1} ns: ratio {r:.2} (no target; shows the clock's share)",
            l / 1e6,
            1e9 / l,
            1e9 / q
        );
        let d = dir.clone();
        let full = move || d.select().map(|l| l.success()).is_ok();
        let (l, q, r) = paired(rt, tasks, rounds, picks, full, pick.clone());
        println!(
            "  {tasks:>2} task(s): select() + success() (default strategy, clock read twice): \
             {:.1} M/s/thread ({:.1} ns), plain {:.1} ns: ratio {r:.2}",
            l / 1e6,
            1e9 / l,
            1e9 / q
        );
    }
    let clock = || tokio::time::Instant::now();
    let c = run(rt, 1, picks, clock);
    println!(
        "  clock: tokio::time::Instant::now() on a runtime worker = {:.1} ns per read",
        1e9 / c
    );
}

fn endpoint(id: usize, weight: u32, round: u64, svc: &Arc<ServiceEndpoint>) -> Endpoint {
    let host = format!("10.{}.{}.{}", id >> 16, (id >> 8) & 255, id & 255);
    let mut inst = ServiceInstance::new(APP, host, 20_000);
    inst.weight = weight;
    inst.metadata.insert("round".into(), round.to_string());
    let inst = Arc::new(Instance::decode(&inst, &mut RevisionInterner::default()));
    Arc::new(ServiceUrl::new(&inst, svc))
}

fn update(change: UrlChange) -> DirectoryUpdate {
    DirectoryUpdate {
        app: APP.into(),
        subscribe_key: Reference::new(IFACE, "tri", [APP]).subscribe_key(),
        change,
        state: UpdateState::Resolved,
        stale_since: None,
        held: None,
        closing: Vec::new(),
        snapshot: None,
    }
}

/// p99 (us) of `select()` on 2 reader threads while one burst is applied;
/// also the burst's wall time (ms), the writer's CPU time per edit (us) and
/// the number of timed selects.
fn burst_round(
    machine: &mut DirectoryMachine,
    published: &Arc<Published>,
    generation: &mut u64,
    next_id: &mut usize,
    round: u64,
    svc: &Arc<ServiceEndpoint>,
) -> (f64, f64, f64, usize) {
    let (burst, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (p, burst, stop) = (published.clone(), burst.clone(), stop.clone());
            let spawn = thread::Builder::new().name("select-reader".into());
            spawn
                .spawn(move || {
                    let mut samples: Vec<u32> = Vec::with_capacity(4_000_000);
                    let start = Instant::now();
                    // Bounded: the burst takes milliseconds; 30 s is a hard stop.
                    while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30)
                    {
                        let t = Instant::now();
                        let _ = black_box(p.select_with(thread_random()));
                        let ns = t.elapsed().as_nanos();
                        if burst.load(Ordering::Relaxed) && samples.len() < samples.capacity() {
                            samples.push(u32::try_from(ns).unwrap_or(u32::MAX));
                        }
                    }
                    samples
                })
                .expect("reader thread")
        })
        .collect();
    thread::sleep(Duration::from_millis(20));
    burst.store(true, Ordering::Relaxed);
    let (t, cpu) = (Instant::now(), ThreadTime::now());
    for j in 0..BURST_EDITS {
        let base = *generation;
        *generation += 1;
        let victim = machine
            .snapshot()
            .sets()
            .first()
            .and_then(|s| s.get((j as usize * 7919) % s.len().max(1)))
            .map(|e| e.instance.id_arc().clone());
        let (upserts, removals) = match (j % 3, victim) {
            (0, Some(id)) => {
                // A restart: same id, new record.
                let host_id = id_index(&id);
                (vec![endpoint(host_id, 50, round, svc)], vec![])
            }
            (1, Some(id)) => (vec![], vec![id]),
            _ => {
                *next_id += 1;
                (
                    vec![endpoint(*next_id, 1 + (j as u32 % 100), round, svc)],
                    vec![],
                )
            }
        };
        let change = UrlChange::Delta {
            base: Version::at(base),
            version: Version::at(*generation),
            upserts,
            removals,
        };
        let (applied, retired) = machine.apply_at(update(change), Instant::now(), TOMBSTONE_TTL);
        assert!(applied.applied(), "patch on the version held");
        drop(published.store(machine.snapshot().clone()));
        drop(retired);
    }
    let burst_ms = t.elapsed().as_secs_f64() * 1e3;
    let writer_cpu_us = cpu.elapsed().as_secs_f64() * 1e6 / BURST_EDITS as f64;
    burst.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let mut all: Vec<u32> = Vec::new();
    for r in readers {
        all.extend(r.join().expect("reader"));
    }
    all.sort_unstable();
    let p99 = all
        .get((all.len() * 99) / 100)
        .map_or(f64::NAN, |&ns| f64::from(ns) / 1e3);
    (p99, burst_ms, writer_cpu_us, all.len())
}

/// The numeric id back from `10.a.b.c:20000`.
fn id_index(id: &str) -> usize {
    let host = id.split(':').next().unwrap_or("");
    let parts: Vec<usize> = host.split('.').filter_map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [_, a, b, c] => (a << 16) | (b << 8) | c,
        _ => 0,
    }
}

fn latency(rounds: usize) {
    let svc = Arc::new(ServiceEndpoint {
        protocol: "tri".into(),
        port: 50051,
        path: IFACE.into(),
        params: Default::default(),
    });
    let mut machine = DirectoryMachine::new(
        Reference::new(IFACE, "tri", [APP]).subscribe_key(),
        &[APP.to_string()],
        7,
    );
    let full = (0..BURST_SIZE)
        .map(|i| endpoint(i, 1 + (i as u32 * 37) % 100, 0, &svc))
        .collect();
    let t = Instant::now();
    let (applied, _) = machine.apply_at(
        update(UrlChange::Reset {
            version: Version::at(1),
            items: full,
        }),
        Instant::now(),
        TOMBSTONE_TTL,
    );
    assert!(applied.applied());
    let full_ms = t.elapsed().as_secs_f64() * 1e3;
    let published = Arc::new(Published::new(machine.snapshot().clone()));
    let (mut generation, mut next_id) = (1u64, BURST_SIZE);
    let (mut p99s, mut bursts, mut cpus, mut samples) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for round in 0..rounds {
        let (p99, ms, cpu, n) = burst_round(
            &mut machine,
            &published,
            &mut generation,
            &mut next_id,
            round as u64 + 1,
            &svc,
        );
        p99s.push(p99);
        bursts.push(ms);
        cpus.push(cpu);
        samples += n;
    }
    let worst = p99s.iter().copied().fold(0.0, f64::max);
    let (p99, ms, cpu) = (median(&mut p99s), median(&mut bursts), median(&mut cpus));
    println!(
        "  burst: {BURST_EDITS} single-endpoint patches at {BURST_SIZE} endpoints, \
         published after each: {ms:.1} ms wall per burst (3 threads on the machine's \
         cores), writer CPU {cpu:.1} us per edit (apply + publish + free, incl. building \
         the new endpoint); full build of the {BURST_SIZE} set: {full_ms:.1} ms; \
         {samples} timed selects; worst round p99 {worst:.2} us"
    );
    println!(
        "target p99 select during a {BURST_EDITS}-edit burst at {BURST_SIZE} = {p99:.2} us \
         (<= 5 us) {}",
        verdict(p99 <= 5.0)
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, picks) = if quick { (3, 1 << 20) } else { (7, 1 << 22) };
    println!(
        "bench_select: {ENDPOINTS} endpoints, {rounds} rounds of {picks} picks per side and \
         task count; medians{}",
        if quick { "; --quick" } else { "" }
    );
    if !std::env::args().any(|a| a == "--burst-only") {
        throughput(rounds, picks);
    }
    latency(rounds);
}
