//! Staleness and hold come with each registry delivery: a snapshot that
//! arrives during an outage (a hold ending, a registry restart) keeps the
//! stale mark, and only a delivery that says so clears it.

use std::sync::Arc;
use std::time::Instant;

use super::harness::{inst, meta, secs, APP, KEY};
use super::views::deliver;
use crate::backoff::BackoffPolicy;
use crate::change::Version;
use crate::resolver::ResolverMachine;
use crate::update::HeldInstances;

#[test]
fn staleness_is_taken_from_the_delivery_not_inferred_from_a_snapshot() {
    let t0 = Instant::now();
    let mut m = ResolverMachine::new(APP, BackoffPolicy::default(), 7);
    let _ = m.subscribe_at(KEY, t0);
    let m1 = meta(20001);
    let snap = Arc::new(vec![inst("a", &m1.revision)]);
    let feed = |v| super::views::reset_feed(v, &snap);
    let _ = deliver(&mut m, feed(1), None, None, t0);
    assert_eq!(m.take_updates()[0].stale_since, None);

    let down = t0 + secs(1);
    m.set_registry_stale(Some(down));
    assert_eq!(m.take_updates()[0].stale_since, Some(down));
    // The hold's end is delivered during the outage: still stale.
    let _ = deliver(&mut m, feed(2), Some(down), None, t0 + secs(3));
    let u = m.take_updates();
    assert_eq!(
        (u[0].version(), u[0].stale_since),
        (Version::at(2), Some(down))
    );
    // A bare snapshot does not clear it either.
    let _ = m.on_snapshot(Version::at(3), snap.clone(), t0 + secs(4));
    assert_eq!(m.take_updates()[0].stale_since, Some(down));
    // An overtaken delivery changes nothing, its staleness and hold included.
    let held = HeldInstances {
        count: 1,
        until: t0 + secs(9),
        grace: secs(3),
    };
    let _ = deliver(&mut m, feed(1), None, Some(held), t0 + secs(5));
    let u = m.update_for(KEY);
    assert_eq!(
        (u.version(), u.stale_since, u.held),
        (Version::at(3), Some(down), None)
    );
    // The recovery's delivery says fresh, with its hold.
    let _ = deliver(&mut m, feed(4), None, Some(held), t0 + secs(6));
    let u = m.take_updates();
    assert_eq!((u[0].stale_since, u[0].held), (None, Some(held)));
}
