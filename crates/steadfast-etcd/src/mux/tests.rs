//! Hand-stepped tests of the shared-stream planner and the range batcher.

use std::time::{Duration, Instant};

use super::*;

const MS: Duration = Duration::from_millis(1);

fn mux() -> Mux {
    Mux::new(MuxPolicy {
        debounce: 10 * MS,
        max_delay: 100 * MS,
        side_limit: 3,
    })
}

fn opened(a: &[MuxAction]) -> Vec<(Slot, Vec<SubKey>)> {
    a.iter()
        .filter_map(|a| match a {
            MuxAction::Open { slot, watches } => {
                Some((*slot, watches.iter().map(|(k, _)| *k).collect()))
            }
            MuxAction::Close(_) => None,
        })
        .collect()
}

#[test]
fn a_burst_of_requests_opens_one_main_stream_after_the_quiet_time() {
    let t0 = Instant::now();
    let mut m = mux();
    for k in 0..100 {
        m.want(k, t0 + MS * (k as u32 % 5));
    }
    assert!(m.poll(t0 + 5 * MS, false).is_empty(), "still debouncing");
    assert_eq!(m.next_wake(false), Some(t0 + 14 * MS));
    // More coming (ranges in flight) waits up to the cap.
    assert!(m.poll(t0 + 50 * MS, true).is_empty());
    let a = m.poll(t0 + 100 * MS, true);
    assert_eq!(opened(&a), vec![(Slot::Main, (0..100).collect())]);
    // Ids are unique and route to their app only on their slot.
    let MuxAction::Open { watches, .. } = &a[0] else {
        panic!()
    };
    let (k, id) = watches[7];
    assert_eq!(m.route(Slot::Main, id), Some(k));
    assert_eq!(m.route(Slot::Side, id), None);
    assert!(watches.iter().all(|(_, id)| *id > 0));
}

#[test]
fn newcomers_go_to_the_side_stream_and_main_is_not_reopened() {
    let t0 = Instant::now();
    let mut m = mux();
    m.want(1, t0);
    m.want(2, t0);
    m.poll(t0 + 10 * MS, false);
    // While main opens, a newcomer waits for side (main is never replaced
    // while opening).
    m.want(3, t0 + 11 * MS);
    let a = m.poll(t0 + 30 * MS, false);
    assert_eq!(opened(&a), vec![(Slot::Side, vec![3])]);
    m.opened(Slot::Main);
    // Side opening: the next one waits until it answered.
    m.want(4, t0 + 31 * MS);
    assert!(m.poll(t0 + 50 * MS, false).is_empty());
    m.opened(Slot::Side);
    let a = m.poll(t0 + 51 * MS, false);
    assert_eq!(opened(&a), vec![(Slot::Side, vec![3, 4])], "side rebuilt");
    assert_eq!(m.members(Slot::Main), 2);
}

#[test]
fn a_left_app_is_no_longer_routed_and_an_empty_stream_closes() {
    let t0 = Instant::now();
    let mut m = mux();
    m.want(1, t0);
    m.want(2, t0);
    let a = m.poll(t0 + 10 * MS, false);
    let MuxAction::Open { watches, .. } = &a[0] else {
        panic!()
    };
    let id1 = watches[0].1;
    m.opened(Slot::Main);
    m.leave(1);
    assert_eq!(m.route(Slot::Main, id1), None, "stale events ignored");
    assert!(m.poll(t0 + 20 * MS, false).is_empty());
    m.leave(2);
    assert_eq!(
        m.poll(t0 + 21 * MS, false),
        vec![MuxAction::Close(Slot::Main)]
    );
    // The app back from a resync gets a new watch id.
    m.want(1, t0 + 30 * MS);
    let a = m.poll(t0 + 40 * MS, false);
    let MuxAction::Open { slot, watches } = &a[0] else {
        panic!()
    };
    assert_eq!(*slot, Slot::Main, "main was down: rebuilt");
    assert!(watches[0].1 > id1);
}

#[test]
fn a_broken_main_takes_side_in_and_a_full_side_moves_to_main() {
    let t0 = Instant::now();
    let mut m = mux();
    m.want(1, t0);
    m.poll(t0 + 10 * MS, false);
    m.opened(Slot::Main);
    for k in 2..5 {
        m.want(k, t0 + 20 * MS);
    }
    let a = m.poll(t0 + 30 * MS, false);
    assert_eq!(opened(&a), vec![(Slot::Side, vec![2, 3, 4])]);
    m.opened(Slot::Side);
    // One more exceeds the side limit (3): everyone moves to main.
    m.want(5, t0 + 40 * MS);
    let a = m.poll(t0 + 50 * MS, false);
    assert!(a.contains(&MuxAction::Close(Slot::Side)));
    assert_eq!(opened(&a), vec![(Slot::Main, vec![1, 5, 2, 3, 4])]);
    assert_eq!(m.members(Slot::Side), 0);
    // Main breaks: its members are returned and on no stream.
    let gone = m.broken(Slot::Main);
    assert_eq!(gone.len(), 5);
    assert_eq!(m.slot_of(1), None);
}

#[test]
fn ranges_go_in_batches_with_a_bounded_number_in_flight() {
    let mut b = RangeBatcher::new(128, 2);
    for k in 0..1000 {
        b.push(k);
    }
    b.push(5);
    b.remove(6);
    let first = b.take().unwrap();
    assert_eq!(first.len(), 128);
    assert!(!first.contains(&6));
    assert_eq!(b.take().unwrap().len(), 128);
    assert_eq!(b.take(), None, "two in flight");
    let mut batches = 2;
    let mut total = 256;
    for _ in 0..20 {
        b.done();
        if let Some(x) = b.take() {
            batches += 1;
            total += x.len();
        }
    }
    assert_eq!(total, 999);
    assert_eq!(batches, 8);
    b.done();
    assert!(!b.busy());
}
