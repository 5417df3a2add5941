//! The versioned events of [`WatchMachine`]: Resets and Deltas, decoded
//! once and shared, with the client's epoch moving up on a wiped store.

use super::*;

fn version(s: &Step) -> Version {
    s.event.as_ref().expect("an event").version()
}

fn held(m: &WatchMachine, id: &str) -> Arc<Instance> {
    m.instances()
        .into_iter()
        .find(|i| i.id() == id)
        .expect("held")
}

#[test]
fn deltas_carry_only_the_change_and_instances_are_decoded_once_and_shared() {
    let (mut m, stats) = machine();
    let t = Instant::now();
    let (a, b, c) = (inst("a"), inst("b"), inst("c"));
    m.start();
    let s = m.on_range(&range(7, vec![kv(&a, 3), kv(&b, 5)]), t);
    assert_eq!(version(&s), Version::at(7));
    m.on_opened(t);
    m.on_message(&created(7, 2), t);
    let a0 = held(&m, "a:80");
    let s = m.on_message(&events(8, vec![(EventType::Put, kv(&c, 8))]), t);
    assert_eq!(delta(&s), (vec!["c:80".into()], vec![], 8));
    assert_eq!(version(&s), Version::at(8));
    // The delta's instance is the one held, not a copy.
    let Some(RegistryEvent::Delta { upserts, .. }) = &s.event else {
        panic!()
    };
    assert!(Arc::ptr_eq(&upserts[0], &held(&m, "c:80")));
    // A re-read of unchanged records keeps their `Arc`s.
    m.on_interrupted(&Interruption::Ended, t);
    let s = m.on_range(&range(9, vec![kv(&a, 3), kv(&b, 5), kv(&c, 8)]), t);
    assert_eq!(ids(&s, &m), vec!["a:80", "b:80", "c:80"]);
    assert!(Arc::ptr_eq(&a0, &held(&m, "a:80")));
    assert_eq!(stats.snapshot().missed_notifications, 0);
    // A put and a delete of the same id in one message: the last wins.
    m.on_opened(t);
    m.on_message(&created(9, 2), t);
    let bad = KeyValue {
        value: b"garbage".to_vec(),
        ..kv(&a, 10)
    };
    let s = m.on_message(
        &events(
            11,
            vec![
                (EventType::Put, bad),
                (EventType::Put, kv(&b, 11)),
                (EventType::Delete, kv(&b, 11)),
            ],
        ),
        t,
    );
    // `a` turned invalid: removed and counted; `b` put then deleted.
    let (up, mut rm, rev) = delta(&s);
    rm.sort();
    assert_eq!(
        (up, rm, rev),
        (vec![], vec!["a:80".into(), "b:80".into()], 11)
    );
    assert_eq!(stats.snapshot().invalid_records, 1);
    assert_eq!(ids(&s, &m), vec!["c:80"]);
    // A delete of an unknown key changes nothing: no event.
    let s = m.on_message(&events(12, vec![(EventType::Delete, kv(&a, 12))]), t);
    assert_eq!(s.event, None);
}

#[test]
fn a_wiped_store_bumps_the_client_epoch_once_and_its_state_is_newer() {
    let t = Instant::now();
    let epochs = Epochs::default();
    let shared = |m: WatchMachine| m.with_epochs(epochs.clone());
    let (m1, _) = machine();
    let (m2, _) = machine();
    let (mut m1, mut m2) = (shared(m1), shared(m2));
    live_at(&mut m1, 40, vec![kv(&inst("a"), 3)], t);
    live_at(&mut m2, 41, vec![], t);
    let before = m1.version().unwrap();
    // The store restarts at revision 1; both watches re-read it.
    let broke = Interruption::Stream(WatchError::Transport("cut".into()));
    for m in [&mut m1, &mut m2] {
        m.on_interrupted(&broke, t);
        assert_eq!(m.on_timer(t + Duration::from_millis(250)).next, Next::Range);
    }
    let s1 = m1.on_range(&range(3, vec![kv(&inst("b"), 2)]), t);
    let s2 = m2.on_range(&range(4, vec![]), t);
    assert_eq!(version(&s1), Version::of(1, 3));
    assert!(version(&s1) > before, "the wiped store's state is newer");
    assert_eq!(version(&s2).epoch, 1, "one bump for the client");
    // Deltas continue in the new epoch.
    m1.on_opened(t);
    m1.on_message(&created(4, 2), t);
    let s = m1.on_message(&events(5, vec![(EventType::Put, kv(&inst("c"), 5))]), t);
    assert_eq!(version(&s), Version::of(1, 5));
    // A re-subscribe (a new machine) starts in the current epoch, and its
    // first range, if behind what the client saw, proves another restart.
    let (m3, _) = machine();
    let mut m3 = shared(m3);
    m3.start();
    assert_eq!(version(&m3.on_range(&range(9, vec![]), t)).epoch, 1);
    let (m4, _) = machine();
    let mut m4 = shared(m4);
    m4.start();
    let s = m4.on_range(&range(2, vec![]), t);
    assert_eq!(version(&s), Version::of(2, 2));
    // Another cluster id is a restart too.
    m4.on_opened(t);
    m4.on_interrupted(&broke, t);
    assert_eq!(m4.on_timer(t + Duration::from_secs(1)).next, Next::Range);
    let mut r = range(50, vec![]);
    r.header.cluster_id = 7;
    assert_eq!(version(&m4.on_range(&r, t)).epoch, 3);
}
