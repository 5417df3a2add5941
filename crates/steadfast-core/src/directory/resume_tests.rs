//! A replacement directory (restart clean), on a hand-stepped clock: its
//! snapshots come after its predecessor's, it serves an app from its
//! predecessor's set until the app answers again (bounded), and the closing
//! tombstones it carries keep vetoing the closed boot.

use super::tombstone_tests::{full, instance, ports, url, A, KEY, TTL};
use super::*;
use crate::closing::{Closing, ClosingSource};
use crate::incarnation::Incarnation;

const B: Option<(u64, &str, u64)> = Some((2_000_100, "boot-b", 0));

fn apps() -> Vec<String> {
    vec!["a".to_string(), "b".to_string()]
}

fn of(app: &str, mut u: DirectoryUpdate) -> DirectoryUpdate {
    u.app = app.into();
    u
}

/// A directory serving a:1 and b:2, both in boot A.
fn serving(t0: Instant) -> DirectoryMachine {
    let mut d = DirectoryMachine::new(KEY, &apps(), 1);
    d.apply_at(of("a", full(1, vec![url(1, A)], vec![])), t0, TTL);
    d.apply_at(of("b", full(1, vec![url(2, A)], vec![])), t0, TTL);
    assert_eq!(ports(&d), [1, 2]);
    d
}

#[test]
fn a_replacement_serves_each_app_from_its_predecessors_set_until_it_answers() {
    let t0 = Instant::now();
    let old = serving(t0);
    let point = old.resume_point();
    let mut d = DirectoryMachine::new(KEY, &apps(), 2).resuming(point, t0);
    assert_eq!(ports(&d), [1, 2], "nothing answered yet: the carried sets");
    assert!(d.status().is_ready());
    assert!(d.awaits("a") && d.awaits("b"));
    // a answers with a change (a:1 gone, a:3 new): served at once, b carried.
    d.apply_at(of("a", full(1, vec![url(3, A)], vec![])), t0, TTL);
    assert_eq!(ports(&d), [2, 3], "no removal held back");
    assert!(!d.awaits("a") && d.awaits("b"));
    d.apply_at(of("b", full(1, vec![url(2, A)], vec![])), t0, TTL);
    assert!(!d.awaits("b"));
    assert!(d.version() > old.version(), "after the readers' version");
    assert_eq!(ports(&d), [2, 3]);
    assert_eq!(d.next_deadline(), None, "no gate, no tombstone");
}

#[test]
fn the_gate_is_bounded_and_an_app_that_never_answers_is_shown_pending() {
    let t0 = Instant::now();
    let point = serving(t0).resume_point();
    let mut d = DirectoryMachine::new(KEY, &apps(), 2).resuming(point, t0);
    d.apply_at(of("a", full(1, vec![url(1, A)], vec![])), t0, TTL);
    let due = t0 + RESUME_GATE;
    assert_eq!(d.next_deadline(), Some(due));
    assert_eq!(
        d.on_timeout(due - Duration::from_millis(1)),
        Applied::Ignored
    );
    assert_eq!(ports(&d), [1, 2], "b carried");
    assert_eq!(d.on_timeout(due), Applied::Yes, "the carried sets leave");
    assert!(!d.awaits("b"));
    assert_eq!(ports(&d), [1]);
    // With no app at all, a pending state says so (nothing is invented).
    let point = serving(t0).resume_point();
    let mut d = DirectoryMachine::new(KEY, &apps(), 3).resuming(point, t0);
    d.on_timeout(due);
    assert!(matches!(
        d.status(),
        DirectoryStatus::Empty(EmptyReason::Pending(_))
    ));
}

#[test]
fn a_replacement_keeps_vetoing_the_closed_boot_until_its_tombstone_expires() {
    let t0 = Instant::now();
    let mut old = serving(t0);
    // A caller says a:1 closes (its registry record is still listed).
    let closing = Closing {
        service_key: KEY.into(),
        address: "127.0.0.1:1".into(),
        incarnation: Some(Incarnation {
            export_ms: 1_000_100,
            boot_id: "boot-a".into(),
            created: None,
        }),
        source: ClosingSource::Call,
    };
    assert_eq!(old.close(closing, t0, TTL), Applied::Yes);
    assert_eq!(ports(&old), [2]);
    let t1 = t0 + Duration::from_secs(10);
    let point = old.resume_point();
    assert_eq!(point.tombstones(), 1);
    let mut d = DirectoryMachine::new(KEY, &apps(), 2).resuming(point, t1);
    // The resolvers answer with the registry's state: the closed boot of
    // a:1 is listed still, and stays out.
    d.apply_at(of("a", full(1, vec![url(1, A)], vec![])), t1, TTL);
    d.apply_at(of("b", full(1, vec![url(2, A)], vec![])), t1, TTL);
    assert_eq!(ports(&d), [2], "the closed boot is not served again");
    assert_eq!(d.tombstones(), 1);
    // Its tombstone expires when it would have: the listed record is back.
    assert_eq!(d.next_deadline(), Some(t0 + TTL));
    assert_eq!(d.on_timeout(t0 + TTL), Applied::Yes);
    assert_eq!(ports(&d), [1, 2]);
}

#[test]
fn a_restarted_provider_passes_a_carried_tombstone_and_expired_ones_are_not_carried() {
    let t0 = Instant::now();
    let mut old = DirectoryMachine::new(KEY, &apps(), 1);
    old.apply_at(of("a", full(1, vec![url(1, A)], vec![])), t0, TTL);
    // The registry flags a:1 closing.
    old.apply_at(
        of("a", full(2, vec![], vec![instance(1, A, true)])),
        t0,
        TTL,
    );
    assert_eq!(old.tombstones(), 1);
    let mut d = DirectoryMachine::new(KEY, &apps(), 2).resuming(old.resume_point(), t0);
    // a:1 restarted (another boot): served at once.
    d.apply_at(of("a", full(3, vec![url(1, B)], vec![])), t0, TTL);
    assert!(!d.awaits("b"), "b never answered before: not awaited");
    assert_eq!((ports(&d), d.tombstones()), (vec![1], 0));
    // A tombstone expired by the time of the replacement is not carried.
    let late = t0 + TTL;
    let d = DirectoryMachine::new(KEY, &apps(), 2).resuming(old.resume_point(), late);
    let point = d.resume_point();
    assert_eq!(point.tombstones(), 0);
}
