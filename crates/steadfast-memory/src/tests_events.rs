//! Unit tests of the event path: [`MemoryRegistry::watch_events`] and
//! [`MemoryRegistry::list_events`], called through the
//! [`steadfast_core::Registry`] trait that forwards to them: Resets and
//! Deltas, versions, the bounded queue under a burst, and every scripted
//! fault on the event streams and calls. Synchronous: streams are polled
//! with `now_or_never`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::executor::block_on;
use futures::{FutureExt, StreamExt};
use steadfast_core::{InstanceMap, Registry, RegistryError, RegistryEvent, Version};

use crate::test_support::{
    apply_to, assert_ended, assert_quiet, delta, inst, list, next, next_ok, record_ids, reset,
    same_state, sorted_ids, watch,
};
use crate::{MemoryRegistry, DEFAULT_EVENT_QUEUE_LIMIT};

#[test]
fn a_late_watcher_gets_the_current_state_as_a_reset() {
    let reg = MemoryRegistry::new();
    let mut empty = watch(&reg, "a");
    assert_eq!(reset(next_ok(&mut empty)), (Version::at(0), vec![]));
    reg.put(inst("a", "h1", 1));
    reg.put(inst("a", "h2", 1));
    reg.remove("a", "h1:1");
    reg.put(inst("a", "h3", 1));
    let mut late = watch(&reg, "a");
    let (v, ids) = reset(next_ok(&mut late));
    assert_eq!(ids, ["h2:1", "h3:1"]);
    assert_eq!(v, reg.version());
    assert_eq!(v, Version::at(4), "one version per change");
    assert_quiet(&mut late);
    assert_eq!(reg.watch_calls(), 2);
}

#[test]
fn put_and_remove_send_deltas_with_only_the_changed_instance() {
    let reg = MemoryRegistry::new();
    let many: Vec<_> = (0..1000).map(|p| inst("a", "h", p)).collect();
    reg.set_instances("a", many);
    let mut s = watch(&reg, "a");
    let mut other = watch(&reg, "b");
    let (v0, ids) = reset(next_ok(&mut s));
    assert_eq!(ids.len(), 1000);
    next_ok(&mut other);

    let mut changed = inst("a", "h", 7);
    changed.weight = 9;
    reg.put(changed);
    let (v1, upserts, removals) = delta(next_ok(&mut s));
    assert!(v1 > v0);
    assert_eq!(upserts.len(), 1, "only the changed instance");
    assert!(removals.is_empty());
    assert_eq!((upserts[0].id(), upserts[0].weight()), ("h:7", 9));
    let held = list(&reg, "a");
    let stored = held.instances.iter().find(|i| i.id() == "h:7").unwrap();
    assert!(Arc::ptr_eq(stored, &upserts[0]), "shared, not copied");

    assert!(reg.remove("a", "h:8"));
    let (v2, upserts, removals) = delta(next_ok(&mut s));
    assert!(v2 > v1);
    assert!(upserts.is_empty());
    assert_eq!(removals, [Arc::<str>::from("h:8")]);
    assert!(!reg.remove("a", "h:8"), "absent: nothing sent");
    assert_quiet(&mut s);
    assert_quiet(&mut other);
    assert_eq!(list(&reg, "a").instances.len(), 999);
}

#[test]
fn versions_strictly_increase_across_every_kind_of_change() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    let mut versions = vec![next_ok(&mut s).version()];
    for round in 0..50u16 {
        reg.put(inst("a", "h", round % 7));
        reg.put(inst("b", "h", round)); // other apps bump the version too
        if round % 5 == 0 {
            reg.remove("a", &format!("h:{}", round % 7));
        }
        if round % 11 == 0 {
            reg.set_instances("a", vec![inst("a", "x", round)]);
        }
        while let Some(Some(item)) = s.next().now_or_never() {
            versions.push(item.expect("ok").version());
        }
    }
    assert!(versions.len() > 60);
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {versions:?}"
    );
    // The listing is at the registry's version, which other apps moved on.
    assert!(*versions.last().unwrap() <= list(&reg, "a").version);
}

#[test]
fn set_instances_sends_a_reset_of_the_new_state() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "old", 1));
    let mut s = watch(&reg, "a");
    let (v0, _) = reset(next_ok(&mut s));
    let mut dup = inst("a", "n1", 1);
    dup.weight = 5;
    reg.set_instances("a", vec![inst("x", "n1", 1), inst("a", "n2", 1), dup]);
    let ev = next_ok(&mut s);
    let RegistryEvent::Reset {
        version,
        items: instances,
    } = &ev
    else {
        panic!("expected a Reset, got {ev:?}");
    };
    assert!(*version > v0);
    assert_eq!(sorted_ids(instances), ["n1:1", "n2:1"]);
    let n1 = instances.iter().find(|i| i.id() == "n1:1").unwrap();
    assert_eq!(n1.weight(), 5, "the later duplicate wins");
    assert_quiet(&mut s);
    // The owned records keep registration order (a duplicate keeps the
    // rank of the first) and are stored under the app.
    let records = reg.instances("a");
    assert_eq!(record_ids(&records), ["n1:1", "n2:1"], "registration order");
    assert_eq!(records[0].weight, 5);
    assert!(records.iter().all(|r| r.app == "a"), "stored under the app");

    reg.set_instances("a", Vec::new());
    let (v2, ids) = reset(next_ok(&mut s));
    assert!(v2 > *version);
    assert!(ids.is_empty(), "an empty app is a Reset too");
    assert_quiet(&mut s);
    assert!(reg.instances("a").is_empty());
}

#[test]
fn a_burst_against_a_watcher_that_does_not_read_stays_bounded() {
    let limit = 64;
    let reg = MemoryRegistry::with_event_queue_limit(limit);
    let mut slow = watch(&reg, "a");
    let mut slow_map = InstanceMap::default();
    apply_to(&mut slow_map, &next_ok(&mut slow)); // then it stops reading
    let mut reader = watch(&reg, "a");
    let mut held = InstanceMap::default();
    apply_to(&mut held, &next_ok(&mut reader));
    let mut max_queued = 0;
    for n in 0..100_000u32 {
        let port = u16::try_from(n % 2000).unwrap();
        let sent = if n % 10 == 9 {
            reg.remove("a", &format!("h:{port}"))
        } else {
            let mut i = inst("a", "h", port);
            i.weight = n;
            reg.put(i);
            true
        };
        if !sent {
            continue;
        }
        // The reader keeps up: one delta per change, nothing coalesced.
        let ev = next_ok(&mut reader);
        assert!(matches!(ev, RegistryEvent::Delta { .. }), "{ev:?}");
        assert!(apply_to(&mut held, &ev), "never an old event");
        max_queued = max_queued.max(reg.queued_events("a"));
    }
    assert!(max_queued <= limit + 1, "bounded: {max_queued}");
    assert!(max_queued >= limit, "the slow queue filled up to the limit");

    let truth = list(&reg, "a");
    let mut items = 0;
    while let Some(Some(item)) = slow.next().now_or_never() {
        apply_to(&mut slow_map, &item.expect("ok"));
        items += 1;
    }
    assert!(items <= limit + 1, "{items} items read");
    assert_eq!(slow_map.version(), Some(truth.version));
    assert!(
        same_state(&slow_map, &truth),
        "the slow watcher ends on the state"
    );
    while let Some(Some(item)) = reader.next().now_or_never() {
        apply_to(&mut held, &item.expect("ok"));
    }
    assert!(same_state(&held, &truth));
    assert_eq!(reg.queued_events("a"), 0);
}

#[test]
fn the_default_queue_limit_holds_too() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    next_ok(&mut s);
    for p in 0..(DEFAULT_EVENT_QUEUE_LIMIT as u16 + 10) {
        reg.put(inst("a", "h", p));
    }
    assert_eq!(reg.queued_events("a"), 1, "coalesced into one Reset");
    let (v, ids) = reset(next_ok(&mut s));
    assert_eq!(
        (v, ids.len()),
        (reg.version(), DEFAULT_EVENT_QUEUE_LIMIT + 10)
    );
    assert_quiet(&mut s);
    reg.put(inst("a", "z", 1));
    assert_eq!(delta(next_ok(&mut s)).1.len(), 1, "deltas again");
}

#[test]
fn watch_and_list_faults_hit_the_event_calls() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "h", 1));
    reg.fail_next_watches(1);
    assert!(matches!(
        block_on(reg.watch("a")),
        Err(RegistryError::Injected(_))
    ));
    assert_eq!(reg.watcher_count("a"), 0);
    reg.fail_next_watches(5);
    assert_eq!(list(&reg, "a").instances.len(), 1, "list answers");
    reg.fail_next_watches(0);
    reg.fail_next_lists(1);
    assert!(matches!(
        block_on(reg.list("a")),
        Err(RegistryError::Injected(_))
    ));
    let mut s = watch(&reg, "a");
    assert_eq!(reset(next_ok(&mut s)).1, ["h:1"], "watches answer");
    assert_eq!(reg.watcher_count("a"), 1);
    assert_eq!((reg.watch_calls(), reg.list_calls()), (2, 2));

    reg.panic_next_watches(1);
    reg.panic_next_lists(1);
    let w = block_on(AssertUnwindSafe(reg.watch("a")).catch_unwind());
    assert!(w.is_err(), "the watch future panicked");
    let l = block_on(AssertUnwindSafe(reg.list("a")).catch_unwind());
    assert!(l.is_err(), "the list future panicked");
    assert_eq!((reg.watch_calls(), reg.list_calls()), (3, 3), "counted");
    assert!(block_on(reg.list("a")).is_ok(), "once");
}

#[test]
fn missed_notifications_change_state_and_version_but_send_nothing() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    let mut map = InstanceMap::default();
    apply_to(&mut map, &next_ok(&mut s));

    reg.drop_next_pushes("a", 2);
    reg.put(inst("a", "h1", 1));
    reg.put(inst("a", "h2", 1));
    assert_quiet(&mut s);
    reg.set_instances_silently("a", vec![inst("a", "h3", 1)]);
    assert_quiet(&mut s);
    let truth = list(&reg, "a");
    assert!(
        map.version() < Some(truth.version),
        "a resync's listing is newer"
    );
    assert!(!same_state(&map, &truth), "the watcher missed it");

    // The next change arrives as a delta on top of the version of the last
    // change, which the watcher never saw: it sees the gap, applies nothing.
    reg.put(inst("a", "h4", 1));
    let ev = next_ok(&mut s);
    assert!(matches!(
        map.apply(ev, usize::MAX),
        steadfast_core::MapApplied::Gap
    ));
    assert_eq!(map.len(), 0, "nothing applied on a state never seen");
    // A resync (a listing applied as a Reset) corrects it.
    reg.put(inst("a", "h5", 1));
    let resync = list(&reg, "a");
    assert!(apply_to(&mut map, &RegistryEvent::reset(resync.clone())));
    assert!(same_state(&map, &resync), "the resync corrects it");
    // Later deltas follow it again.
    reg.put(inst("a", "h6", 1));
    assert!(apply_to(&mut map, &next_ok(&mut s)) || apply_to(&mut map, &next_ok(&mut s)));
    assert_eq!(map.len(), 4);
    // A new watch starts from the real state.
    let mut late = watch(&reg, "a");
    assert_eq!(
        reset(next_ok(&mut late)).1,
        ["h3:1", "h4:1", "h5:1", "h6:1"]
    );
}

#[test]
fn an_unhealthy_event_stream_stays_open_and_heals_with_the_next_change() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    // Not read yet: the first Reset is read now, before the error.
    reg.report_watch_errors("a");
    reg.report_watch_errors("a");
    assert_eq!(
        reg.queued_events("a"),
        2,
        "a repeated error is not queued twice"
    );
    reset(next_ok(&mut s));
    assert!(matches!(next(&mut s), Err(RegistryError::Unavailable(_))));
    assert_quiet(&mut s);
    assert_eq!(reg.watcher_count("a"), 1, "still open");
    reg.put(inst("a", "h", 1));
    assert_eq!(
        delta(next_ok(&mut s)).1.len(),
        1,
        "healed by the next delta"
    );
    reg.report_watch_errors("nobody");
}

#[test]
fn end_watches_delivers_what_was_sent_then_ends() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    let mut b = watch(&reg, "b");
    reg.put(inst("a", "h", 1));
    reg.end_watches("a");
    reg.put(inst("a", "h2", 1));
    assert_eq!(reg.watcher_count("a"), 0);
    assert_eq!(reg.watcher_count("b"), 1);
    // The first Reset was pending when the watch ended: read at the end.
    assert_eq!(reset(next_ok(&mut s)).1, ["h:1"]);
    assert_ended(&mut s);
    next_ok(&mut b);
    assert_quiet(&mut b);
    let mut again = watch(&reg, "a");
    assert_eq!(reset(next_ok(&mut again)).1, ["h2:1", "h:1"]);
}

#[test]
fn error_watches_sends_an_error_then_ends() {
    let reg = MemoryRegistry::new();
    let mut s1 = watch(&reg, "a");
    next_ok(&mut s1);
    reg.put(inst("a", "h", 1));
    let mut s2 = watch(&reg, "a");
    reg.error_watches("a");
    assert_eq!(reg.watcher_count("a"), 0);
    assert_eq!(delta(next_ok(&mut s1)).1.len(), 1);
    assert_eq!(reset(next_ok(&mut s2)).1, ["h:1"]);
    for s in [&mut s1, &mut s2] {
        assert!(matches!(next(s), Err(RegistryError::WatchEnded(_))));
        assert_ended(s);
    }
    reg.error_watches("nobody");
    reg.end_watches("nobody");
}

#[test]
fn scripted_stream_panics_hit_live_event_streams_once() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    next_ok(&mut s);
    reg.panic_watch_streams("a");
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| s.next().now_or_never()));
    assert!(polled.is_err(), "the stream panicked while polled");
    let mut again = watch(&reg, "a");
    reset(next_ok(&mut again));
    reg.put(inst("a", "h", 1));
    assert_eq!(
        delta(next_ok(&mut again)).1.len(),
        1,
        "new watches are fine"
    );
}

#[test]
fn closed_event_watchers_are_pruned_and_a_dropped_registry_ends_streams() {
    let reg = MemoryRegistry::new();
    let fut = reg.watch("a");
    assert_eq!(reg.watcher_count("a"), 1, "subscribed before polled");
    drop(fut);
    assert_eq!(reg.watcher_count("a"), 0);
    let keep = watch(&reg, "a");
    let gone = watch(&reg, "a");
    assert_eq!(reg.watcher_count("a"), 2);
    drop(gone);
    assert_eq!(reg.watcher_count("a"), 1, "pruned when counted");
    reg.put(inst("a", "h", 1));
    assert_eq!(reg.watcher_count("a"), 1);
    drop(keep);
    reg.put(inst("a", "h1", 1));
    assert_eq!(reg.watcher_count("a"), 0);
    assert_eq!(reg.watcher_count("never-seen"), 0);

    let mut s = watch(&reg, "a");
    reset(next_ok(&mut s));
    reg.put(inst("a", "h2", 1));
    drop(reg);
    assert_eq!(delta(next_ok(&mut s)).1.len(), 1, "sent items are kept");
    assert_ended(&mut s);
}
