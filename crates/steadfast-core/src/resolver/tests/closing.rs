//! Closing announcements reach the directory as such: a patch that drops
//! an instance because its record now carries the closing flag names it in
//! `closing` (also when the announcement and the unregister come in one
//! burst), a plain removal does not, and a full list names every closing
//! instance.

use crate::change::Change;
use std::time::Instant;

use super::harness::{inst, meta, KEY};
use super::views::{deliver, delta, reset_feed};
use crate::backoff::BackoffPolicy;
use crate::model::{ServiceInstance, CLOSING_KEY};
use crate::resolver::{ResolverAction, ResolverMachine};
use crate::update::DirectoryUpdate;

fn closing(i: &ServiceInstance) -> ServiceInstance {
    let mut c = i.clone();
    c.healthy = false;
    c.metadata.insert(CLOSING_KEY.into(), "true".into());
    c
}

/// A resolved machine holding h0..h3, their full list taken.
fn resolved(t0: Instant) -> (ResolverMachine, Vec<ServiceInstance>) {
    let m1 = meta(20001);
    let mut m = ResolverMachine::new("provider", BackoffPolicy::default(), 7);
    let _ = m.subscribe_at(KEY, t0);
    let all: Vec<ServiceInstance> = (0..4)
        .map(|k| inst(&format!("h{k}"), &m1.revision))
        .collect();
    let acts = deliver(&mut m, reset_feed(1, &all), None, None, t0);
    let token = acts
        .iter()
        .find_map(|a| match a {
            ResolverAction::Fetch { token, .. } => Some(*token),
            _ => None,
        })
        .expect("a fetch");
    let _ = m.on_fetch_result(&m1.revision, token, Ok(m1.clone()), t0);
    assert_eq!(m.take_updates().len(), 1);
    (m, all)
}

fn closing_ids(u: &DirectoryUpdate) -> Vec<&str> {
    u.closing.iter().map(|i| i.id()).collect()
}

fn removals(u: &DirectoryUpdate) -> Vec<&str> {
    match &u.change {
        Change::Delta { removals, .. } => removals.iter().map(|r| r.as_ref()).collect(),
        other => panic!("a patch expected, got {other:?}"),
    }
}

#[test]
fn a_closing_record_is_named_in_the_patch_that_drops_it() {
    let t0 = Instant::now();
    let (mut m, all) = resolved(t0);
    let _ = deliver(
        &mut m,
        delta(1, 2, &[closing(&all[1])], &[]),
        None,
        None,
        t0,
    );
    let u = m.take_updates().pop().unwrap();
    assert_eq!(removals(&u), vec![all[1].id.as_str()]);
    assert_eq!(closing_ids(&u), vec![all[1].id.as_str()]);

    // The unregister that follows names the id removed again (its URL had
    // gone already), so the directory learns the registry removed it.
    let _ = deliver(&mut m, delta(2, 3, &[], &[&all[1].id]), None, None, t0);
    let u = m.take_updates().pop().unwrap();
    assert_eq!(removals(&u), vec![all[1].id.as_str()]);
    assert!(u.closing.is_empty());

    // A plain removal is the registry's: not named closing.
    let _ = deliver(&mut m, delta(3, 4, &[], &[&all[2].id]), None, None, t0);
    let u = m.take_updates().pop().unwrap();
    assert_eq!(removals(&u), vec![all[2].id.as_str()]);
    assert!(u.closing.is_empty());
}

#[test]
fn an_announcement_and_its_unregister_in_one_burst_net_to_the_removal() {
    let t0 = Instant::now();
    let (mut m, all) = resolved(t0);
    let _ = deliver(
        &mut m,
        delta(1, 2, &[closing(&all[0])], &[]),
        None,
        None,
        t0,
    );
    let _ = deliver(&mut m, delta(2, 3, &[], &[&all[0].id]), None, None, t0);
    let u = m.take_updates().pop().unwrap();
    // The instance is gone: a tombstone would be ended by the removal at
    // once, so the directory is told only that the registry removed it.
    assert_eq!(removals(&u), vec![all[0].id.as_str()]);
    assert!(u.closing.is_empty());
}

#[test]
fn a_full_list_names_every_closing_instance() {
    let t0 = Instant::now();
    let (mut m, all) = resolved(t0);
    let _ = deliver(
        &mut m,
        delta(1, 2, &[closing(&all[3])], &[]),
        None,
        None,
        t0,
    );
    let _ = m.take_updates();
    let u = m.update_for(KEY);
    assert!(matches!(&u.change, Change::Reset { items: urls, .. } if urls.len() == 3));
    assert_eq!(closing_ids(&u), vec![all[3].id.as_str()]);
}
