//! Closing tombstones, rule by rule, on a hand-stepped clock.

use super::*;
use crate::closing::{Closing, ClosingSource};
use crate::incarnation::Incarnation;
use crate::instance::{Instance, RevisionInterner};
use crate::model::{ServiceInfo, ServiceInstance, CLOSING_KEY};
use crate::url::ServiceEndpoint;

pub(super) const KEY: &str = "S:tri";
pub(super) const TTL: Duration = Duration::from_secs(30);

fn svc() -> ServiceInfo {
    ServiceInfo::test_service()
}

/// The record of 127.0.0.1:`port` in boot `inc` (export ms, boot id,
/// registry creation marker), closing or not.
pub(super) fn instance(port: u16, inc: Option<(u64, &str, u64)>, closing: bool) -> Arc<Instance> {
    let mut r = ServiceInstance::new("a", "127.0.0.1", port);
    if let Some((ms, boot, _)) = inc {
        Incarnation {
            export_ms: ms,
            boot_id: boot.into(),
            created: None,
        }
        .stamp(&mut r.metadata);
    }
    if closing {
        r.healthy = false;
        r.metadata.insert(CLOSING_KEY.into(), "true".into());
    }
    let created = inc.map_or(0, |(_, _, c)| c);
    Arc::new(Instance::decode(&r, &mut RevisionInterner::default()).with_created(created))
}

pub(super) fn url(port: u16, inc: Option<(u64, &str, u64)>) -> Endpoint {
    Arc::new(ServiceUrl::new(
        &instance(port, inc, false),
        &ServiceEndpoint::of(&svc()),
    ))
}

pub(super) fn full(gen: u64, urls: Vec<Endpoint>, closing: Vec<Arc<Instance>>) -> DirectoryUpdate {
    DirectoryUpdate {
        app: "a".into(),
        subscribe_key: KEY.into(),
        change: Change::Reset {
            version: Version::at(gen),
            items: urls,
        },
        state: UpdateState::Resolved,
        stale_since: None,
        held: None,
        closing,
        snapshot: None,
    }
}

pub(super) fn patch(
    gen: u64,
    up: Vec<Endpoint>,
    rm: &[u16],
    closing: Vec<Arc<Instance>>,
) -> DirectoryUpdate {
    DirectoryUpdate {
        change: Change::Delta {
            base: Version::at(gen - 1),
            version: Version::at(gen),
            upserts: up,
            removals: rm
                .iter()
                .map(|p| Arc::from(format!("127.0.0.1:{p}")))
                .collect(),
        },
        ..full(gen, Vec::new(), closing)
    }
}

pub(super) fn ports(d: &DirectoryMachine) -> Vec<u16> {
    let mut p: Vec<u16> = d.list().iter().map(|u| u.instance.port()).collect();
    p.sort_unstable();
    p
}

pub(super) const A: Option<(u64, &str, u64)> = Some((1_000_100, "boot-a", 0));

/// A directory at `t0` holding :1 and :2 in boot `inc`, then told by the
/// registry (a patch: removal + closing) that :1 closes.
fn closed_by_registry(inc: Option<(u64, &'static str, u64)>) -> (DirectoryMachine, Instant) {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(full(1, vec![url(1, inc), url(2, inc)], vec![]), t0, TTL);
    let (applied, _) = d.apply_at(
        patch(2, vec![], &[1], vec![instance(1, inc, true)]),
        t0,
        TTL,
    );
    assert_eq!(applied, Applied::Yes);
    assert_eq!(ports(&d), vec![2]);
    assert_eq!(d.tombstones(), 1);
    assert_eq!(d.take_tombstone_counts().written, 1);
    (d, t0)
}

#[test]
fn a_stale_readd_of_the_closed_incarnation_is_vetoed() {
    let (mut d, t0) = closed_by_registry(A);
    d.apply_at(patch(3, vec![url(1, A)], &[], vec![]), t0, TTL);
    assert_eq!(ports(&d), vec![2], "the closed boot's record is not served");
    assert_eq!(d.take_tombstone_counts().vetoed, 1);
    // The same through a full list (a resync or a re-attach).
    d.apply_at(full(4, vec![url(1, A), url(2, A)], vec![]), t0, TTL);
    assert_eq!(ports(&d), vec![2]);
}

#[test]
fn a_closing_announcement_and_its_removal_in_one_burst_still_tombstone() {
    // The resolver folds "closing" then "unregistered" into one patch:
    // the removal is the closing's, not the registry's.
    let (mut d, t0) = closed_by_registry(A);
    assert_eq!(d.next_deadline(), t0.checked_add(TTL));
    d.apply_at(patch(3, vec![url(1, A)], &[], vec![]), t0, TTL);
    assert_eq!(ports(&d), vec![2]);
}

#[test]
fn a_genuine_restart_passes_before_the_ttl_even_within_the_same_second() {
    let restarts = [
        Some((1_000_900, "boot-a", 0)), // same second, other ms
        Some((1_000_100, "boot-b", 0)), // same ms, other boot
        Some((1_000_100, "boot-a", 7)), // a new registration (etcd create_revision)
        None,                           // a record without incarnation now
    ];
    for (i, inc) in restarts.into_iter().enumerate() {
        let (mut d, t0) = closed_by_registry(A);
        let t = t0 + Duration::from_millis(5);
        d.apply_at(patch(3, vec![url(1, inc)], &[], vec![]), t, TTL);
        assert_eq!(ports(&d), vec![1, 2], "restart {i} served at once");
        assert_eq!(d.tombstones(), 0);
        assert_eq!(d.take_tombstone_counts().cleared_by_restart, 1);
    }
}

#[test]
fn without_incarnation_a_readd_is_vetoed_until_the_ttl_then_added_with_no_new_event() {
    let (mut d, t0) = closed_by_registry(None);
    d.apply_at(patch(3, vec![url(1, None)], &[], vec![]), t0, TTL);
    assert_eq!(ports(&d), vec![2], "cannot tell a restart: vetoed");
    let deadline = d.next_deadline().expect("tombstone expiry");
    assert_eq!(deadline, t0 + TTL);
    let before = d.version();
    assert_eq!(
        d.on_timeout(deadline - Duration::from_millis(1)),
        Applied::Ignored
    );
    assert_eq!(ports(&d), vec![2]);
    assert_eq!(d.on_timeout(deadline), Applied::Yes);
    assert_eq!(ports(&d), vec![1, 2], "the vetoed add is re-applied");
    assert!(d.version() > before);
    assert_eq!((d.tombstones(), d.next_deadline()), (0, None));
    let c = d.take_tombstone_counts();
    assert_eq!((c.expired, c.replayed), (1, 1));
}

#[test]
fn a_registry_removal_clears_the_tombstone() {
    // Without incarnation: the removal ends the veto, a re-add passes.
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(full(1, vec![url(1, None), url(2, None)], vec![]), t0, TTL);
    let held = d
        .list()
        .into_iter()
        .find(|u| u.instance.port() == 1)
        .unwrap();
    assert_eq!(
        d.close(Closing::of(&held, KEY, ClosingSource::Call), t0, TTL),
        Applied::Yes
    );
    assert_eq!(ports(&d), vec![2]);
    d.apply_at(patch(2, vec![], &[1], vec![]), t0, TTL);
    assert_eq!(d.tombstones(), 0);
    assert_eq!(d.take_tombstone_counts().cleared_by_removal, 1);
    d.apply_at(patch(3, vec![url(1, None)], &[], vec![]), t0, TTL);
    assert_eq!(ports(&d), vec![1, 2], "registered again after its removal");

    // With incarnation: the removal drops the state held back, so the
    // expiry re-adds nothing the registry no longer lists.
    let (mut d, t0) = closed_by_registry(A);
    d.apply_at(patch(3, vec![url(1, A)], &[], vec![]), t0, TTL);
    d.apply_at(patch(4, vec![], &[1], vec![]), t0, TTL);
    assert_eq!(
        d.tombstones(),
        0,
        "the removal ends a tombstone with incarnation too"
    );
    assert_eq!(d.on_timeout(t0 + TTL), Applied::Ignored);
    assert_eq!(ports(&d), vec![2], "a removed instance is never re-added");
    // Registered again after its removal (a newer registry state): served.
    d.apply_at(patch(5, vec![url(1, A)], &[], vec![]), t0, TTL);
    assert_eq!(ports(&d), vec![1, 2]);
}

#[test]
fn a_full_list_lacking_a_tombstoned_id_is_its_removal() {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(full(1, vec![url(1, None), url(2, None)], vec![]), t0, TTL);
    let held = d
        .list()
        .into_iter()
        .find(|u| u.instance.port() == 1)
        .unwrap();
    d.close(Closing::of(&held, KEY, ClosingSource::Call), t0, TTL);
    d.apply_at(full(2, vec![url(2, None)], vec![]), t0, TTL);
    assert_eq!(d.tombstones(), 0);
}

#[test]
fn an_unknown_endpoint_leaves_no_tombstone() {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(full(1, vec![url(2, A)], vec![]), t0, TTL);
    let stranger = url(1, A);
    assert_eq!(
        d.close(Closing::of(&stranger, KEY, ClosingSource::Call), t0, TTL),
        Applied::Ignored
    );
    // Nor from the registry: a closing record never held.
    d.apply_at(patch(2, vec![], &[], vec![instance(3, A, true)]), t0, TTL);
    assert_eq!((d.tombstones(), d.next_deadline()), (0, None));
    d.apply_at(patch(3, vec![stranger, url(3, A)], &[], vec![]), t0, TTL);
    assert_eq!(ports(&d), vec![1, 2, 3], "nothing vetoes them");
    assert_eq!(d.take_tombstone_counts().ignored, 1);
    // Another directory's key.
    let held = d.list().into_iter().next().unwrap();
    assert_eq!(
        d.close(Closing::of(&held, "T:tri", ClosingSource::Call), t0, TTL),
        Applied::Ignored
    );
}

#[test]
fn a_closing_of_an_older_incarnation_is_ignored() {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    let old = url(1, A);
    let new_boot = Some((2_000_000, "boot-b", 0));
    d.apply_at(full(1, vec![url(1, new_boot)], vec![]), t0, TTL);
    assert_eq!(
        d.close(Closing::of(&old, KEY, ClosingSource::Call), t0, TTL),
        Applied::Ignored
    );
    d.apply_at(patch(2, vec![], &[], vec![instance(1, A, true)]), t0, TTL);
    assert_eq!(ports(&d), vec![1], "the new boot keeps serving");
    assert_eq!(d.tombstones(), 0);
}

#[test]
fn a_call_closing_comes_back_at_expiry_unless_the_registry_flags_it() {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(full(1, vec![url(1, A)], vec![]), t0, TTL);
    let held = d.list().remove(0);
    d.close(Closing::of(&held, KEY, ClosingSource::Call), t0, TTL);
    assert!(d.is_empty());
    assert_eq!(
        NoEndpoint::of_status(&d.status()).map(|e| e.reason),
        Some(NoEndpointReason::AllClosing { closing: 1 }),
        "empty because of the tombstone, not 'registry empty'"
    );
    assert_eq!(d.on_timeout(t0 + TTL), Applied::Yes);
    assert_eq!(ports(&d), vec![1], "a false alarm heals by itself");

    // The registry then flags it closing: nothing comes back at expiry.
    let held = d.list().remove(0);
    let t1 = t0 + TTL;
    d.close(Closing::of(&held, KEY, ClosingSource::Call), t1, TTL);
    d.apply_at(patch(2, vec![], &[1], vec![instance(1, A, true)]), t1, TTL);
    assert_eq!(d.on_timeout(t1 + TTL), Applied::Ignored);
    assert!(d.is_empty());
}

#[test]
fn a_full_list_naming_a_held_endpoint_closing_tombstones_it() {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(full(1, vec![url(1, A)], vec![]), t0, TTL);
    let mut u = full(2, vec![], vec![instance(1, A, true)]);
    u.state = UpdateState::NotServing(NotServing {
        closing: 1,
        ..NotServing::default()
    });
    d.apply_at(u, t0, TTL);
    assert_eq!(d.tombstones(), 1);
    assert_eq!(
        NoEndpoint::of_status(&d.status()).map(|e| e.reason),
        Some(NoEndpointReason::AllClosing { closing: 1 })
    );
    d.apply_at(full(3, vec![url(1, A)], vec![]), t0, TTL);
    assert!(d.is_empty(), "a stale full list is vetoed too");
}

#[test]
fn huge_ttls_do_not_panic() {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(
        full(1, vec![url(1, A), url(2, A)], vec![]),
        t0,
        Duration::MAX,
    );
    d.apply_at(
        patch(2, vec![], &[1], vec![instance(1, A, true)]),
        t0,
        Duration::MAX,
    );
    assert_eq!((ports(&d), d.tombstones()), (vec![2], 1));
    assert!(
        d.next_deadline().is_none_or(|t| t > t0),
        "saturated, never early"
    );
    let held = d.list().remove(0);
    let r = d.close(
        Closing::of(&held, KEY, ClosingSource::Call),
        t0,
        Duration::MAX,
    );
    assert_eq!(r, Applied::Yes);
    assert!(d.next_deadline().is_some_and(|t| t > t0));
}

#[test]
fn each_tombstone_keeps_the_ttl_it_was_written_with_and_expires_in_order() {
    let t0 = Instant::now();
    let mut d = DirectoryMachine::new(KEY, &["a".to_string()], 1);
    d.apply_at(
        full(1, vec![url(1, A), url(2, A), url(3, A)], vec![]),
        t0,
        TTL,
    );
    for (port, secs) in [(1, 30), (2, 10), (3, 20)] {
        let held = d
            .list()
            .into_iter()
            .find(|u| u.instance.port() == port)
            .unwrap();
        let ttl = Duration::from_secs(secs);
        d.close(Closing::of(&held, KEY, ClosingSource::Call), t0, ttl);
    }
    assert!(d.is_empty());
    let mut order = Vec::new();
    while let Some(at) = d.next_deadline() {
        assert_eq!(d.on_timeout(at), Applied::Yes);
        order.push((at - t0).as_secs());
    }
    assert_eq!(order, vec![10, 20, 30]);
    assert_eq!(ports(&d), vec![1, 2, 3]);
}

#[test]
fn tombstoned_names_the_closed_id_then_the_vetoed_address() {
    let (mut d, t0) = closed_by_registry(A);
    // Nothing listed under the id: the tombstone names the id.
    assert_eq!(d.tombstoned(), vec!["127.0.0.1:1".to_string()]);
    // A stale re-add of the closed boot is held back: its address.
    d.apply_at(patch(3, vec![url(1, A)], &[], vec![]), t0, TTL);
    let vetoed = d.tombstoned();
    assert_eq!(vetoed.len(), 1);
    assert!(vetoed[0].starts_with("127.0.0.1:"), "{vetoed:?}");
    // Expired: nothing tombstoned any more.
    d.on_timeout(t0 + TTL + Duration::from_secs(1));
    assert!(d.tombstoned().is_empty());
}
