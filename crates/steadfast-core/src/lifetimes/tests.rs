//! Hand-stepped tests of the subscription lifetimes.

use std::time::{Duration, Instant};

use super::*;

fn reference(iface: &str, apps: &[&str]) -> Reference {
    Reference::new(iface, "tri", apps.iter().copied())
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn resolvers_are_counted_across_references_and_stop_with_the_last() {
    let mut l = Lifetimes::new();
    let (ab, bc) = (reference("A", &["a", "b"]), reference("B", &["b", "c"]));
    let Ok(SubscribeOutcome::New {
        start_resolvers,
        follow: None,
        hold: h1,
    }) = l.subscribe(&ab, false)
    else {
        panic!("a new subscription")
    };
    assert_eq!(start_resolvers, strings(&["a", "b"]));
    let Ok(SubscribeOutcome::New {
        start_resolvers,
        hold: h2,
        ..
    }) = l.subscribe(&bc, false)
    else {
        panic!("a new subscription")
    };
    assert_eq!(start_resolvers, strings(&["c"]), "b runs already");
    assert_ne!(h1, h2);
    // Twice subscribed: the first unsubscribe keeps it.
    assert_eq!(
        l.subscribe(&ab, true),
        Ok(SubscribeOutcome::Again { new_hold: None })
    );
    assert_eq!(l.unsubscribe(&ab), Ok(None));
    let release = l.unsubscribe(&ab).unwrap().expect("the last one");
    assert_eq!(release.stop_resolvers, strings(&["a"]), "b is still needed");
    assert_eq!(l.resolvers().collect::<Vec<_>>(), ["b", "c"]);
    assert_eq!(
        l.unsubscribe(&ab),
        Err(LifetimeRefused::NotSubscribed(ab.subscribe_key()))
    );
    let release = l.unsubscribe(&bc).unwrap().unwrap();
    assert_eq!(release.stop_resolvers, strings(&["b", "c"]));
    assert_eq!(l.resolvers().count(), 0);
}

#[test]
fn a_reference_whose_handles_all_dropped_is_released_after_the_linger_unless_taken_again() {
    let t0 = Instant::now();
    let mut l = Lifetimes::new();
    let r = reference("A", &["a"]);
    let Ok(SubscribeOutcome::New { hold, .. }) = l.subscribe(&r, false) else {
        panic!()
    };
    assert_eq!(l.poll_timeout(), None);
    l.handles_dropped(&r, hold, t0, Some(secs(30)));
    assert_eq!(l.poll_timeout(), Some(t0 + secs(30)));
    // A later report (a shell restart re-reporting dead holds) keeps the
    // deadline: a restart never makes a linger longer.
    l.handles_dropped(&r, hold, t0 + secs(10), Some(secs(30)));
    assert_eq!(l.poll_timeout(), Some(t0 + secs(30)));
    assert!(l.handle_timeout(t0 + secs(29)).is_empty());
    // SubscribeOutcome again within the linger: a new hold, no linger.
    let Ok(SubscribeOutcome::Again {
        new_hold: Some(second),
    }) = l.subscribe(&r, false)
    else {
        panic!("every handle was dropped: a new hold")
    };
    assert_eq!(l.poll_timeout(), None);
    // The old hold's late report changes nothing.
    l.handles_dropped(&r, hold, t0 + secs(29), Some(secs(30)));
    assert_eq!(l.poll_timeout(), None);
    l.handles_dropped(&r, second, t0 + secs(40), Some(secs(30)));
    let released = l.handle_timeout(t0 + secs(70));
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].stop_resolvers, strings(&["a"]));
    assert!(!l.is_subscribed(&r));
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn without_a_linger_a_reference_stays_until_unsubscribed() {
    let t0 = Instant::now();
    let mut l = Lifetimes::new();
    let r = reference("A", &["a"]);
    let Ok(SubscribeOutcome::New { hold, .. }) = l.subscribe(&r, false) else {
        panic!()
    };
    l.handles_dropped(&r, hold, t0, None);
    assert_eq!(l.poll_timeout(), None);
    assert!(l.handle_timeout(t0 + secs(3600)).is_empty());
    assert!(l.is_subscribed(&r));
    // A linger past the clock's range never ends either.
    l.handles_dropped(&r, hold, t0, Some(Duration::MAX));
    assert!(l.is_subscribed(&r));
}

#[test]
fn mapping_followers_count_their_interface_and_their_attached_apps() {
    let mut l = Lifetimes::new();
    let (f1, f2) = (reference("I", &[]), {
        let mut r = reference("I", &[]);
        r.protocol = "rest".into();
        r
    });
    let Ok(SubscribeOutcome::New {
        start_resolvers,
        follow,
        ..
    }) = l.subscribe(&f1, false)
    else {
        panic!()
    };
    assert!(start_resolvers.is_empty());
    assert_eq!(follow.as_deref(), Some("I"));
    let Ok(SubscribeOutcome::New { follow, .. }) = l.subscribe(&f2, false) else {
        panic!()
    };
    assert_eq!(follow, None, "the interface is followed already");
    assert_eq!(l.followers("I").count(), 2);
    // The mapping lists app x: both attach; x's resolver starts once.
    assert_eq!(l.attach_mapped(&f1, "x"), Some(true));
    assert_eq!(l.attach_mapped(&f1, "x"), None, "once");
    assert_eq!(l.attach_mapped(&f2, "x"), Some(false));
    // A failed attach is forgotten, so it is tried again.
    assert_eq!(l.attach_mapped(&f2, "y"), Some(true));
    l.attach_failed(&f2, "y");
    assert_eq!(l.mapped(&f2).collect::<Vec<_>>(), ["x"]);
    assert_eq!(l.attach_mapped(&f2, "y"), Some(true));
    // x leaves the mapping: detached from both, its resolver stops with the
    // last.
    assert_eq!(l.detach_mapped(&f1, "x"), Some(false));
    assert_eq!(l.detach_mapped(&f1, "x"), None);
    assert_eq!(l.detach_mapped(&f2, "x"), Some(true));
    // The last follower releases the interface and what it attached.
    assert_eq!(l.unsubscribe(&f1).unwrap().unwrap().unfollow, None);
    let release = l.unsubscribe(&f2).unwrap().unwrap();
    assert_eq!(release.unfollow.as_deref(), Some("I"));
    assert_eq!(release.stop_resolvers, strings(&["y"]));
    // A reference with apps never attaches through a mapping.
    let named = reference("J", &["a"]);
    l.subscribe(&named, false).unwrap();
    assert_eq!(l.attach_mapped(&named, "z"), None);
}

#[test]
fn nothing_is_taken_after_shutdown_and_nothing_without_apps_or_interface() {
    let t0 = Instant::now();
    let mut l = Lifetimes::new();
    let nothing = Reference::new("", "tri", Vec::<String>::new());
    assert_eq!(
        l.subscribe(&nothing, false),
        Err(LifetimeRefused::NoProviderApps(nothing.subscribe_key()))
    );
    let r = reference("A", &["a"]);
    let Ok(SubscribeOutcome::New { hold, .. }) = l.subscribe(&r, false) else {
        panic!()
    };
    l.handles_dropped(&r, hold, t0, Some(secs(1)));
    assert!(l.shut_down());
    assert!(!l.shut_down(), "once");
    assert!(l.is_shut_down());
    assert_eq!(l.subscribe(&r, false), Err(LifetimeRefused::ShutDown));
    assert_eq!(l.unsubscribe(&r), Err(LifetimeRefused::ShutDown));
    assert_eq!(l.poll_timeout(), None, "no linger survives it");
    assert!(l.handle_timeout(t0 + secs(5)).is_empty());
    assert_eq!(l.attach_mapped(&r, "x"), None);
    assert_eq!(l.resolvers().count(), 0);
}
