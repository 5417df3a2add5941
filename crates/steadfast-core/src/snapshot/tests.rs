//! Snapshot format, schedule and age rules, with a randomized decoder test:
//! arbitrary or mutated bytes never panic the decoder and a mutated file is
//! never accepted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::model::{MetadataInfo, ServiceInfo, ServiceInstance};

const MAX: usize = DEFAULT_MAX_BYTES;

fn meta(app: &str, port: u16) -> MetadataInfo {
    MetadataInfo::new(
        app,
        [ServiceInfo {
            name: "demo.Greeter".into(),
            group: None,
            version: None,
            protocol: "tri".into(),
            port,
            path: "demo.Greeter".into(),
            params: Default::default(),
        }],
    )
}

fn sample(app: &str, n: u16) -> AppSnapshot {
    let m = meta(app, 20000);
    let instances = (0..n)
        .map(|i| {
            let mut inst = ServiceInstance::new(app, "127.0.0.1", 8000 + i);
            inst.set_revision(m.revision.clone());
            inst
        })
        .collect();
    AppSnapshot {
        app: app.into(),
        written_at_ms: 1_700_000_000_000,
        instances,
        metadata: BTreeMap::from([(m.revision.clone(), m)]),
    }
}

#[test]
fn a_snapshot_round_trips() {
    let s = sample("greeter", 3);
    let bytes = encode(&s, MAX).unwrap();
    assert_eq!(bytes.get(..8), Some(&MAGIC[..]));
    assert_eq!(decode(&bytes, "greeter", MAX).unwrap(), s);
}

#[test]
fn each_kind_of_bad_file_is_named() {
    let bytes = encode(&sample("greeter", 2), MAX).unwrap();
    let err = |b: &[u8]| decode(b, "greeter", MAX).unwrap_err();
    assert!(matches!(
        err(bytes.get(..30).unwrap()),
        SnapshotError::Truncated { .. }
    ));
    assert!(matches!(
        err(bytes.split_last().unwrap().1),
        SnapshotError::Truncated { .. }
    ));
    assert!(matches!(
        err(bytes.get(..3).unwrap()),
        SnapshotError::Truncated { .. }
    ));
    assert!(matches!(err(b""), SnapshotError::Truncated { .. }));
    assert!(matches!(err(b"{\"app\":1}"), SnapshotError::Foreign { .. }));
    let mut flipped = bytes.clone();
    let last = flipped.len() - 2;
    flipped[last] ^= 0x01;
    assert!(matches!(err(&flipped), SnapshotError::Corrupt { .. }));
    let mut longer = bytes.clone();
    longer.push(b' ');
    assert!(matches!(err(&longer), SnapshotError::Corrupt { .. }));
    let mut v2 = bytes.clone();
    v2[8] = 2;
    assert!(matches!(
        err(&v2),
        SnapshotError::UnsupportedVersion { found: 2, .. }
    ));
    let other = decode(&bytes, "billing", MAX).unwrap_err();
    assert!(matches!(other, SnapshotError::Foreign { .. }), "{other}");
    assert!(matches!(
        decode(&bytes, "greeter", 100).unwrap_err(),
        SnapshotError::TooLarge { .. }
    ));
    assert!(matches!(
        encode(&sample("greeter", 50), 200).unwrap_err(),
        SnapshotError::TooLarge { .. }
    ));
    // A header announcing more than the bound is refused before anything.
    let mut huge = bytes.clone();
    for (b, v) in huge.iter_mut().skip(12).zip(u64::MAX.to_le_bytes()) {
        *b = v;
    }
    assert!(matches!(err(&huge), SnapshotError::TooLarge { .. }));
}

#[test]
fn content_that_contradicts_itself_is_refused_even_with_a_good_checksum() {
    let mut s = sample("greeter", 2);
    s.instances[1].app = "billing".into();
    let bytes = encode(&s, MAX).unwrap();
    assert!(matches!(
        decode(&bytes, "greeter", MAX),
        Err(SnapshotError::Foreign { .. })
    ));
    let mut s = sample("greeter", 2);
    s.metadata.clear();
    let bytes = encode(&s, MAX).unwrap();
    assert!(matches!(
        decode(&bytes, "greeter", MAX),
        Err(SnapshotError::Corrupt { .. })
    ));
    let mut s = sample("greeter", 2);
    s.instances[1].id = s.instances[0].id.clone();
    let bytes = encode(&s, MAX).unwrap();
    assert!(decode(&bytes, "greeter", MAX).is_err());
}

#[test]
fn age_is_checked_against_the_max_age() {
    let day = DEFAULT_MAX_AGE;
    assert_eq!(
        check_age(1000, 61_000, day).unwrap(),
        Duration::from_secs(60)
    );
    assert_eq!(check_age(5000, 1000, day).unwrap(), Duration::ZERO, "skew");
    let skew = MAX_SNAPSHOT_SKEW.as_millis() as u64;
    assert_eq!(check_age(1000 + skew, 1000, day).unwrap(), Duration::ZERO);
    let ahead = check_age(1001 + skew, 1000, day).unwrap_err();
    assert!(
        matches!(ahead, SnapshotError::FromTheFuture { .. }),
        "{ahead}"
    );
    assert_eq!(ahead.label(), "from_the_future");
    // A file dated at the end of time never passes for fresh.
    assert!(matches!(
        check_age(u64::MAX, 1000, day),
        Err(SnapshotError::FromTheFuture { .. })
    ));
    let old = check_age(0, 25 * 3600 * 1000, day).unwrap_err();
    assert!(matches!(old, SnapshotError::TooOld { .. }));
    assert_eq!(old.label(), "too_old");
}

#[test]
fn the_first_good_state_is_written_at_once_and_a_burst_once_per_interval() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut s = WriteSchedule::new(Duration::from_secs(10));
    assert_eq!(s.on_state(false, t0), WriteDecision::Wait, "not good");
    assert_eq!(s.on_state(true, t0), WriteDecision::Write);
    assert_eq!(
        s.on_state(true, t0 + ms(100)),
        WriteDecision::ArmTimer(ms(9900))
    );
    for i in 2..100 {
        assert_eq!(s.on_state(true, t0 + ms(100 * i)), WriteDecision::Wait);
    }
    assert!(s.is_pending());
    assert!(s.on_timer(true, t0 + ms(10_000)), "one write for the burst");
    assert!(!s.is_pending());
    // Nothing changed since: the next change waits for the interval.
    assert_eq!(
        s.on_state(true, t0 + ms(15_000)),
        WriteDecision::ArmTimer(ms(5000))
    );
    // The state went bad before the timer: nothing is written.
    assert_eq!(s.on_state(false, t0 + ms(16_000)), WriteDecision::Wait);
    assert!(!s.on_timer(false, t0 + ms(20_000)));
    // Long after the last write: written at once again.
    assert_eq!(s.on_state(true, t0 + ms(40_000)), WriteDecision::Write);
}

#[test]
fn an_interval_overflowing_the_clock_is_never_due_again() {
    let t0 = Instant::now();
    let mut s = WriteSchedule::new(Duration::MAX);
    assert_eq!(s.on_state(true, t0), WriteDecision::Write, "the first one");
    let later = t0 + Duration::from_secs(3600);
    assert_eq!(s.on_state(true, later), WriteDecision::Wait, "never due");
    assert_eq!(s.on_state(true, later), WriteDecision::Wait, "nor armed");
    assert!(s.is_pending());
}

#[test]
fn file_names_are_safe_and_distinct() {
    let a = file_name("greeter");
    assert!(a.starts_with("greeter-") && a.ends_with(".snap"));
    let odd = file_name("../../etc/passwd\u{0}é");
    assert!(!odd.contains('/') && !odd.contains('\0') && !odd.contains(".."));
    assert_ne!(file_name("a/b"), file_name("a_b"));
    assert!(file_name(&"x".repeat(10_000)).len() < 100);
}

fn bytes_of_sample() -> Vec<u8> {
    encode(&sample("greeter", 4), MAX).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode(&bytes, "greeter", 4096);
    }

    #[test]
    fn arbitrary_bytes_behind_our_header_are_refused(
        tail in prop::collection::vec(any::<u8>(), 0..300),
        version in prop_oneof![Just(FORMAT_VERSION), any::<u32>()],
    ) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&tail);
        prop_assert!(decode(&bytes, "greeter", 4096).is_err());
    }

    #[test]
    fn a_mutated_file_is_never_accepted(
        edits in prop::collection::vec((0usize..4, any::<usize>(), 1u8..=255), 1..4),
    ) {
        let good = bytes_of_sample();
        let mut bytes = good.clone();
        for (kind, at, x) in edits {
            let len = bytes.len().max(1);
            match kind {
                0 => { if let Some(b) = bytes.get_mut(at % len) { *b ^= x; } }
                1 => bytes.truncate(at % len),
                2 => bytes.insert(at % (bytes.len() + 1), x),
                _ => { if !bytes.is_empty() { bytes.remove(at % len); } }
            }
        }
        prop_assume!(bytes != good);
        prop_assert!(decode(&bytes, "greeter", MAX).is_err());
    }
}
