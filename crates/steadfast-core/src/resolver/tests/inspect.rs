//! [`ResolverMachine::inspect`](crate::resolver::ResolverMachine::inspect)
//! on a hand-stepped clock: instances with their revisions, a resolved
//! revision, and an unresolved one whose attempts, last error, next retry
//! and unresolved time follow the schedule.

use std::time::Instant;

use super::harness::{armed, fail, fetched, inst, meta, secs, Harness};
use crate::resolver::RevisionPhase;

#[test]
fn inspection_follows_the_retry_schedule_of_an_unresolved_revision() {
    let t0 = Instant::now();
    let (m1, m2) = (meta(20001), meta(20002));
    let (r1, r2) = (m1.revision.clone(), m2.revision.clone());
    let mut h = Harness::active(t0);
    let a = h.snapshot(1, vec![inst("a", &r1), inst("b", &r2), inst("c", &r2)], t0);
    let (f1, f2) = (fetched(&a, &r1), fetched(&a, &r2));

    let i = h.m.inspect(t0);
    assert_eq!(i.instances.len(), 3);
    assert_eq!(
        i.instances
            .iter()
            .map(|x| x.id.as_str())
            .collect::<Vec<_>>(),
        ["a:8080", "b:8080", "c:8080"]
    );
    assert!(i
        .revisions
        .iter()
        .all(|r| r.phase == RevisionPhase::Fetching));

    h.complete(f1, Ok(m1.clone()), t0 + secs(1));
    let (_, delay) = armed(&h.complete(f2, fail(), t0 + secs(1)), &r2);
    let now = t0 + secs(1);
    let i = h.m.inspect(now);
    let one = i.revisions.iter().find(|r| r.revision == r1).expect("r1");
    assert_eq!(one.phase, RevisionPhase::Resolved);
    assert_eq!((one.attempts, one.instances), (0, 1));
    assert!(one.next_retry_in.is_none() && one.unresolved_for.is_none());
    let two = i.revisions.iter().find(|r| r.revision == r2).expect("r2");
    assert_eq!(two.phase, RevisionPhase::Waiting);
    assert_eq!((two.attempts, two.instances), (1, 2));
    assert!(two.last_error.as_deref().is_some_and(|e| !e.is_empty()));
    assert_eq!(two.next_retry_in, Some(delay));
    assert_eq!(two.unresolved_for, Some(secs(1)));

    // Half a second later the retry is half a second closer.
    let later = now + std::time::Duration::from_millis(500);
    let two =
        h.m.inspect(later)
            .revisions
            .into_iter()
            .find(|r| r.revision == r2)
            .expect("r2");
    assert_eq!(
        two.next_retry_in,
        delay.checked_sub(std::time::Duration::from_millis(500))
    );
    assert_eq!(
        two.unresolved_for,
        Some(std::time::Duration::from_millis(1500))
    );
}
