//! Hand-stepped-clock tests of the mass-expiry hold (issue item 9): held
//! only right after a recovery, only for most of the instances at once,
//! never past the grace, replaced by re-registrations, and said.

use std::time::Duration;

use super::hold::MASS_REMOVAL_WINDOW;
use super::tests::{config, insts, ports, Sim};
use super::SubscriptionAction;

/// A registry recovery whose first snapshots remove `removed` of `before`.
fn recovery_removing(before: &[u16], after: &[u16]) -> Sim {
    let mut sim = Sim::new(config(), insts(before));
    sim.advance(Duration::from_secs(1));
    sim.err_item();
    sim.advance(Duration::from_secs(20));
    sim.push(insts(after));
    sim
}

#[test]
fn mass_expiry_after_recovery_is_held_for_the_grace_and_said() {
    let mut sim = recovery_removing(&[1, 2, 3, 4], &[1]);
    let held_at = sim.now;
    let d = sim.last();
    assert_eq!(
        ports(&d.instances),
        [1, 2, 3, 4],
        "held while they re-register"
    );
    let held = d.held.expect("the hold is said");
    assert_eq!(
        (held.count, held.until),
        (3, held_at + Duration::from_secs(3))
    );
    assert_eq!(
        sim.count(|a| matches!(a, SubscriptionAction::Holding { newly_held: 3, .. })),
        1
    );
    sim.advance(Duration::from_millis(2999));
    assert_eq!(ports(&sim.last().instances), [1, 2, 3, 4]);
    sim.advance(Duration::from_millis(1));
    let d = sim.last();
    assert_eq!(ports(&d.instances), [1], "nothing held past the grace");
    assert_eq!(d.held, None);
}

#[test]
fn re_registered_instances_replace_the_held_ones() {
    let mut sim = recovery_removing(&[1, 2, 3, 4], &[]);
    assert_eq!(sim.last().held.map(|h| h.count), Some(4));
    sim.advance(Duration::from_millis(500));
    let mut back = insts(&[2, 3]);
    back[0].weight = 7;
    sim.push(back);
    let d = sim.last();
    assert_eq!(ports(&d.instances), [1, 2, 3, 4]);
    assert_eq!(d.held.map(|h| h.count), Some(2));
    let two = d.instances.iter().find(|i| i.port == 2).unwrap();
    assert_eq!(two.weight, 7, "the new record replaces the held one");
    sim.push(insts(&[1, 2, 3, 4]));
    assert_eq!(sim.last().held, None);
    assert!(sim.timers.len() == 1, "only the resync timer is left");
    let n = sim.deliveries().len();
    sim.advance(Duration::from_secs(5));
    assert_eq!(sim.deliveries().len(), n, "no expiry delivery");
}

#[test]
fn a_single_removal_is_never_delayed() {
    let sim = recovery_removing(&[1, 2], &[1]);
    assert_eq!(ports(&sim.last().instances), [1]);
    let sim = recovery_removing(&[1], &[]);
    assert!(sim.last().instances.is_empty());
    // Half of the instances is not "most of them".
    let sim = recovery_removing(&[1, 2, 3, 4], &[1, 2]);
    assert_eq!(ports(&sim.last().instances), [1, 2]);
    assert_eq!(
        sim.count(|a| matches!(a, SubscriptionAction::Holding { .. })),
        0
    );
}

#[test]
fn a_mass_removal_without_a_recent_recovery_is_not_held() {
    let mut sim = Sim::new(config(), insts(&[1, 2, 3, 4]));
    sim.push(Vec::new());
    assert!(
        sim.last().instances.is_empty(),
        "no outage: applied at once"
    );
    let mut sim = recovery_removing(&[1, 2, 3, 4], &[1, 2, 3, 4]);
    sim.advance(MASS_REMOVAL_WINDOW + Duration::from_millis(1));
    sim.push(insts(&[1]));
    assert_eq!(ports(&sim.last().instances), [1], "the window closed");
    let mut sim = recovery_removing(&[1, 2, 3, 4], &[1, 2, 3, 4]);
    sim.advance(Duration::from_secs(5));
    sim.push(insts(&[4]));
    assert_eq!(
        sim.last().held.map(|h| h.count),
        Some(3),
        "within the window"
    );
}

#[test]
fn each_held_instance_leaves_at_its_own_deadline() {
    let all = [1, 2, 3, 4, 5, 6, 7, 8];
    let mut sim = recovery_removing(&all, &[1, 2, 3]);
    assert_eq!(sim.last().held.map(|h| h.count), Some(5));
    sim.advance(Duration::from_secs(2));
    sim.push(insts(&[1]));
    assert_eq!(ports(&sim.last().instances), all);
    assert_eq!(sim.last().held.map(|h| h.count), Some(7));
    sim.advance(Duration::from_secs(1));
    assert_eq!(
        ports(&sim.last().instances),
        [1, 2, 3],
        "first batch gone at 3 s"
    );
    sim.advance(Duration::from_secs(2));
    assert_eq!(
        ports(&sim.last().instances),
        [1],
        "second batch gone at 3 s"
    );
    assert_eq!(sim.last().held, None);
    // Grace zero turns the hold off.
    let mut off = config();
    off.mass_removal_grace = Duration::ZERO;
    let mut sim = Sim::new(off, insts(&[1, 2, 3]));
    sim.err_item();
    sim.push(Vec::new());
    assert!(sim.last().instances.is_empty());
}

#[test]
fn removals_one_per_snapshot_right_after_a_recovery_are_held_cumulatively() {
    // As etcd reports a mass expiry: one revoked lease per revision.
    let mut sim = recovery_removing(&[1, 2, 3, 4], &[1, 2, 3, 4]);
    let t = sim.now;
    let step = Duration::from_millis(5);
    sim.advance(step);
    sim.push(insts(&[2, 3, 4]));
    assert_eq!(ports(&sim.last().instances), [2, 3, 4], "1 of 4: not yet");
    sim.advance(step);
    sim.push(insts(&[3, 4]));
    assert_eq!(ports(&sim.last().instances), [3, 4], "half is not most");
    sim.advance(step);
    sim.push(insts(&[4]));
    let d = sim.last();
    assert_eq!(ports(&d.instances), [1, 2, 3, 4], "3 of 4: all held back");
    assert_eq!(d.held.map(|h| h.count), Some(3));
    sim.advance(step);
    sim.push(Vec::new());
    let d = sim.last();
    assert_eq!(ports(&d.instances), [1, 2, 3, 4], "never empty");
    let held = d.held.expect("said");
    assert_eq!(held.count, 4);
    assert_eq!(held.until, t + 4 * step + Duration::from_secs(3));
    assert_eq!(
        sim.count(|a| matches!(a, SubscriptionAction::Holding { .. })),
        2
    );
    // Each one leaves 3 s after its own removal: nothing past its grace.
    for (gone, left) in [(1, vec![2, 3, 4]), (2, vec![3, 4]), (3, vec![4])] {
        sim.advance_to(t + gone * step + Duration::from_secs(3));
        assert_eq!(ports(&sim.last().instances), left);
    }
    sim.advance_to(t + 4 * step + Duration::from_secs(3));
    let d = sim.last();
    assert!(d.instances.is_empty(), "{:?}", d.instances);
    assert_eq!(d.held, None);
}

#[test]
fn a_single_removal_after_a_recovery_is_never_delayed_even_one_at_a_time() {
    let mut sim = recovery_removing(&[1, 2, 3], &[1, 2, 3]);
    sim.advance(Duration::from_millis(5));
    sim.push(insts(&[1, 2]));
    assert_eq!(ports(&sim.last().instances), [1, 2]);
    sim.advance(Duration::from_secs(8));
    sim.push(insts(&[1, 2, 4]));
    sim.push(insts(&[1, 2]));
    assert_eq!(
        ports(&sim.last().instances),
        [1, 2],
        "an instance registered after the recovery is never held"
    );
    assert_eq!(sim.last().held, None);
    // An earlier removal whose grace ended does not come back when the
    // rule trips later in the window.
    sim.advance(Duration::from_millis(500));
    sim.push(insts(&[1]));
    let d = sim.last();
    assert_eq!(ports(&d.instances), [1, 2], "2 of 3 trips: 2 held, 3 not");
    assert_eq!(d.held.map(|h| h.count), Some(1));
}
