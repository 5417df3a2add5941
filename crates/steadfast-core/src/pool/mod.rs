//! The client pool's sans-IO machine: one client per endpoint address, idle
//! reaping that never closes a client in use, and draining of the clients
//! whose endpoint the directory dropped.
//!
//! Each client moves Active -> Draining -> Closed (an idle client goes from
//! Active straight to Closed: it drains with nothing in flight). The
//! machine holds the clients (an opaque `C`) and decides; its shell
//! (`steadfast-pool`) builds clients, runs the reaper's clock and performs
//! the closes it is told to.
//!
//! - **Acquire is refused unless Active.** [`PoolMachine::acquire`] checks
//!   the state under the same `&mut self` that every transition takes, so a
//!   client is either taken before it leaves Active (and then counts in
//!   flight, which keeps it) or refused after (and the caller builds a
//!   fresh one, [`Acquire::Build`]). This is the compare-and-swap of the
//!   reference design.
//! - **Last use is stamped at call start and at call end**, so a call longer
//!   than the idle timeout never makes its client look idle.
//! - **Idle scan** ([`PoolMachine::scan`]): candidates are Active clients
//!   with nothing in flight, unused for the idle timeout; a client with
//!   calls in flight is skipped and looked at again next round.
//! - **Re-check before close** ([`PoolMachine::begin_close`]): the shell
//!   closes candidates one by one; just before each close the machine checks
//!   idleness again, and a client used meanwhile stays Active (rescued).
//! - **Removal by identity** ([`PoolMachine::close_finished`]): an entry is
//!   removed by its [`ClientId`], and the address mapping only if it still
//!   names that id, so an old client's close never evicts a client rebuilt
//!   under the same address.
//! - **Drain** ([`PoolMachine::sync_owner`]): an address that no owner lists
//!   any more drains: no new calls; closed when in flight reaches zero, or
//!   force-closed at the drain deadline ([`PoolMachine::poll_deadlines`]).
//! - A close failure is counted by [`PoolMachine::close_finished`] and
//!   changes nothing else: the other closes go on.

mod machine;
mod owners;

#[cfg(test)]
mod tests;

pub use machine::{
    Acquire, ClientId, ClientState, Close, CloseReason, Held, PoolCounters, PoolMachine, PoolPolicy,
};
pub use owners::OwnerId;
