//! Snapshot-to-directory latency of the engine versus a plain baseline.
//!
//! One provider app, N instances over 100 revisions whose MetadataInfo each
//! export 3 services; one reference subscribes to one of them. After a warm-up
//! (all revisions fetched and cached, directory Ready with N endpoints), each
//! round pushes a NEW snapshot (new port / id / weight / boot id per instance,
//! so every URL is rebuilt) with `MemoryRegistry::set_instances`; the clock
//! stops when the directory serves the new endpoints, found by polling
//! `select()` (cheap, unlike `view()` which clones all N URLs: each round has
//! its own weight and updates apply atomically). The baseline builds the same
//! URLs from the same instance vector in one thread: group by revision, then
//! `ServiceUrl::build`. Also printed: `set_instances` alone, the sans-IO
//! `ResolverMachine` stages on the same snapshots, the cost of freeing one URL
//! list, and of one `view()` / `select()` poll.
//!
//! Run: `cargo run --release --example bench_pipeline [-- --quick]`.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use steadfast::core::{ResolverAction, ResolverMachine, ServiceEndpoint};
use steadfast::{
    BackoffPolicy, Directory, DirectoryStatus, Engine, MemoryRegistry, MetadataInfo, Reference,
    ServiceInstance, ServiceUrl,
};
use steadfast_testkit::{InstanceBuilder, MetadataBuilder, ScriptedFetcher};

const APP: &str = "bench-provider";
const REVISIONS: usize = 100;
const IFACES: [&str; 3] = ["bench.Alpha", "bench.Beta", "bench.Gamma"];
const SUBSCRIBED: &str = "bench.Beta";
const TIMEOUT: Duration = Duration::from_secs(60);
const BASE_WEIGHT: u32 = 100;

/// The 100 revisions of the provider, 3 services each.
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

/// `n` instances round-robin over the revisions; `round` changes the port
/// (hence the id), the weight and the incarnation of every instance.
fn instances(n: usize, metas: &[MetadataInfo], round: u32) -> Vec<ServiceInstance> {
    (0..n)
        .map(|i| {
            let host = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            InstanceBuilder::new(APP, host, 20_000 + round as u16)
                .weight(BASE_WEIGHT + round)
                .revision(metas[i % REVISIONS].revision.clone())
                .incarnation(
                    1_700_000_000_000 + u64::from(round),
                    format!("b{round}-{i}"),
                )
                .build()
        })
        .collect()
}

/// What the engine must do, single-threaded and without bookkeeping.
fn baseline(
    instances: &[ServiceInstance],
    metas: &HashMap<String, MetadataInfo>,
    key: &str,
) -> Vec<ServiceUrl> {
    let mut groups: HashMap<&str, Vec<&ServiceInstance>> = HashMap::new();
    for i in instances.iter().filter(|i| i.is_serving()) {
        if let Some(r) = i.revision() {
            groups.entry(r).or_default().push(i);
        }
    }
    let mut urls = Vec::with_capacity(instances.len());
    for (rev, group) in groups {
        if let Some(svc) = metas.get(rev).and_then(|m| m.services.get(key)) {
            let endpoint = ServiceEndpoint::of(svc);
            urls.extend(group.into_iter().map(|i| {
                ServiceUrl::new(
                    &std::sync::Arc::new(steadfast::core::Instance::decode(
                        i,
                        &mut Default::default(),
                    )),
                    &endpoint,
                )
            }));
        }
    }
    urls
}

/// A tighter hand-rolled variant: no grouping, one metadata lookup per
/// instance, in snapshot order (printed for reference, not a target).
fn baseline_in_order(
    instances: &[ServiceInstance],
    metas: &HashMap<String, MetadataInfo>,
    key: &str,
) -> Vec<ServiceUrl> {
    let mut endpoints: HashMap<&str, Arc<ServiceEndpoint>> = HashMap::new();
    let mut urls = Vec::with_capacity(instances.len());
    for i in instances.iter().filter(|i| i.is_serving()) {
        let Some(rev) = i.revision() else { continue };
        let endpoint = match endpoints.get(rev) {
            Some(ep) => Some(ep.clone()),
            None => metas.get(rev).and_then(|m| m.services.get(key)).map(|svc| {
                endpoints
                    .entry(rev)
                    .or_insert(ServiceEndpoint::of(svc))
                    .clone()
            }),
        };
        if let Some(ep) = endpoint {
            urls.push(ServiceUrl::new(
                &std::sync::Arc::new(steadfast::core::Instance::decode(
                    i,
                    &mut Default::default(),
                )),
                &ep,
            ));
        }
    }
    urls
}

/// Median and minimum of `v`, in ms.
fn stats(v: &[Duration]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(v[v.len() / 2]), ms(v[0]))
}

/// One size: N, warm-up ms, the samples of engine, push, baseline,
/// on_snapshot, take_updates, free, view and select, and updates/snapshot.
struct Row(usize, f64, [Vec<Duration>; 9], u64);

/// Polls `select` (cheap) until an endpoint of weight `weight` shows up.
async fn wait_weight(dir: &Directory, weight: u32, start: Instant) -> Duration {
    loop {
        if let Ok(Some(u)) = dir.select().await {
            if u.weight() == weight {
                return start.elapsed();
            }
        }
        assert!(start.elapsed() < TIMEOUT, "timed out at weight {weight}");
        tokio::task::yield_now().await;
    }
}

/// Times `f`, returning its result and the elapsed time.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

async fn bench_size(n: usize, warmups: u32, runs: u32) -> Row {
    let metas = metadata();
    let by_rev: HashMap<String, MetadataInfo> = metas
        .iter()
        .map(|m| (m.revision.clone(), m.clone()))
        .collect();
    let reference = Reference::new(SUBSCRIBED, "tri", [APP]);
    let key = reference.subscribe_key();
    let (registry, fetcher) = (MemoryRegistry::new(), ScriptedFetcher::new());
    metas.iter().for_each(|m| fetcher.serve(m.clone()));
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(7)
        .start()
        .expect("engine starts");
    let dir = engine.subscribe(reference).await.expect("subscribe");

    // The sans-IO resolver, warmed with the same metadata, for the breakdown.
    let mut machine = ResolverMachine::new(APP, BackoffPolicy::default(), 7);
    let now = Instant::now();
    machine.subscribe(&key);
    let warm = instances(n, &metas, 0);
    for a in machine.on_snapshot(1, Arc::new(warm.clone()), now) {
        if let ResolverAction::Fetch {
            revision: r, token, ..
        } = a
        {
            machine.on_fetch_result(&r, token, Ok(Arc::new(by_rev[&r].clone())), now);
        }
    }
    assert_eq!(machine.take_updates()[0].urls().len(), n);

    // Warm the engine: every revision fetched, directory Ready with n.
    let t0 = Instant::now();
    registry.set_instances(APP, warm);
    let mut version = loop {
        let v = dir.view().await.expect("directory open");
        if matches!(&v.status, DirectoryStatus::Ready { endpoints, degraded, .. }
            if *endpoints == n && degraded.is_empty())
        {
            break v.version;
        }
        assert!(t0.elapsed() < TIMEOUT, "warm-up timed out: {:?}", v.status);
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let warm_ms = t0.elapsed().as_secs_f64() * 1e3;

    let mut s: [Vec<Duration>; 9] = Default::default();
    let mut updates_per_snapshot = 0;
    for round in 1..=warmups + runs {
        let inst = instances(n, &metas, round);
        let weight = BASE_WEIGHT + round;

        // Engine: registry push until the directory serves the new snapshot.
        let (copy, t) = (inst.clone(), Instant::now());
        let ((), push) = timed(|| registry.set_instances(APP, copy));
        let engine_t = wait_weight(&dir, weight, t).await;
        // Let work the engine defers past publication (freeing the replaced
        // snapshot and URL list, ~20 ms later) finish off the clock, as the
        // baseline's frees are: the next round must not pay for this one.
        tokio::time::sleep(Duration::from_millis(60)).await;

        // Off the clock: check the view; its cost is that of a view() poll.
        let t = Instant::now();
        let view = dir.view().await.expect("directory open");
        let view_t = t.elapsed();
        assert_eq!(view.endpoints.len(), n, "endpoint count");
        assert!(
            view.endpoints.iter().all(|u| u.weight() == weight),
            "stale URL"
        );
        updates_per_snapshot = updates_per_snapshot.max(view.version - version);
        version = view.version;
        let t = Instant::now();
        black_box(dir.select().await.expect("directory open"));
        let select_t = t.elapsed();

        // Baseline on the same instance vector, then the cost of freeing it.
        let (urls, base) = timed(|| black_box(baseline(&inst, &by_rev, &key)));
        assert_eq!(urls.len(), n, "baseline count");
        if round == warmups + runs {
            let (mut a, mut b) = (urls.clone(), view.endpoints);
            a.sort();
            b.sort();
            assert!(a == b, "engine and baseline disagree");
        }
        let ((), free) = timed(|| drop(urls));
        let (urls, in_order) = timed(|| black_box(baseline_in_order(&inst, &by_rev, &key)));
        assert_eq!(urls.len(), n, "in-order baseline count");
        drop(urls);

        // Sans-IO resolver stages on the same snapshot.
        let arc = Arc::new(inst);
        let (actions, snap) = timed(|| machine.on_snapshot(u64::from(round) + 1, arc, now));
        assert!(actions.is_empty(), "a warm resolver must not fetch");
        let (ups, take) = timed(|| black_box(machine.take_updates()));
        assert_eq!(ups[0].urls().len(), n);
        drop(ups);

        if round > warmups {
            let all = [
                engine_t, push, base, snap, take, free, view_t, select_t, in_order,
            ];
            s.iter_mut().zip(all).for_each(|(s, d)| s.push(d));
        }
    }
    engine.shutdown().await;
    Row(n, warm_ms, s, updates_per_snapshot)
}

fn verdict(ok: bool) -> &'static str {
    ["MISS", "PASS"][usize::from(ok)]
}

/// Prints a table: comma-separated `head`, right-aligned cells, notes.
fn table(head: &str, rows: Vec<Vec<String>>, notes: &str) {
    let mut all = vec![head.split(',').map(String::from).collect::<Vec<_>>()];
    all.extend(rows);
    let width = |c: usize| all.iter().map(|r| r[c].len()).max().unwrap_or(0);
    let w: Vec<usize> = (0..all[0].len()).map(width).collect();
    println!();
    for (k, r) in all.iter().enumerate() {
        let cells: Vec<String> = r.iter().zip(&w).map(|(s, w)| format!("{s:>w$}")).collect();
        println!("{}", cells.join(" | "));
        if k == 0 {
            println!(
                "{}",
                "-".repeat(w.iter().sum::<usize>() + 3 * (w.len() - 1))
            );
        }
    }
    println!("{notes}");
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (sizes, warmups, runs) = if quick {
        ([1_000, 10_000], 1, 3)
    } else {
        ([10_000, 100_000], 2, 7)
    };
    println!(
        "bench_pipeline: {REVISIONS} revisions x {} services, subscribed {SUBSCRIBED}:tri; \
         {warmups} warm-up + {runs} measured rounds; median (min) in ms{}",
        IFACES.len(),
        if quick { "; --quick" } else { "" }
    );
    let system = actix_rt::System::new();
    let bench = |n| system.block_on(bench_size(n, warmups, runs));
    let rows: Vec<Row> = sizes.into_iter().map(bench).collect();

    let f = |x: f64| format!("{x:.2}");
    let both = |(m, min): (f64, f64)| format!("{m:.2} ({min:.2})");
    let rows1 = rows.iter().map(|Row(n, warm, s, _)| {
        let (e, p, b) = (stats(&s[0]).0, stats(&s[1]).0, stats(&s[2]).0);
        let cells = [
            both(stats(&s[0])),
            f(p),
            f(e - p),
            both(stats(&s[2])),
            f(e / b),
        ];
        [
            vec![n.to_string()],
            cells.to_vec(),
            vec![format!("{warm:.0}")],
        ]
        .concat()
    });
    table(
        "N,engine,push,pipeline,baseline,eng/base,warm-up",
        rows1.collect(),
        "  engine: set_instances -> directory serves the new URLs; push: set_instances alone;\n  \
         pipeline: engine - push; warm-up: first snapshot incl. 100 fetches (one run).",
    );
    let rows2 = rows.iter().map(|Row(n, _, s, upd)| {
        let m: Vec<f64> = s.iter().map(|v| stats(v).0).collect();
        let cells = [f(m[3]), f(m[4]), f(m[5]), f(m[6]), format!("{:.3}", m[7])];
        [vec![n.to_string()], cells.to_vec(), vec![upd.to_string()]].concat()
    });
    table(
        "N,on_snapshot,take_updates,free urls,view(),select(),upd/snap",
        rows2.collect(),
        "  sans-IO ResolverMachine stages on the same snapshots (on_snapshot includes freeing\n  \
         the previous snapshot); free urls: dropping one N-URL list; view()/select(): one poll.",
    );

    println!("\nreference: engine / in-order hand-rolled loop (no grouping, not a target):");
    for Row(n, _, s, _) in &rows {
        let (e, b) = (stats(&s[0]).0, stats(&s[8]).0);
        println!(
            "  N={n:<7} in-order loop {b:>8.2} ms   engine/in-order = {:.2}",
            e / b
        );
    }

    println!("\ntargets:");
    for Row(n, _, s, _) in &rows {
        let ((e, e_min), (b, b_min)) = (stats(&s[0]), stats(&s[2]));
        let (ratio, ok) = (e / b, e / b <= 1.5);
        let min_ratio = e_min / b_min;
        println!(
            "  N={n:<7} engine/baseline        = {ratio:>6.2}  (<= 1.5)  {}   [min/min {min_ratio:.2}]",
            verdict(ok)
        );
    }
    let (Row(small, _, s1, _), Row(large, _, s2, _)) = (&rows[0], &rows[1]);
    let scale = stats(&s2[0]).0 / stats(&s1[0]).0;
    let base_scale = stats(&s2[2]).0 / stats(&s1[2]).0;
    println!(
        "  engine({large})/engine({small}) = {scale:>6.2}  (<= 11)   {}   [baseline scales {base_scale:.2}]",
        verdict(scale <= 11.0)
    );
}
