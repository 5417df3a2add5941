//! Randomized input safety: mutated bytes into every decoder of the crate
//! (gateway answers, stream framing and parsing, the watch body stream,
//! record decoding), what decodes into the sans-IO machines, and every
//! error's `Display`. Zero panics allowed. Seeded; the seed is printed
//! (`STEADFAST_FUZZ_SEED=<seed>` replays a run).

use std::convert::Infallible;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::executor::block_on;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use steadfast_core::{ErrorClass, FetchError, PublishError, RegistryError, ServiceInstance};

use crate::error::GatewayError;
use crate::framing::{parse_line, Line, LineFramer};
use crate::keeper_machine::{KeeperMachine, KeeperPolicy, RoundOutcome};
use crate::prober_machine::{ProberMachine, ProberPolicy, SubId, Want};
use crate::records::KeyLayout;
use crate::stats::EtcdStats;
use crate::watch_body::{watch_stream, WatchError};
use crate::watch_machine::{Interruption, WatchMachine, WatchTiming};
use crate::wire::{
    DeleteRangeResponse, HeaderOnly, LeaseGrantResponse, LeaseKeepAliveResponse, RangeResponse,
    StatusResponse, StreamLine, UnaryError, WatchResponse,
};
use crate::{EtcdConfig, EtcdConfigError, InvalidRecord};

const CASES: usize = 120_000;

const CORPUS: &[&str] = &[
    r#"{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"3","raft_term":"2"}}"#,
    r#"{"header":{"revision":"5"},"kvs":[{"key":"L3Avc2VydmljZXMvd2ViL2E6ODA=","create_revision":"2","mod_revision":"3","version":"2","value":"eyJpZCI6ImE6ODAiLCJhcHAiOiJ3ZWIiLCJob3N0IjoiYSIsInBvcnQiOjgwfQ==","lease":"7587"}],"count":"1","more":true}"#,
    r#"{"header":{},"deleted":"1","prev_kvs":[{"key":"YQ==","mod_revision":"9"}]}"#,
    r#"{"header":{},"ID":"2324035701326297874","TTL":"5"}"#,
    r#"{"result":{"header":{},"ID":"2324035701326297874","TTL":"5"}}"#,
    r#"{"result":{"header":{},"ID":"999999"}}"#,
    r#"{"error":"etcdserver: no leader","message":"etcdserver: no leader","code":14}"#,
    r#"{"header":{"member_id":"7"},"leader":"7","version":"3.4.23","errors":["x"]}"#,
    r#"{"result":{"header":{"cluster_id":"42","revision":"13","raft_term":"2"},"created":true}}"#,
    r#"{"result":{"header":{"cluster_id":"42","revision":"14"},"events":[{"kv":{"key":"L3Avc2VydmljZXMvd2ViL2E6ODA=","create_revision":"14","mod_revision":"14","version":"1","value":"eyJpZCI6ImE6ODAiLCJhcHAiOiJ3ZWIiLCJob3N0IjoiYSIsInBvcnQiOjgwfQ=="}}]}}"#,
    r#"{"result":{"header":{"cluster_id":"42","revision":"16"},"events":[{"type":"DELETE","kv":{"key":"L3Avc2VydmljZXMvd2ViL2E6ODA=","mod_revision":"16"},"prev_kv":{"key":"YQ==","lease":"5"}}]}}"#,
    r#"{"result":{"header":{"cluster_id":"42"},"canceled":true,"compact_revision":"10","cancel_reason":"compacted"}}"#,
    r#"{"result":{"header":{"cluster_id":"42","revision":"25"}}}"#,
    r#"{"error":{"grpc_code":14,"http_code":503,"message":"transport is closing","http_status":"Service Unavailable"}}"#,
    r#"{"id":"a:80","app":"web","host":"a","port":80,"weight":100,"healthy":true,"metadata":{"k":"v"}}"#,
];

/// Tokens spliced into inputs: numbers etcd never sends, odd JSON, and
/// multi-byte / invalid UTF-8.
const SPLICES: &[&[u8]] = &[
    b"\"9223372036854775807\"",
    b"\"-9223372036854775808\"",
    b"\"18446744073709551615\"",
    b"\"18446744073709551616\"",
    b"9223372036854775807",
    b"-1",
    b"0",
    b"1e999",
    b"null",
    b"\"\"",
    b"[]",
    b"{}",
    "é🦀ß".as_bytes(),
    b"\xff\xfe\xc3",
    b"\n",
    b"\"AAAA====\"",
];

fn seed() -> u64 {
    std::env::var("STEADFAST_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

fn mutate(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        let at = rng.gen_range(0..=v.len());
        match rng.gen_range(0..7) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => v.insert(at, rng.gen()),
            2 if at < v.len() => {
                let end = rng.gen_range(at..=v.len().min(at + 16));
                v.drain(at..end);
            }
            3 => {
                let s = SPLICES[rng.gen_range(0..SPLICES.len())];
                v.splice(at..at, s.iter().copied());
            }
            4 => {
                // Replace a run of digits (or a quoted value) with a splice.
                if let Some(p) = v.iter().skip(at).position(u8::is_ascii_digit) {
                    let start = at + p;
                    let len = v[start..].iter().take_while(|b| b.is_ascii_digit()).count();
                    let s = SPLICES[rng.gen_range(0..8)];
                    v.splice(start..start + len, s.iter().copied());
                }
            }
            5 => v.truncate(at),
            _ => {
                let end = rng.gen_range(at..=v.len().min(at + 32));
                let dup: Vec<u8> = v[at..end].to_vec();
                v.splice(at..at, dup);
            }
        }
    }
    v
}

fn split(rng: &mut StdRng, input: &[u8]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = (0..rng.gen_range(0..4))
        .map(|_| rng.gen_range(0..=input.len()))
        .collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain([input.len()]) {
        out.push(input[last..c].to_vec());
        last = c;
    }
    out
}

struct Eof;
impl std::fmt::Debug for Eof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Eof")
    }
}
impl std::fmt::Display for Eof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("unexpected EOF during chunk size line")
    }
}
impl std::error::Error for Eof {}

/// Everything one input goes through.
struct Target {
    machine: WatchMachine,
    keeper: KeeperMachine,
    prober: ProberMachine,
    sub: SubId,
    layout: KeyLayout,
    t: Instant,
}

fn show<T: std::fmt::Debug>(r: Result<T, serde_json::Error>) {
    let _ = match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => e.to_string(),
    };
}

fn errors_of(text: &str, n: i64) -> Vec<String> {
    let s = || text.to_string();
    let gateway = [
        GatewayError::NoEndpoints,
        GatewayError::Config(EtcdConfigError::Zero("x")),
        GatewayError::Client(s()),
        GatewayError::Unreachable {
            endpoint: s(),
            reason: s(),
        },
        GatewayError::Timeout {
            endpoint: s(),
            timeout: Duration::from_nanos(n.unsigned_abs()),
        },
        GatewayError::Status {
            status: n as u16,
            code: n,
            message: s(),
        },
        GatewayError::Body(s()),
        GatewayError::Decode(s()),
    ];
    let mut out: Vec<String> = Vec::new();
    for g in gateway {
        out.push(format!("{g} {:?} {:?}", g.class(), g.is_unavailable()));
        out.push(RegistryError::from(g.clone()).to_string());
        out.push(FetchError::from(g.clone()).to_string());
        out.push(PublishError::from(g).to_string());
    }
    let invalid = [
        InvalidRecord::BadKey(s()),
        InvalidRecord::BadJson {
            key: s(),
            reason: s(),
        },
        InvalidRecord::ForeignApp {
            key: s(),
            expected: s(),
            actual: s(),
        },
        InvalidRecord::IdMismatch {
            key: s(),
            expected: s(),
            actual: s(),
        },
        InvalidRecord::Dubbo {
            key: s(),
            source: steadfast_core::DubboRecordError::StorageType(s()),
        },
    ];
    out.extend(invalid.iter().map(ToString::to_string));
    out.push(WatchError::Transport(s()).to_string());
    out.push(WatchError::Malformed(s()).to_string());
    out.push(EtcdConfigError::TooLong("x").to_string());
    out.push(format!("{:?}", EtcdStats::default().snapshot()));
    out
}

impl Target {
    fn new(rng: &mut StdRng) -> Self {
        let mut c = EtcdConfig::new(["http://e:1"]);
        c.progress_notify = true;
        c.watch_idle_timeout = Some(Duration::from_secs(5));
        let mut machine = WatchMachine::new(
            KeyLayout::new("/p"),
            "web",
            WatchTiming::from_config(&c),
            Arc::default(),
            StdRng::seed_from_u64(rng.gen()),
        );
        machine.start();
        let policy = KeeperPolicy::for_ttl(
            10,
            steadfast_core::RecoverPolicy::default(),
            c.reregister_spread,
        );
        let t = Instant::now();
        let mut prober = ProberMachine::new(
            2,
            ProberPolicy::from_config(&c),
            StdRng::seed_from_u64(rng.gen()),
        );
        let sub = prober.subscribe();
        Self {
            machine,
            keeper: KeeperMachine::new(policy, t, StdRng::seed_from_u64(rng.gen())),
            prober,
            sub,
            layout: KeyLayout::new("/p"),
            t,
        }
    }

    fn feed(&mut self, rng: &mut StdRng, input: &[u8], case: usize) {
        // The range decoder sees every input (the machine needs it); the
        // other unary decoders two in seven each, round robin.
        let range = serde_json::from_slice::<RangeResponse>(input);
        for pick in [case % 7, (case + 3) % 7] {
            match pick {
                0 => show(serde_json::from_slice::<HeaderOnly>(input)),
                1 => show(serde_json::from_slice::<DeleteRangeResponse>(input)),
                2 => show(serde_json::from_slice::<LeaseGrantResponse>(input)),
                3 => show(serde_json::from_slice::<StatusResponse>(input)),
                4 => show(serde_json::from_slice::<UnaryError>(input)),
                5 => show(serde_json::from_slice::<StreamLine<LeaseKeepAliveResponse>>(input)),
                _ => {
                    let _ = format!("{:?}", parse_line::<LeaseKeepAliveResponse>(input));
                }
            }
        }

        // Framing across random chunk boundaries.
        let mut framer = LineFramer::new();
        let mut lines = Vec::new();
        for chunk in split(rng, input) {
            lines.extend(framer.push(&chunk));
        }
        lines.extend(framer.finish());

        // The watch machine gets whatever decodes.
        self.t += Duration::from_millis(rng.gen_range(0..3000));
        let t = self.t;
        match &range {
            Ok(r) => {
                self.machine.on_range(r, t);
                self.machine.on_opened(t);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
        if lines.is_empty() {
            lines.push(input.to_vec());
        }
        for line in &lines {
            match parse_line::<WatchResponse>(line) {
                Line::Message(m) => {
                    self.machine.on_message(&m, t);
                }
                Line::ServerError(e) => {
                    let e = WatchError::Server(e);
                    let _ = e.to_string();
                    self.machine.on_interrupted(&Interruption::Stream(e), t);
                }
                Line::Malformed(m) => {
                    let _ = WatchError::Malformed(m).to_string();
                }
            }
        }
        if self.machine.next_wake().is_some_and(|w| w <= t) {
            self.machine.on_timer(t);
        }
        // The shared prober, fed this input as a probe answer, and its
        // verdicts fed to the watch.
        let want = match rng.gen_range(0..4) {
            0 => Want::Nothing,
            1 => Want::Live(rng.gen_range(0..3)),
            _ => Want::Answer(Duration::from_millis(rng.gen_range(0..2000))),
        };
        self.prober.set_want(self.sub, want, t);
        for order in self.prober.on_timer(t) {
            let h = serde_json::from_slice::<HeaderOnly>(input).unwrap_or_default();
            let ok = rng.gen_bool(0.5).then_some(&h.header);
            let sent = t.checked_sub(Duration::from_millis(rng.gen_range(0..2000)));
            self.prober
                .on_result(order.seq, rng.gen_range(0..3), ok, sent.unwrap_or(t), t);
            match rng.gen_range(0..3) {
                0 => self.machine.on_endpoint_dead(None, t),
                1 => self.machine.on_answered(t),
                _ => self
                    .machine
                    .on_probe_header(&h.header, sent.unwrap_or(t), t),
            };
        }
        let _ = (self.machine.probe_need(), self.prober.next_wake());
        if case.is_multiple_of(64) {
            let _ = self.machine.snapshot();
        }

        // Records: mutated keys and values.
        let key = mutate(rng, b"/p/services/web/a:80");
        let _ = self.layout.decode_instance("web", &key, input);
        let _ = self.layout.instance_id("web", input);

        // The keeper machine on random outcomes.
        let outcome = match rng.gen_range(0..4) {
            0 => RoundOutcome::Alive,
            1 => RoundOutcome::LeaseGone,
            2 => RoundOutcome::KeyVanished,
            _ => RoundOutcome::Failed(ErrorClass::Transient),
        };
        self.keeper.on_wake(t);
        self.keeper.on_round(outcome, t);
        if rng.gen_ratio(1, 8) {
            self.keeper.on_answered(t);
        }

        // Every error's Display, with this input as its text (on a sample:
        // formatting does not depend on much more than the text).
        if case.is_multiple_of(8) {
            let text = String::from_utf8_lossy(input);
            let n = (input.len() as i64).wrapping_mul(if rng.gen() { i64::MAX / 7 } else { -3 });
            for e in errors_of(&text, n) {
                assert!(!e.is_empty());
            }
        }

        // The watch body stream, on a sample (it is the slowest target).
        if case.is_multiple_of(16) {
            let mut chunks: Vec<Result<Vec<u8>, Eof>> =
                split(rng, input).into_iter().map(Ok).collect();
            if rng.gen() {
                chunks.push(Err(Eof));
            }
            let items = block_on(watch_stream(futures::stream::iter(chunks)).collect::<Vec<_>>());
            for item in items {
                let _ = item.map_err(|e| e.to_string());
            }
            let ok: Vec<Result<Vec<u8>, Infallible>> = vec![Ok(input.to_vec())];
            let _ = block_on(watch_stream(futures::stream::iter(ok)).collect::<Vec<_>>());
        }
    }
}

#[test]
fn mutated_bytes_never_panic_a_decoder_a_machine_or_a_display() {
    let seed = seed();
    println!("fuzz seed {seed} (replay: STEADFAST_FUZZ_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut target = Target::new(&mut rng);
    let started = Instant::now();
    let instance = serde_json::to_vec(&ServiceInstance::new("web", "a", 80)).unwrap();
    // A Dubbo provider's record (Java's spelling) with its embedded JSON.
    let dubbo = br#"{"serviceName":"web","host":"a","port":80,"Weight":0,"metadata":{"dubbo.metadata.revision":"r","dubbo.endpoints":"[{"port":80,"protocol":"tri"}]","dubbo.metadata-service.url-params":"{"port":"81","protocol":"tri"}","timestamp":"5"}}"#;
    for case in 0..CASES {
        let base = if case.is_multiple_of(10) {
            &dubbo[..]
        } else if case.is_multiple_of(5) {
            &instance[..]
        } else {
            CORPUS[rng.gen_range(0..CORPUS.len())].as_bytes()
        };
        let input = mutate(&mut rng, base);
        if case.is_multiple_of(10_000) {
            target = Target::new(&mut rng);
        }
        let r = catch_unwind(AssertUnwindSafe(|| target.feed(&mut rng, &input, case)));
        assert!(
            r.is_ok(),
            "seed {seed}, case {case}: panic on {:?}",
            String::from_utf8_lossy(&input)
        );
    }
    println!("fuzz: {CASES} cases in {:?}, 0 panics", started.elapsed());
}

#[test]
fn config_values_never_panic_validation_or_arithmetic() {
    let mut rng = StdRng::seed_from_u64(seed());
    for _ in 0..20_000 {
        let mut c = EtcdConfig::new(["http://e:1"]);
        let mut d = || match rng.gen_range(0..4) {
            0 => Duration::ZERO,
            1 => Duration::MAX,
            2 => Duration::from_nanos(rng.gen()),
            _ => Duration::from_millis(rng.gen_range(0..100_000)),
        };
        c.lease_ttl = d();
        c.probe_timeout = d();
        c.stale_after = d();
        c.reregister_spread = d();
        c.recover_probe_interval = d();
        c.liveness_probe_interval = Some(d());
        c.backoff.max = d();
        c.keepalive_probe_interval = d();
        c.backoff.initial = d();
        let _ = (c.validate(), c.lease_ttl_secs());
        let policy = KeeperPolicy::for_ttl(
            c.lease_ttl_secs(),
            steadfast_core::RecoverPolicy::default(),
            c.reregister_spread,
        );
        let t = Instant::now();
        let mut k = KeeperMachine::new(policy, t, StdRng::seed_from_u64(1));
        k.on_round(RoundOutcome::Failed(ErrorClass::Persistent), t);
        k.on_answered(t);
        c.probe_failures = rng.gen();
        c.backoff.jitter = [f64::NAN, -1.0, 0.5, 7.0][rng.gen_range(0..4)];
        let timing = WatchTiming::from_config(&c);
        // Any timing: the watch never schedules a wake-up in the past.
        let mut m = WatchMachine::new(
            KeyLayout::new("/p"),
            "web",
            timing,
            Arc::default(),
            StdRng::seed_from_u64(1),
        );
        m.start();
        m.on_interrupted(&Interruption::Ended, t);
        // (A zero `stale_after` reports at once, once.)
        if m.next_wake().is_some_and(|w| w <= t) {
            m.on_timer(t);
        }
        assert!(m.next_wake().is_none_or(|w| w > t), "{timing:?}");
        // Any cadence: the prober never asks to be woken in the past.
        let mut p = ProberMachine::new(1, ProberPolicy::from_config(&c), StdRng::seed_from_u64(2));
        let sub = p.subscribe();
        p.set_want(sub, Want::Answer(c.keepalive_probe_interval), t);
        let live = p.subscribe();
        p.set_want(live, Want::Live(0), t);
        for _ in 0..3 {
            for o in p.on_timer(p.next_wake().unwrap_or(t)) {
                p.on_result(o.seq, 0, None, t, t);
            }
            assert!(p.next_wake().is_none_or(|w| w > t));
        }
    }
}
