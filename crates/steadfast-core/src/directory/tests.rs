//! Directory machine: merging apps, explaining emptiness, applying patches.

use super::*;
use crate::model::{ServiceInfo, ServiceInstance};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The machine's one entry point, each call a second after the one before
/// (so every gap is asked: at most one ask per second); no closing in these
/// updates, so no tombstone is written.
fn apply(d: &mut DirectoryMachine, update: DirectoryUpdate) -> Applied {
    static T0: OnceLock<Instant> = OnceLock::new();
    static STEP: AtomicU64 = AtomicU64::new(0);
    let t0 = *T0.get_or_init(Instant::now);
    let now = t0 + Duration::from_secs(STEP.fetch_add(1, Ordering::Relaxed));
    d.apply_at(update, now, Duration::from_secs(30)).0
}

fn update(app: &str, gen: u64, ports: &[u16], state: UpdateState) -> DirectoryUpdate {
    let svc = ServiceInfo::test_service();
    let urls = ports
        .iter()
        .map(|p| {
            Arc::new(ServiceUrl::build(
                &ServiceInstance::new(app, "127.0.0.1", *p),
                &svc,
            ))
        })
        .collect();
    DirectoryUpdate {
        app: app.into(),
        subscribe_key: "S:tri".into(),
        change: Change::Reset {
            version: Version::at(gen),
            items: urls,
        },
        state,
        stale_since: None,
        held: None,
        closing: Vec::new(),
        snapshot: None,
    }
}

#[test]
fn merges_apps_and_explains_emptiness() {
    let apps = vec!["a".to_string(), "b".to_string()];
    let mut d = DirectoryMachine::new("S:tri", &apps, 1);
    assert_eq!(
        d.status(),
        DirectoryStatus::Empty(EmptyReason::Pending(Default::default()))
    );
    assert_eq!(
        apply(&mut d, update("a", 1, &[1, 2], UpdateState::Resolved)),
        Applied::Yes
    );
    assert_eq!(
        apply(&mut d, update("b", 1, &[], UpdateState::RegistryEmpty)),
        Applied::Yes
    );
    assert_eq!(d.len(), 2);
    assert!(d.select().is_some());
    assert_eq!(
        apply(&mut d, update("a", 0, &[], UpdateState::RegistryEmpty)),
        Applied::Ignored,
        "older generation"
    );
    assert_eq!(
        apply(&mut d, update("a", 2, &[], UpdateState::RegistryEmpty)),
        Applied::Yes
    );
    assert_eq!(
        d.status(),
        DirectoryStatus::Empty(EmptyReason::RegistryEmpty)
    );
    let u = Unresolved {
        revisions: vec!["r".into()],
        since: Instant::now(),
        attempts: 1,
        last_error: None,
    };
    assert_eq!(
        apply(
            &mut d,
            update("b", 2, &[], UpdateState::Unresolved(u.clone()))
        ),
        Applied::Yes
    );
    assert_eq!(
        d.status(),
        DirectoryStatus::Empty(EmptyReason::Unresolved(u))
    );
    assert!(d.select().is_none());
}

fn ep(app: &str, port: u16, weight: u32) -> Endpoint {
    let mut inst = ServiceInstance::new(app, "127.0.0.1", port);
    inst.weight = weight;
    let svc = ServiceInfo::test_service();
    Arc::new(ServiceUrl::build(&inst, &svc))
}

fn patch_at(
    app: &str,
    base: Version,
    version: Version,
    up: Vec<Endpoint>,
    rm: &[&str],
) -> DirectoryUpdate {
    DirectoryUpdate {
        change: Change::Delta {
            base,
            version,
            upserts: up,
            removals: rm.iter().map(|r| Arc::from(*r)).collect(),
        },
        ..update(app, 0, &[], UpdateState::Resolved)
    }
}

fn patch(app: &str, base: u64, gen: u64, up: Vec<Endpoint>, rm: &[&str]) -> DirectoryUpdate {
    patch_at(app, Version::at(base), Version::at(gen), up, rm)
}

fn ports(d: &DirectoryMachine) -> Vec<u16> {
    d.list().iter().map(|u| u.instance.port()).collect()
}

#[test]
fn patches_apply_on_the_state_they_follow() {
    let apps = vec!["a".to_string(), "b".to_string()];
    let mut d = DirectoryMachine::new("S:tri", &apps, 1);
    assert_eq!(
        apply(&mut d, patch("a", 0, 1, vec![ep("a", 9, 1)], &[])),
        Applied::Gap,
        "nothing held yet"
    );
    assert_eq!(
        apply(&mut d, update("a", 1, &[1, 2, 3], UpdateState::Resolved)),
        Applied::Yes
    );
    let before = d.snapshot().clone();
    let p = patch("a", 1, 2, vec![ep("a", 4, 1)], &["127.0.0.1:2", "nope"]);
    assert_eq!(apply(&mut d, p), Applied::Yes);
    assert_eq!(ports(&d), vec![1, 3, 4], "swap-remove, then append");
    assert_eq!((d.version_of("a"), d.version()), (Some(Version::at(2)), 2));
    assert_eq!(d.snapshot().version(), 2);
    let old: Vec<u16> = before.iter().map(|u| u.instance.port()).collect();
    assert_eq!(old, vec![1, 2, 3], "published snapshots never change");
    assert_eq!(
        apply(&mut d, patch("a", 3, 4, vec![], &["127.0.0.1:1"])),
        Applied::Gap,
        "base 3, held 2: the change at 3 was never seen"
    );
    assert_eq!(
        apply(&mut d, patch("a", 1, 2, vec![], &["127.0.0.1:1"])),
        Applied::Ignored,
        "not newer than held"
    );
    assert_eq!(apply(&mut d, patch("b", 0, 1, vec![], &[])), Applied::Gap);
    assert_eq!(ports(&d), vec![1, 3, 4], "refused patches change nothing");
    assert_eq!(
        apply(&mut d, update("a", 5, &[7], UpdateState::Resolved)),
        Applied::Yes
    );
    assert_eq!(
        apply(&mut d, patch("a", 5, 6, vec![ep("a", 8, 0)], &[])),
        Applied::Yes
    );
    assert_eq!(ports(&d), vec![7, 8]);
    for _ in 0..200 {
        assert_eq!(d.select().map(|u| u.instance.port()), Some(7), "weight 0");
    }
    assert_eq!(
        apply(&mut d, patch("a", 6, 7, vec![], &["127.0.0.1:7"])),
        Applied::Yes
    );
    assert!(d.select().is_none(), "only weight 0 left");
    assert_eq!(
        d.status(),
        DirectoryStatus::Ready {
            endpoints: 1,
            stale_since: None,
            degraded: vec![],
            held: vec![],
            snapshot: None,
            mapping: None,
        }
    );
}

#[test]
fn a_step_at_one_registry_version_applies_and_its_state_is_served() {
    let apps = vec!["a".to_string()];
    let mut d = DirectoryMachine::new("S:tri", &apps, 1);
    assert_eq!(
        apply(&mut d, update("a", 4, &[1], UpdateState::Resolved)),
        Applied::Yes
    );
    // A fetch result on the same registry delivery: the next step of it.
    let step = Version::at(4).next_step();
    let mut p = patch_at("a", Version::at(4), step, vec![ep("a", 2, 1)], &[]);
    p.state = UpdateState::NoMatchingService;
    assert_eq!(apply(&mut d, p.clone()), Applied::Yes);
    assert_eq!(ports(&d), vec![1, 2]);
    assert_eq!(d.version_of("a"), Some(step));
    assert_eq!(apply(&mut d, p), Applied::Ignored, "a replay is not newer");
}
