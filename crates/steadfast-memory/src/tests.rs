//! Unit tests of [`MemoryRegistry`]: snapshots, pushes, faults and counters.
//! Everything is synchronous, so the streams are polled with
//! `now_or_never` / `block_on` and no runtime or clock is needed.

use futures::executor::block_on;
use futures::{FutureExt, StreamExt};
use steadfast_core::{Registry, RegistryError, ServiceInstance, SnapshotStream};

use crate::MemoryRegistry;

fn inst(app: &str, host: &str, port: u16) -> ServiceInstance {
    ServiceInstance::new(app, host, port)
}

fn ids(snapshot: &[ServiceInstance]) -> Vec<&str> {
    snapshot.iter().map(|i| i.id.as_str()).collect()
}

fn watch(reg: &MemoryRegistry, app: &str) -> SnapshotStream {
    block_on(reg.watch(app)).expect("watch")
}

/// The next item, which must already be there.
fn next_ok(stream: &mut SnapshotStream) -> Vec<ServiceInstance> {
    stream
        .next()
        .now_or_never()
        .expect("an item is ready")
        .expect("stream still open")
        .expect("an Ok item")
        .as_ref()
        .clone()
}

/// Asserts nothing is buffered and the stream is still open.
fn assert_quiet(stream: &mut SnapshotStream) {
    assert!(stream.next().now_or_never().is_none(), "unexpected item");
}

#[test]
fn first_item_is_the_current_snapshot() {
    let reg = MemoryRegistry::new();
    let mut empty = watch(&reg, "a");
    assert!(next_ok(&mut empty).is_empty());
    assert_quiet(&mut empty);

    reg.put(inst("a", "h2", 1));
    reg.put(inst("a", "h1", 1));
    let mut s = watch(&reg, "a");
    assert_eq!(
        ids(&next_ok(&mut s)),
        ["h2:1", "h1:1"],
        "registration order"
    );
    assert_quiet(&mut s);
}

#[test]
fn changes_push_full_snapshots_to_every_watcher() {
    let reg = MemoryRegistry::new();
    let mut w1 = watch(&reg, "a");
    let mut w2 = watch(&reg, "a");
    let mut other = watch(&reg, "b");
    for w in [&mut w1, &mut w2, &mut other] {
        assert!(next_ok(w).is_empty());
    }

    reg.put(inst("a", "h1", 1));
    block_on(reg.register(inst("a", "h2", 1))).unwrap();
    for w in [&mut w1, &mut w2] {
        assert_eq!(ids(&next_ok(w)), ["h1:1"]);
        assert_eq!(ids(&next_ok(w)), ["h1:1", "h2:1"]);
    }

    block_on(reg.unregister(inst("a", "h1", 1))).unwrap();
    assert!(reg.remove("a", "h2:1"));
    for w in [&mut w1, &mut w2] {
        assert_eq!(ids(&next_ok(w)), ["h2:1"]);
        assert!(next_ok(w).is_empty());
        assert_quiet(w);
    }
    assert_quiet(&mut other);
}

#[test]
fn register_replaces_by_id_and_removing_an_absent_id_does_not_push() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    next_ok(&mut s);

    let mut heavy = inst("a", "h", 1);
    heavy.weight = 7;
    reg.put(inst("a", "h", 1));
    reg.put(heavy);
    next_ok(&mut s);
    let snap = next_ok(&mut s);
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].weight, 7);

    assert!(!reg.remove("a", "nope"));
    block_on(reg.unregister(inst("a", "other", 2))).unwrap();
    assert_quiet(&mut s);
    assert_eq!(reg.instances("a").len(), 1);
}

#[test]
fn set_instances_replaces_the_app_in_one_push() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "old", 1));
    let mut s = watch(&reg, "a");
    next_ok(&mut s);

    reg.set_instances("a", vec![inst("a", "n2", 1), inst("x", "n1", 1)]);
    let snap = next_ok(&mut s);
    assert_eq!(ids(&snap), ["n2:1", "n1:1"], "registration order");
    assert!(snap.iter().all(|i| i.app == "a"), "stored under the app");
    assert_quiet(&mut s);

    reg.set_instances("a", Vec::new());
    assert!(next_ok(&mut s).is_empty());
    assert!(reg.instances("a").is_empty());
}

#[test]
fn list_returns_state_and_counts_calls() {
    let reg = MemoryRegistry::new();
    assert!(block_on(reg.list("a")).unwrap().is_empty());
    reg.put(inst("a", "h", 1));
    reg.put(inst("b", "h", 1));
    assert_eq!(ids(&block_on(reg.list("a")).unwrap()), ["h:1"]);
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
    assert_eq!(ids(&next_ok(&mut s)), ["h:1"]);
    assert_eq!(clone.instances("a").len(), 1);
    assert_eq!(reg.watch_calls(), 1);
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
    assert!(next_ok(&mut s).is_empty());
    assert_eq!(reg.watch_calls(), 2);
    assert_eq!(reg.watcher_count("a"), 1);
}

#[test]
fn fail_next_registers_covers_register_and_unregister() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "h", 1));
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
        ids(&reg.instances("a")),
        ["h:1"],
        "failed calls change nothing"
    );
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
fn dropped_pushes_change_state_but_reach_no_watcher() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    let mut b = watch(&reg, "b");
    next_ok(&mut s);
    next_ok(&mut b);

    reg.drop_next_pushes("a", 2);
    reg.put(inst("a", "h1", 1));
    reg.put(inst("b", "h1", 1));
    reg.put(inst("a", "h2", 1));
    assert_quiet(&mut s);
    assert_eq!(ids(&next_ok(&mut b)), ["h1:1"], "other apps unaffected");
    assert_eq!(reg.instances("a").len(), 2, "state changed");
    assert_eq!(block_on(reg.list("a")).unwrap().len(), 2);

    // A new watch still starts from the real state.
    let mut late = watch(&reg, "a");
    assert_eq!(ids(&next_ok(&mut late)), ["h1:1", "h2:1"]);

    reg.remove("a", "h1:1");
    assert_eq!(ids(&next_ok(&mut s)), ["h2:1"]);
    assert_eq!(ids(&next_ok(&mut late)), ["h2:1"]);
}

#[test]
fn end_watches_ends_streams_cleanly_after_buffered_items() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    let mut b = watch(&reg, "b");
    reg.put(inst("a", "h", 1));
    reg.end_watches("a");
    assert_eq!(reg.watcher_count("a"), 0);
    assert_eq!(reg.watcher_count("b"), 1);

    assert!(next_ok(&mut s).is_empty());
    assert_eq!(ids(&next_ok(&mut s)), ["h:1"]);
    assert_eq!(s.next().now_or_never(), Some(None), "ended");

    next_ok(&mut b);
    assert_quiet(&mut b);
    // The registry itself keeps working: re-watching gets the state.
    let mut again = watch(&reg, "a");
    assert_eq!(ids(&next_ok(&mut again)), ["h:1"]);
}

#[test]
fn error_watches_sends_an_error_then_ends() {
    let reg = MemoryRegistry::new();
    let mut s1 = watch(&reg, "a");
    let mut s2 = watch(&reg, "a");
    reg.error_watches("a");
    assert_eq!(reg.watcher_count("a"), 0);
    for s in [&mut s1, &mut s2] {
        assert!(next_ok(s).is_empty());
        let item = s.next().now_or_never().flatten().expect("an error item");
        assert!(matches!(item, Err(RegistryError::WatchEnded(_))));
        assert_eq!(s.next().now_or_never(), Some(None));
    }
    // Unknown apps are a no-op.
    reg.error_watches("nobody");
    reg.end_watches("nobody");
}

#[test]
fn closed_watchers_are_pruned() {
    let reg = MemoryRegistry::new();
    let keep = watch(&reg, "a");
    let gone = watch(&reg, "a");
    assert_eq!(reg.watcher_count("a"), 2);
    drop(gone);
    assert_eq!(reg.watcher_count("a"), 1);
    reg.put(inst("a", "h", 1));
    drop(keep);
    reg.put(inst("a", "h2", 1));
    assert_eq!(reg.watcher_count("a"), 0);
    assert_eq!(reg.watcher_count("never-seen"), 0);
}

#[test]
fn an_unpolled_watch_future_is_already_subscribed() {
    let reg = MemoryRegistry::new();
    let fut = reg.watch("a");
    assert_eq!(reg.watcher_count("a"), 1);
    drop(fut);
    assert_eq!(reg.watcher_count("a"), 0);
}

#[test]
fn registry_works_as_a_trait_object() {
    let reg = MemoryRegistry::new();
    let dyn_reg: std::sync::Arc<dyn Registry> = std::sync::Arc::new(reg.clone());
    block_on(dyn_reg.register(inst("a", "h", 1))).unwrap();
    assert_eq!(reg.instances("a").len(), 1);
    assert!(format!("{reg:?}").contains("MemoryRegistry"));
}

#[test]
fn set_instances_silently_changes_state_but_notifies_nobody() {
    let reg = MemoryRegistry::new();
    reg.put(inst("a", "h1", 1));
    let mut s = watch(&reg, "a");
    next_ok(&mut s);
    reg.set_instances_silently("a", vec![inst("x", "h2", 1)]);
    assert_quiet(&mut s);
    assert_eq!(ids(&block_on(reg.list("a")).unwrap()), ["h2:1"]);
    assert!(reg.instances("a").iter().all(|i| i.app == "a"));
    // The next change pushes the full state, the silent one included.
    reg.put(inst("a", "h3", 1));
    assert_eq!(ids(&next_ok(&mut s)), ["h2:1", "h3:1"]);
}

#[test]
fn report_watch_errors_keeps_the_streams_open() {
    let reg = MemoryRegistry::new();
    let mut s = watch(&reg, "a");
    next_ok(&mut s);
    reg.report_watch_errors("a");
    let item = s.next().now_or_never().flatten().expect("an error item");
    assert!(matches!(item, Err(RegistryError::Unavailable(_))));
    assert_eq!(reg.watcher_count("a"), 1, "still open");
    reg.put(inst("a", "h", 1));
    assert_eq!(ids(&next_ok(&mut s)), ["h:1"], "healed by the next push");
    reg.report_watch_errors("nobody");
}

#[test]
fn scripted_panics_hit_the_next_calls_and_the_live_streams() {
    use std::panic::AssertUnwindSafe;
    let reg = MemoryRegistry::new();
    reg.panic_next_watches(1);
    reg.panic_next_lists(1);
    let w = block_on(AssertUnwindSafe(reg.watch("a")).catch_unwind());
    assert!(w.is_err(), "the watch future panicked");
    let l = block_on(AssertUnwindSafe(reg.list("a")).catch_unwind());
    assert!(l.is_err(), "the list future panicked");
    assert_eq!((reg.watch_calls(), reg.list_calls()), (1, 1), "counted");
    assert!(block_on(reg.list("a")).is_ok(), "once");

    let mut s = watch(&reg, "a");
    next_ok(&mut s);
    reg.panic_watch_streams("a");
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| s.next().now_or_never()));
    assert!(polled.is_err(), "the stream panicked while polled");
    let mut again = watch(&reg, "a");
    assert!(next_ok(&mut again).is_empty(), "new watches are fine");
}
