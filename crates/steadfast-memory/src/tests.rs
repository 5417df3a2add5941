//! Unit tests of [`MemoryRegistry`] through the [`Registry`] trait: the
//! first Reset, deltas to every watcher, replace by id, listing and call
//! counters, shared clones, fault budgets, missed notifications. (Ported
//! from the snapshot API; the event-path details are in `tests_events.rs`.)
//! Synchronous: streams are polled with `now_or_never`.

use futures::executor::block_on;
use steadfast_core::{InstanceMap, Registry, RegistryError, RegistryEvent, Version};

use crate::test_support::{
    apply_next, apply_to, assert_quiet, delta, inst, list, next_ok, record_ids, reset, same_state,
    sorted_ids, watch,
};
use crate::MemoryRegistry;

/// The ids a Delta upserts and removes, each sorted.
fn delta_ids(ev: RegistryEvent) -> (Vec<String>, Vec<String>) {
    let (_, upserts, removals) = delta(ev);
    let mut removed: Vec<String> = removals.iter().map(|r| r.to_string()).collect();
    removed.sort();
    (sorted_ids(&upserts), removed)
}

#[test]
fn the_first_item_is_a_reset_of_the_current_state() {
    let reg = MemoryRegistry::new();
    let mut empty = watch(&reg, "a");
    assert_eq!(reset(next_ok(&mut empty)), (Version::at(0), vec![]));
    assert_quiet(&mut empty);

    reg.put(inst("a", "h2", 1));
    reg.put(inst("a", "h1", 1));
    let mut s = watch(&reg, "a");
    assert_eq!(
        reset(next_ok(&mut s)),
        (reg.version(), vec!["h1:1".into(), "h2:1".into()])
    );
    assert_quiet(&mut s);
    // A Reset is a set; the owned records keep registration order.
    assert_eq!(
        record_ids(&reg.instances("a")),
        ["h2:1", "h1:1"],
        "registration order"
    );
}

#[test]
fn changes_reach_every_watcher_of_the_app_as_deltas() {
    let reg = MemoryRegistry::new();
    let mut w1 = watch(&reg, "a");
    let mut w2 = watch(&reg, "a");
    let mut other = watch(&reg, "b");
    let mut maps = [InstanceMap::default(), InstanceMap::default()];
    for (w, map) in [&mut w1, &mut w2].into_iter().zip(&mut maps) {
        assert!(apply_next(w, map).1.is_empty());
    }
    assert!(reset(next_ok(&mut other)).1.is_empty());

    reg.put(inst("a", "h1", 1));
    block_on(reg.register(inst("a", "h2", 1))).unwrap();
    for (w, map) in [&mut w1, &mut w2].into_iter().zip(&mut maps) {
        let (ev, ids) = apply_next(w, map);
        assert_eq!(delta_ids(ev), (vec!["h1:1".into()], vec![]));
        assert_eq!(ids, ["h1:1"]);
        let (ev, ids) = apply_next(w, map);
        assert_eq!(delta_ids(ev), (vec!["h2:1".into()], vec![]), "only h2");
        assert_eq!(ids, ["h1:1", "h2:1"]);
    }

    block_on(reg.unregister(inst("a", "h1", 1))).unwrap();
    assert!(reg.remove("a", "h2:1"));
    for (w, map) in [&mut w1, &mut w2].into_iter().zip(&mut maps) {
        let (ev, ids) = apply_next(w, map);
        assert_eq!(delta_ids(ev), (vec![], vec!["h1:1".into()]));
        assert_eq!(ids, ["h2:1"]);
        let (ev, ids) = apply_next(w, map);
        assert_eq!(delta_ids(ev), (vec![], vec!["h2:1".into()]));
        assert!(ids.is_empty());
        assert_quiet(w);
        assert_eq!(map.version(), Some(reg.version()));
    }
    assert_quiet(&mut other);
}

#[test]
fn register_replaces_by_id_and_removing_an_absent_id_sends_nothing() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    let mut map = InstanceMap::default();
    apply_next(&mut s, &mut map);

    let mut heavy = inst("a", "h", 1);
    heavy.weight = 7;
    reg.put(inst("a", "h", 1));
    reg.put(heavy);
    apply_next(&mut s, &mut map);
    let (ev, ids) = apply_next(&mut s, &mut map);
    assert_eq!(delta(ev).1[0].weight(), 7);
    assert_eq!(ids, ["h:1"], "replaced, not added");
    assert_eq!(map.get("h:1").map(|i| i.weight()), Some(7));

    assert!(!reg.remove("a", "nope"));
    block_on(reg.unregister(inst("a", "other", 2))).unwrap();
    assert_quiet(&mut s);
    assert_eq!(reg.instances("a").len(), 1);
    assert_eq!(list(&reg, "a").instances.len(), 1);
}

#[test]
fn list_returns_state_and_counts_calls() {
    let reg = MemoryRegistry::new();
    let empty = list(&reg, "a");
    assert!(empty.instances.is_empty());
    assert_eq!(empty.version, Version::at(0));
    reg.put(inst("a", "h", 1));
    reg.put(inst("b", "h", 1));
    let listing = list(&reg, "a");
    assert_eq!(sorted_ids(&listing.instances), ["h:1"]);
    assert_eq!(listing.version, reg.version());
    assert_eq!(reg.list_calls(), 2);
    assert_eq!(reg.watch_calls(), 0);
    assert_eq!(reg.register_calls(), 0, "put is not a trait call");
}

#[test]
fn clones_share_state() {
    let reg = MemoryRegistry::new();
    let clone = reg.clone();
    let mut s = watch(&clone, "a");
    next_ok(&mut s);
    reg.put(inst("a", "h", 1));
    assert_eq!(delta_ids(next_ok(&mut s)).0, ["h:1"]);
    assert_eq!(clone.instances("a").len(), 1);
    assert_eq!(reg.watch_calls(), 1);
    assert_eq!(clone.version(), reg.version());
}

#[test]
fn fail_next_lists() {
    let reg = MemoryRegistry::new();
    reg.fail_next_lists(2);
    for _ in 0..2 {
        assert!(matches!(
            block_on(reg.list("a")),
            Err(RegistryError::Injected(_))
        ));
    }
    assert!(block_on(reg.list("a")).is_ok());
    assert_eq!(reg.list_calls(), 3);
}

#[test]
fn fail_next_watches() {
    let reg = MemoryRegistry::new();
    reg.fail_next_watches(1);
    assert!(matches!(
        block_on(reg.watch("a")),
        Err(RegistryError::Injected(_))
    ));
    assert_eq!(reg.watcher_count("a"), 0);
    let mut s = watch(&reg, "a");
    assert!(reset(next_ok(&mut s)).1.is_empty());
    assert_eq!(reg.watch_calls(), 2);
    assert_eq!(reg.watcher_count("a"), 1);
}

#[test]
fn fail_next_registers_covers_register_and_unregister() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "h", 1));
    let version = reg.version();
    reg.fail_next_registers(2);
    assert!(matches!(
        block_on(reg.register(inst("a", "new", 1))),
        Err(RegistryError::Injected(_))
    ));
    assert!(matches!(
        block_on(reg.unregister(inst("a", "h", 1))),
        Err(RegistryError::Injected(_))
    ));
    assert_eq!(
        record_ids(&reg.instances("a")),
        ["h:1"],
        "failed calls change nothing"
    );
    assert_eq!(reg.version(), version, "not even the version");
    block_on(reg.register(inst("a", "new", 1))).unwrap();
    assert_eq!(reg.instances("a").len(), 2);
    assert_eq!(reg.register_calls(), 2);
    assert_eq!(reg.unregister_calls(), 1);
}

#[test]
fn fault_budgets_are_replaced_not_added() {
    let reg = MemoryRegistry::new();
    reg.fail_next_lists(5);
    reg.fail_next_lists(0);
    assert!(block_on(reg.list("a")).is_ok());
}

#[test]
fn dropped_pushes_change_state_but_reach_no_watcher_of_the_app() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    let mut b = watch(&reg, "b");
    let mut s_map = InstanceMap::default();
    apply_next(&mut s, &mut s_map);
    next_ok(&mut b);

    reg.drop_next_pushes("a", 2);
    reg.put(inst("a", "h1", 1));
    reg.put(inst("b", "h1", 1));
    reg.put(inst("a", "h2", 1));
    assert_quiet(&mut s);
    assert_eq!(
        delta_ids(next_ok(&mut b)).0,
        ["h1:1"],
        "other apps unaffected"
    );
    assert_eq!(reg.instances("a").len(), 2, "state changed");
    assert_eq!(list(&reg, "a").instances.len(), 2);

    // A new watch still starts from the real state.
    let mut late = watch(&reg, "a");
    let mut late_map = InstanceMap::default();
    assert_eq!(apply_next(&mut late, &mut late_map).1, ["h1:1", "h2:1"]);

    // The next change reaches both as a delta of that change only, on top
    // of the version of the app's previous change.
    reg.remove("a", "h1:1");
    let (ev, _) = apply_next(&mut late, &mut late_map);
    assert_eq!(delta_ids(ev), (vec![], vec!["h1:1".into()]));
    let truth = list(&reg, "a");
    assert_eq!(sorted_ids(late_map.iter()), ["h2:1"]);
    assert!(same_state(&late_map, &truth));
    // The watcher that missed h1 and h2 never saw that version: the delta
    // shows it the gap (nothing applied), and only a re-read heals it.
    let ev = next_ok(&mut s);
    assert_eq!(delta_ids(ev.clone()), (vec![], vec!["h1:1".into()]));
    assert!(matches!(
        s_map.apply(ev, usize::MAX),
        steadfast_core::MapApplied::Gap
    ));
    assert!(s_map.is_empty(), "h2 was never notified");
    assert!(apply_to(&mut s_map, &RegistryEvent::reset(truth.clone())));
    assert!(same_state(&s_map, &truth), "the re-read heals it");
}

#[test]
fn set_instances_silently_changes_state_but_notifies_nobody() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "h1", 1));
    let mut s = watch(&reg, "a");
    let mut map = InstanceMap::default();
    apply_next(&mut s, &mut map);
    reg.set_instances_silently("a", vec![inst("x", "h2", 1)]);
    assert_quiet(&mut s);
    assert_eq!(sorted_ids(&list(&reg, "a").instances), ["h2:1"]);
    assert!(reg.instances("a").iter().all(|i| i.app == "a"));
    // The next change sends only itself, on top of the silent change's
    // version: the watcher sees the gap (nothing applied) until a re-read.
    reg.put(inst("a", "h3", 1));
    let ev = next_ok(&mut s);
    assert_eq!(delta_ids(ev.clone()), (vec!["h3:1".into()], vec![]));
    assert!(matches!(
        map.apply(ev, usize::MAX),
        steadfast_core::MapApplied::Gap
    ));
    assert_eq!(
        sorted_ids(map.iter()),
        ["h1:1"],
        "h1 still held, h2 missing"
    );
    let resync = list(&reg, "a");
    assert_eq!(sorted_ids(&resync.instances), ["h2:1", "h3:1"]);
    assert!(apply_to(&mut map, &RegistryEvent::reset(resync.clone())));
    assert!(same_state(&map, &resync));
}

#[test]
fn a_down_registry_fails_every_call_and_changes_nothing_until_it_is_back() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "10.0.0.1", 1));
    reg.set_down(true);
    let unavailable =
        |r: Result<(), RegistryError>| matches!(r, Err(RegistryError::Unavailable(_)));
    assert!(unavailable(block_on(
        reg.register(inst("a", "10.0.0.2", 1))
    )));
    assert!(unavailable(block_on(
        reg.unregister(inst("a", "10.0.0.1", 1))
    )));
    assert!(matches!(
        block_on(Registry::list(&reg, "a")),
        Err(RegistryError::Unavailable(_))
    ));
    assert!(block_on(Registry::watch(&reg, "a")).is_err());
    assert_eq!((reg.register_calls(), reg.unregister_calls()), (1, 1));
    assert_eq!((reg.list_calls(), reg.watch_calls()), (1, 1));
    assert_eq!(
        record_ids(&reg.instances("a")),
        vec!["10.0.0.1:1"],
        "nothing changed while down"
    );
    reg.set_down(false);
    assert!(block_on(reg.register(inst("a", "10.0.0.2", 1))).is_ok());
    assert_eq!(
        record_ids(&reg.instances("a")),
        vec!["10.0.0.1:1", "10.0.0.2:1"]
    );
}

#[tokio::test(start_paused = true)]
async fn delayed_calls_answer_after_the_delay_in_tokio_time() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "10.0.0.1", 1));
    reg.delay_calls(std::time::Duration::from_secs(3));
    let t0 = tokio::time::Instant::now();
    let listing = Registry::list(&reg, "a").await.unwrap();
    assert_eq!(listing.instances.len(), 1);
    assert_eq!(t0.elapsed(), std::time::Duration::from_secs(3));
    reg.delay_calls(std::time::Duration::ZERO);
    let t1 = tokio::time::Instant::now();
    reg.register(inst("a", "10.0.0.2", 1)).await.unwrap();
    assert_eq!(t1.elapsed(), std::time::Duration::ZERO);
}
