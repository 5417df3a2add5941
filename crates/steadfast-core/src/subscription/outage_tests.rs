//! Hand-stepped-clock tests of what an outage does to the subscription:
//! staleness travels with every delivery (a hold ending or a replacement
//! machine during an outage never reads as fresh), an unhealthy stream that stays silent
//! is re-opened on the recover schedule (never sooner than the backoff
//! cap), a resume resync overtaken by pushes backs off on the same
//! schedule, and a backend that re-reads on resume gets no second read.

use std::time::Duration;

use super::tests::{config, insts, ports, Sim, A};
use super::{SubscriptionAction, SubscriptionMachine, TimerKind};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Ready on [1, 2, 3, 4]; an outage during which 2, 3 and 4 expire; the
/// recovery holds them for the grace (3 s), and 1 s later the registry goes
/// down again (watch ended, every call failing).
fn down_again_while_holding() -> Sim {
    let mut sim = Sim::new(config(), insts(&[1, 2, 3, 4]));
    sim.advance(Duration::from_secs(1));
    sim.err_item();
    sim.advance(Duration::from_secs(5));
    sim.push(insts(&[1]));
    let d = sim.last();
    assert_eq!((d.held.map(|h| h.count), d.stale_since), (Some(3), None));
    sim.advance(Duration::from_secs(1));
    sim.up = false;
    sim.end_stream();
    assert_eq!(sim.m.stale_since(A), Some(sim.now));
    sim
}

#[test]
fn a_hold_ending_during_an_outage_is_delivered_stale() {
    let mut sim = down_again_while_holding();
    let down = sim.now;
    let before = sim.deliveries().len();
    sim.advance(Duration::from_secs(2));
    let ds = sim.deliveries();
    assert_eq!(ds.len(), before + 1, "the hold's end is delivered");
    let d = &ds[before].1;
    assert_eq!(ports(&d.instances), [1], "nothing held past the grace");
    assert_eq!(d.held, None);
    assert_eq!(
        d.stale_since,
        Some(down),
        "still stale: the registry is down"
    );
    // A subscriber attaching meanwhile is told the same.
    let acts = sim.m.subscribe(A, 2, sim.now);
    let caught_up = acts.iter().find_map(|a| match a {
        SubscriptionAction::Deliver { delivery, .. } => Some(delivery.stale_since),
        _ => None,
    });
    assert_eq!(caught_up, Some(Some(down)));
    // Health was announced once, at the start of the outage.
    let health = sim.count(|a| matches!(a, SubscriptionAction::Health { .. }));
    assert_eq!(health, 2, "one per outage");
    // The registry answers again: the next delivery is fresh.
    sim.up = true;
    sim.advance(Duration::from_secs(2));
    assert_eq!(sim.m.stale_since(A), None);
    assert_eq!(sim.last().stale_since, None);
}

#[test]
fn a_replacement_during_an_outage_keeps_the_hold_and_the_stale_mark() {
    let mut sim = down_again_while_holding();
    let down = sim.now;
    // The actor panics 1 s into the outage; a new machine resumes while
    // the hold lasts (2 s left): nothing is delivered, nothing is dropped.
    sim.timers.clear();
    sim.now += Duration::from_secs(1);
    let before = sim.deliveries().len();
    let acts = sim.replace();
    sim.perform(acts);
    assert_eq!(
        sim.deliveries().len(),
        before,
        "the subscribers keep theirs"
    );
    assert_eq!(sim.m.stale_since(A), Some(down), "the re-open failed");
    // The carried hold ends on its own deadline, delivered stale and whole.
    sim.advance(Duration::from_secs(2));
    let ds = sim.deliveries();
    assert_eq!(ds.len(), before + 1, "the hold's end");
    let d = &ds[before].1;
    assert_eq!((ports(&d.instances), d.held, d.carried), (vec![1], None, 1));
    assert_eq!(
        d.stale_since,
        Some(down),
        "stale: the registry is still down"
    );
}

#[test]
fn a_replacement_after_the_hold_ended_delivers_its_end_at_once() {
    let mut sim = down_again_while_holding();
    let down = sim.now;
    sim.timers.clear();
    sim.now += Duration::from_secs(3);
    let acts = sim.replace();
    let delivered = acts.iter().find_map(|a| match a {
        SubscriptionAction::Deliver { delivery, .. } => Some(delivery.clone()),
        _ => None,
    });
    delivered.expect("the resume delivers the hold's end");
    sim.perform(acts);
    let d = sim.last();
    assert_eq!(ports(&d.instances), [1]);
    assert_eq!(d.stale_since, Some(down));
}

#[test]
fn a_silent_unhealthy_stream_is_reopened_after_the_backoff_cap() {
    let mut sim = Sim::new(config(), insts(&[1]));
    sim.advance(Duration::from_secs(1));
    let errored = sim.now;
    sim.err_item();
    sim.advance(Duration::from_secs(20));
    sim.err_item();
    let armed = sim
        .log
        .iter()
        .filter(|(_, a)| {
            matches!(
                a,
                SubscriptionAction::ArmTimer {
                    kind: TimerKind::Reopen,
                    ..
                }
            )
        })
        .count();
    assert_eq!(armed, 1, "armed once per run of Err items");
    sim.advance_to(errored + Duration::from_secs(30) - MS(1));
    assert_eq!(sim.opens, 1, "kept while it may heal");
    sim.state = insts(&[1, 2]);
    sim.advance(MS(1));
    assert_eq!(sim.opens, 2, "re-opened 30 s after the first Err item");
    assert_eq!(sim.m.stale_since(A), None, "the new watch answered");
    assert_eq!(ports(&sim.last().instances), [1, 2]);
    assert_eq!(sim.last().stale_since, None);

    // Silent again while the registry is down: re-opened after the cap,
    // then the usual schedule and probe bring it back once it answers.
    sim.err_item();
    sim.up = false;
    sim.advance(Duration::from_secs(30));
    assert_eq!(sim.opens, 3);
    assert!(sim.m.stale_since(A).is_some());
    sim.advance(Duration::from_secs(10));
    sim.up = true;
    sim.advance(Duration::from_millis(1100));
    assert_eq!(sim.m.stale_since(A), None, "back within a probe interval");
}

#[test]
fn a_stream_that_heals_in_time_is_kept_and_the_floor_follows_the_cap() {
    let mut sim = Sim::new(config(), insts(&[1]));
    sim.err_item();
    sim.advance(Duration::from_secs(10));
    sim.push(insts(&[1, 2]));
    assert_eq!(sim.m.stale_since(A), None);
    sim.advance(Duration::from_secs(60));
    assert_eq!(sim.opens, 1, "healed in time: never re-opened");

    let mut short = config();
    short.recover.backoff.max = Duration::from_secs(5);
    let mut sim = Sim::new(short, insts(&[1]));
    sim.err_item();
    sim.advance(Duration::from_secs(5) - MS(1));
    assert_eq!(sim.opens, 1);
    sim.advance(MS(1));
    assert_eq!(sim.opens, 2, "floor = the backoff cap");
}

/// The delay of the latest resync timer armed.
fn last_resync_delay(sim: &Sim) -> Option<Duration> {
    sim.log.iter().rev().find_map(|(_, a)| match a {
        SubscriptionAction::ArmTimer {
            delay,
            kind: TimerKind::Resync,
            ..
        } => Some(*delay),
        _ => None,
    })
}

#[test]
fn a_resume_resync_overtaken_by_pushes_backs_off_on_the_recover_schedule() {
    let mut sim = Sim::new(config(), insts(&[1]));
    sim.answer_lists = false;
    sim.err_item();
    sim.push(insts(&[1, 2]));
    assert_eq!(sim.pending_lists.len(), 1, "the resume resync");
    let mut delays = Vec::new();
    for n in 3..6u16 {
        // A push overtakes the list in flight, whose answer is dropped.
        sim.push(insts(&(1..=n).collect::<Vec<_>>()));
        sim.answer_pending_lists();
        delays.push(last_resync_delay(&sim).expect("retried"));
        sim.advance(delays[delays.len() - 1]);
        assert_eq!(sim.pending_lists.len(), 1, "the retry");
    }
    assert_eq!(delays, [MS(1000), MS(2000), MS(4000)], "grows, not fixed");
    // It lands: the schedule resets and the periodic resync is armed.
    sim.answer_pending_lists();
    let next = last_resync_delay(&sim).unwrap().as_secs_f64();
    assert!((240.0..=360.0).contains(&next), "{next}");
}

#[test]
fn a_backend_that_rereads_on_resume_gets_no_second_read() {
    let m = SubscriptionMachine::new(config(), 7).with_backend_rereads_on_resume(true);
    let mut sim = Sim::with_machine(m, insts(&[1]));
    sim.err_item();
    sim.advance(Duration::from_secs(5));
    sim.push(insts(&[1, 2]));
    assert_eq!(sim.m.stale_since(A), None);
    sim.end_stream();
    sim.advance(Duration::from_secs(2));
    assert_eq!((sim.opens, sim.m.stale_since(A)), (2, None), "re-opened");
    assert_eq!(sim.lists, 0, "no resume resync after either outage");
    sim.advance(Duration::from_secs(400));
    assert_eq!(sim.lists, 1, "the periodic resync stays");
}
