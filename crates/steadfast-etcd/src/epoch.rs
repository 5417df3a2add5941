//! [`Epochs`]: the epoch of the versions one client's watches and lists
//! emit, bumped once when a read proves the store's history restarted.
//!
//! A version is `(epoch, etcd revision)`. Revisions restart at 1 when etcd
//! comes back on a wiped data dir (or another cluster answers), so a
//! consumer holding `(0, 500)` would ignore the new store's `(0, 12)` as
//! older. Every watch and list of one [`crate::EtcdRegistry`] shares one
//! `Epochs`, which survives re-subscribes:
//!
//! * before a range, the reader takes a [`Ticket`]: the epoch, the cluster
//!   id and the highest revision known to exist *before* the range was
//!   sent (a `floor`, raised by every range and event applied);
//! * a range is linearizable, so it can never answer a revision below the
//!   ticket's floor, nor another cluster id, unless the history restarted.
//!   Either proves it: [`Epochs::answered`] then bumps the epoch, once for
//!   all readers (a reader whose ticket is of an older epoch than the
//!   current one adopts the current one instead of bumping again);
//! * a watch that proves a restart from its own history (its last revision
//!   above a re-read's) calls [`Epochs::restarted`].
//!
//! Comparing against a floor taken before the send is race-free: a range
//! answered late cannot be condemned by events another watch applied in
//! the meantime. This is a small shared decision state (no IO, no clock).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::wire::ResponseHeader;

/// The shared epoch state of one client; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Epochs {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    epoch: u64,
    cluster: Option<u64>,
    floor: i64,
}

/// What was known before a range was sent (see [`Epochs::ticket`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticket {
    /// The epoch then.
    pub epoch: u64,
    /// The cluster id of that epoch, once known.
    pub cluster: Option<u64>,
    /// The highest revision known to exist then.
    pub floor: i64,
}

impl Epochs {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current epoch.
    pub fn current(&self) -> u64 {
        self.lock().epoch
    }

    /// What is known now; take it right before sending a range.
    pub fn ticket(&self) -> Ticket {
        let s = self.lock();
        Ticket {
            epoch: s.epoch,
            cluster: s.cluster,
            floor: s.floor,
        }
    }

    /// A range sent with `ticket` answered `h`: the epoch its state belongs
    /// to (bumped if the answer proves the history restarted since the
    /// ticket), and whether it proved a restart.
    pub fn answered(&self, ticket: Ticket, h: &ResponseHeader) -> (u64, bool) {
        let foreign = ticket.cluster.is_some_and(|c| c != h.cluster_id);
        let behind = h.revision < ticket.floor;
        if foreign || behind {
            (self.restarted(ticket.epoch, h), true)
        } else {
            let mut s = self.lock();
            if s.epoch == ticket.epoch {
                s.cluster.get_or_insert(h.cluster_id);
                s.floor = s.floor.max(h.revision);
            }
            (ticket.epoch.max(s.epoch), false)
        }
    }

    /// A reader at epoch `seen` proved that the history restarted, on a
    /// read that answered `h`: bumps the epoch unless another reader did
    /// since `seen`, and returns the epoch to use from now on.
    pub fn restarted(&self, seen: u64, h: &ResponseHeader) -> u64 {
        let mut s = self.lock();
        if s.epoch <= seen {
            s.epoch = seen.saturating_add(1);
            s.cluster = Some(h.cluster_id);
            s.floor = h.revision;
            tracing::warn!(
                epoch = s.epoch,
                revision = h.revision,
                "etcd history restarted (wiped store or another cluster): new version epoch"
            );
        }
        s.epoch
    }

    /// A reader at `epoch` applied `revision` (a range or an event): it
    /// exists, later ranges must not answer below it.
    pub fn observe(&self, epoch: u64, revision: i64) {
        let mut s = self.lock();
        if s.epoch == epoch {
            s.floor = s.floor.max(revision);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(cluster: u64, revision: i64) -> ResponseHeader {
        ResponseHeader {
            cluster_id: cluster,
            revision,
            ..ResponseHeader::default()
        }
    }

    #[test]
    fn a_restart_bumps_the_epoch_once_for_every_reader() {
        let e = Epochs::default();
        let t = e.ticket();
        assert_eq!(e.answered(t, &h(1, 40)), (0, false));
        e.observe(0, 50);
        // Two readers took tickets before the wipe; both see it.
        let (a, b) = (e.ticket(), e.ticket());
        assert_eq!(e.answered(a, &h(1, 12)), (1, true));
        assert_eq!(e.answered(b, &h(1, 13)), (1, true), "adopted, not bumped");
        // A ticket of the new epoch compares against the new floor.
        assert_eq!(e.answered(e.ticket(), &h(1, 14)), (1, false));
        // Another cluster is a restart whatever its revision.
        assert_eq!(e.answered(e.ticket(), &h(2, 900)), (2, true));
        assert_eq!(e.current(), 2);
    }

    #[test]
    fn a_late_answer_is_not_condemned_by_revisions_seen_after_its_send() {
        let e = Epochs::default();
        e.answered(e.ticket(), &h(1, 10));
        let early = e.ticket();
        // Another watch applies revision 60 while this range is in flight.
        e.observe(0, 60);
        assert_eq!(e.answered(early, &h(1, 48)), (0, false));
        // Events of an older epoch never move the floor of the new one.
        e.restarted(0, &h(1, 3));
        e.observe(0, 99);
        assert_eq!(e.answered(e.ticket(), &h(1, 4)), (1, false));
    }
}
