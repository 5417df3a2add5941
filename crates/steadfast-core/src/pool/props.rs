//! Random interleavings of acquires, releases, scans, closes, endpoint
//! syncs and clock steps: the pool never closes a client in use (except a
//! forced drain close), never hands out a client it said to close, reaps
//! only what is idle by both stamps, and closes each client once.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::{Acquire, ClientId, ClientState, Close, CloseReason, PoolMachine, PoolPolicy};

const ADDRESSES: [&str; 4] = ["a:1", "b:1", "c:1", "d:1"];
const IDLE: Duration = Duration::from_secs(60);
const DRAIN: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
enum Op {
    Acquire(usize),
    Release(usize),
    Advance(u64),
    Scan,
    BeginClose(usize),
    Finish(usize, bool),
    Sync(usize, u8),
    Poll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..4).prop_map(Op::Acquire),
        3 => (0usize..8).prop_map(Op::Release),
        2 => (0u64..100).prop_map(Op::Advance),
        1 => Just(Op::Scan),
        2 => (0usize..4).prop_map(Op::BeginClose),
        2 => (0usize..4, any::<bool>()).prop_map(|(i, ok)| Op::Finish(i, ok)),
        1 => (0usize..2, 0u8..16).prop_map(|(o, m)| Op::Sync(o, m)),
        1 => Just(Op::Poll),
    ]
}

#[derive(Default)]
struct Model {
    holds: Vec<ClientId>,
    last_use: HashMap<ClientId, Instant>,
    told_to_close: HashSet<ClientId>,
    reasons: HashMap<CloseReason, u64>,
}

impl Model {
    fn held(&self, id: ClientId) -> usize {
        self.holds.iter().filter(|h| **h == id).count()
    }

    /// Checks one close the machine asked for.
    fn closing(&mut self, close: &Close<u64>, now: Instant) -> Result<(), TestCaseError> {
        prop_assert!(
            self.told_to_close.insert(close.id),
            "closed twice: {close:?}"
        );
        *self.reasons.entry(close.reason).or_default() += 1;
        match close.reason {
            CloseReason::Forced => {}
            CloseReason::Duplicate => prop_assert_eq!(self.held(close.id), 0),
            CloseReason::Drained => prop_assert_eq!(self.held(close.id), 0, "drained in use"),
            CloseReason::Idle => {
                prop_assert_eq!(self.held(close.id), 0, "reaped in use");
                let last = self.last_use[&close.id];
                prop_assert!(
                    now.saturating_duration_since(last) >= IDLE,
                    "reaped while fresh"
                );
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pool_invariants_hold_under_random_interleavings(ops in prop::collection::vec(op(), 0..80)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut m: PoolMachine<u64> = PoolMachine::new(PoolPolicy { idle_timeout: IDLE, drain_timeout: DRAIN });
        let owners = [m.new_owner(), m.new_owner()];
        let mut model = Model::default();
        let mut candidates: Vec<ClientId> = Vec::new();
        let mut closing: Vec<Close<u64>> = Vec::new();
        let mut serial = 0u64;
        for op in ops {
            let mut closes = Vec::new();
            match op {
                Op::Acquire(a) => {
                    let (held, built) = match m.acquire(ADDRESSES[a], now) {
                        Acquire::Held(h) => (h, false),
                        Acquire::Build => {
                            serial += 1;
                            let (h, dup) = m.install(ADDRESSES[a], serial, now);
                            closes.extend(dup);
                            (h, true)
                        }
                    };
                    prop_assert!(!model.told_to_close.contains(&held.id), "handed out a closed client");
                    match m.state(held.id) {
                        Some(ClientState::Active) => {}
                        // A fresh client for an address every owner dropped
                        // serves its one call and drains with it.
                        Some(ClientState::Draining { .. }) => prop_assert!(built, "handed out a draining client"),
                        other => prop_assert!(false, "handed out a client in state {:?}", other),
                    }
                    prop_assert_eq!(&*held.address, ADDRESSES[a]);
                    model.last_use.insert(held.id, now);
                    model.holds.push(held.id);
                }
                Op::Release(i) if i < model.holds.len() => {
                    let id = model.holds.swap_remove(i);
                    if m.state(id).is_some() {
                        model.last_use.insert(id, now);
                    }
                    closes.extend(m.release(id, now));
                }
                Op::Release(_) => {}
                Op::Advance(s) => now += Duration::from_secs(s),
                Op::Scan => candidates = m.scan(now),
                Op::BeginClose(i) if i < candidates.len() => {
                    let id = candidates.remove(i);
                    closes.extend(m.begin_close(id, now));
                }
                Op::BeginClose(_) => {}
                Op::Finish(i, ok) if i < closing.len() => {
                    let close = closing.remove(i);
                    m.close_finished(close.id, ok);
                    prop_assert_eq!(m.state(close.id), None);
                }
                Op::Finish(..) => {}
                Op::Sync(o, mask) => {
                    let listed: Vec<String> = (0..4)
                        .filter(|b| mask & (1 << b) != 0)
                        .map(|b| ADDRESSES[b].to_string())
                        .collect();
                    closes.extend(m.sync_owner(owners[o], listed, now));
                }
                Op::Poll => closes.extend(m.poll_deadlines(now)),
            }
            for close in closes {
                model.closing(&close, now)?;
                if close.reason == CloseReason::Duplicate {
                    m.close_finished(close.id, true);
                } else {
                    prop_assert_eq!(m.state(close.id), Some(ClientState::Closed));
                    closing.push(close);
                }
            }
            let c = m.counters();
            let count = |r| model.reasons.get(&r).copied().unwrap_or(0);
            prop_assert_eq!(c.reaped, count(CloseReason::Idle));
            prop_assert_eq!(c.drained, count(CloseReason::Drained));
            prop_assert_eq!(c.forced_closes, count(CloseReason::Forced));
            prop_assert_eq!(m.next_deadline().is_some(), m.draining() > 0);
            prop_assert!(m.next_deadline() <= Some(now + DRAIN));
        }
    }
}
