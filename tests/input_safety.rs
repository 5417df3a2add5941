//! No panic from input: mutated bytes go to every decoder of the model and
//! the HTTP edge, whatever decodes is pushed through the resolver and the
//! directory, and every status and error is displayed. 100k+ cases per run,
//! seeded; a failure prints the seed and the case to replay it.
//! (The etcd crate's wire decoders have their own randomized test.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use steadfast::http::HttpMetadataFetcher;
use steadfast::{
    BackoffPolicy, DirectoryStatus, EmptyReason, ErrorClass, FetchError, HeldInstances,
    MetadataInfo, NotServing, RegistryError, ServiceInstance, ServiceUrl, Unresolved,
};
use steadfast_core::{check_metadata, compute_revision, ResolverMachine};
use steadfast_testkit::{instance_for, MetadataBuilder};

const CASES: usize = 120_000;

/// Odd pieces spliced into inputs: multi-byte UTF-8, huge and negative
/// numbers, escapes, structure.
const SPLICES: &[&str] = &[
    "é",
    "💥",
    "\u{10FFFF}",
    "\u{200B}",
    "ﬁ",
    "18446744073709551616",
    "-1",
    "1e400",
    "9223372036854775807",
    "\\u0000",
    "\\ud800",
    "null",
    "[]",
    "{}",
    "\"",
    ":",
    ",",
    "%",
    "%zz",
    "/",
    "..",
    "@",
    "[::1]",
    "0x10",
    "65536",
];

fn seeds() -> (Vec<u8>, Vec<u8>) {
    let info = MetadataBuilder::new("greeter")
        .service("demo.Greeter", "tri", 20000)
        .param("methods", "a,b")
        .build();
    let mut inst = instance_for(&info, "127.0.0.1", 8001);
    inst.metadata
        .insert("steadfast.metadata.port".into(), "8002".into());
    inst.metadata
        .insert("steadfast.export-ms".into(), "1700000000000".into());
    inst.metadata
        .insert("steadfast.boot-id".into(), "00ff00ff00ff00ff".into());
    (
        serde_json::to_vec(&inst).unwrap(),
        serde_json::to_vec(&info).unwrap(),
    )
}

fn mutate(rng: &mut StdRng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..rng.gen_range(1..6) {
        let at = rng.gen_range(0..=b.len());
        match rng.gen_range(0..5) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let s = SPLICES[rng.gen_range(0..SPLICES.len())].as_bytes();
                b.splice(at..at, s.iter().copied());
            }
            2 => b.truncate(at),
            3 if !b.is_empty() => {
                let end = rng.gen_range(at..=b.len().min(at + 16));
                let piece = b[at.min(end)..end].to_vec();
                b.splice(at..at, piece);
            }
            _ => b.insert(at, rng.gen()),
        }
    }
    b
}

fn odd_string(rng: &mut StdRng) -> String {
    let mut s = String::new();
    for _ in 0..rng.gen_range(0..6) {
        if rng.gen_bool(0.5) {
            s.push_str(SPLICES[rng.gen_range(0..SPLICES.len())]);
        } else {
            s.push(rng.gen::<char>());
        }
    }
    s
}

fn statuses(rng: &mut StdRng) -> Vec<DirectoryStatus> {
    let unresolved = Unresolved {
        revisions: (0..rng.gen_range(0..4)).map(|_| odd_string(rng)).collect(),
        since: Instant::now(),
        attempts: rng.gen(),
        last_error: Some(FetchError::Mismatch {
            expected: odd_string(rng),
            actual: odd_string(rng),
        }),
    };
    vec![
        DirectoryStatus::Empty(EmptyReason::Unresolved(unresolved.clone())),
        DirectoryStatus::Ready {
            endpoints: rng.gen(),
            stale_since: Some(Instant::now()),
            degraded: vec![(odd_string(rng), unresolved)],
            held: vec![(
                odd_string(rng),
                HeldInstances {
                    count: usize::MAX,
                    until: Instant::now(),
                    grace: Duration::MAX,
                },
            )],
            snapshot: Some(steadfast_core::ServedFromSnapshot {
                apps: vec![odd_string(rng)],
                freshness: steadfast_core::Freshness::Stale { age: Duration::MAX },
                source: steadfast_core::Source::Snapshot,
                subscribe: Some(steadfast_core::RegistryFailure {
                    since: Instant::now(),
                    attempts: u32::MAX,
                    last_error: RegistryError::Unavailable(odd_string(rng)),
                }),
            }),
            mapping: Some(steadfast_core::RegistryFailure {
                since: Instant::now(),
                attempts: rng.gen(),
                last_error: RegistryError::Panicked(odd_string(rng)),
            }),
        },
        DirectoryStatus::Empty(EmptyReason::NotServing(NotServing {
            unhealthy: usize::MAX,
            closing: usize::MAX,
            zero_weight: rng.gen(),
        })),
    ]
}

fn errors(rng: &mut StdRng) -> Vec<String> {
    vec![
        FetchError::Unreachable(odd_string(rng)).to_string(),
        FetchError::UnknownRevision(odd_string(rng)).to_string(),
        FetchError::Malformed(odd_string(rng)).to_string(),
        FetchError::TooLarge { limit: usize::MAX }.to_string(),
        FetchError::ServerError(rng.gen()).to_string(),
        FetchError::Panicked(odd_string(rng)).to_string(),
        RegistryError::Unavailable(odd_string(rng)).to_string(),
        RegistryError::Panicked(odd_string(rng)).to_string(),
    ]
}

/// Pushes decoded instances through a resolver (with fetched metadata) and
/// shows the result.
fn pipeline(instances: Vec<ServiceInstance>, info: Option<MetadataInfo>, now: Instant) {
    let mut m = ResolverMachine::new("greeter", BackoffPolicy::default(), 1);
    m.subscribe("demo.Greeter:tri");
    let actions = m.on_snapshot(steadfast::Version::at(1), Arc::new(instances), now);
    for a in actions {
        if let steadfast_core::ResolverAction::Fetch {
            revision, token, ..
        } = a
        {
            let result = match &info {
                Some(i) => check_metadata("greeter", &revision, i).map(|_| Arc::new(i.clone())),
                None => Err(FetchError::Malformed("x".into())),
            };
            m.on_fetch_result(&revision, token, result, now + Duration::from_millis(1));
        }
    }
    for u in m.take_updates() {
        let steadfast::UrlChange::Reset { items: urls, .. } = &u.change else {
            panic!("the first update of a key is full");
        };
        for url in urls.iter() {
            let _ = url.to_string();
            let _ = url.address();
        }
        let _ = format!("{:?}", u.state);
    }
}

#[test]
fn mutated_bytes_never_panic_any_decoder_or_display() {
    let seed: u64 = std::env::var("STEADFAST_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("input safety: seed {seed} (replay with STEADFAST_FUZZ_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let (inst_seed, info_seed) = seeds();
    let fetcher = HttpMetadataFetcher::builder().build().unwrap();
    let now = Instant::now();
    let mut decoded = (0usize, 0usize);
    for case in 0..CASES {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let inst_bytes = mutate(&mut rng, &inst_seed);
            let info_bytes = mutate(&mut rng, &info_seed);
            let inst = serde_json::from_slice::<ServiceInstance>(&inst_bytes).ok();
            let info = serde_json::from_slice::<MetadataInfo>(&info_bytes).ok();
            if let Some(i) = &inst {
                decoded.0 += 1;
                let _ = (
                    i.revision(),
                    i.incarnation(),
                    i.metadata_port(),
                    i.is_serving(),
                );
                let rev = i.revision().unwrap_or("r").to_string();
                let _ = fetcher.url_for(i, &rev).map(|u| u.to_string());
            }
            if let Some(m) = &info {
                decoded.1 += 1;
                let _ = compute_revision(&m.app, m.services.values());
                if let (Some(i), Some(s)) = (&inst, m.services.values().next()) {
                    let _ = ServiceUrl::build(i, s).to_string();
                }
            }
            if case % 8 == 0 {
                pipeline(inst.into_iter().collect(), info, now);
            }
            for s in statuses(&mut rng) {
                let _ = s.to_string();
            }
            let _ = errors(&mut rng);
            let policy = BackoffPolicy {
                initial: Duration::from_nanos(rng.gen()),
                max: Duration::new(rng.gen(), rng.gen_range(0..1_000_000_000)),
                multiplier: f64::from_bits(rng.gen()),
                jitter: f64::from_bits(rng.gen()),
            };
            let _ = policy.validate();
            let _ = policy.delay(rng.gen(), ErrorClass::Transient, &mut rng);
            let meta: BTreeMap<String, String> = [
                ("steadfast.export-ms".to_string(), odd_string(&mut rng)),
                ("steadfast.boot-id".to_string(), odd_string(&mut rng)),
            ]
            .into();
            let _ = steadfast::Incarnation::from_metadata(&meta);
        }));
        assert!(
            outcome.is_ok(),
            "case {case} panicked (seed {seed}); replay with STEADFAST_FUZZ_SEED={seed}"
        );
    }
    println!(
        "input safety: {CASES} cases, {} instances and {} metadata decoded, 0 panics",
        decoded.0, decoded.1
    );
    assert!(
        decoded.0 > 1000 && decoded.1 > 1000,
        "mutations still reach the code behind the decoders"
    );
}
