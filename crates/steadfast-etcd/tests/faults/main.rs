//! Fault containment against real etcd processes, with the default
//! configuration: a SIGSTOPped etcd, quorum loss and a frozen member in a
//! 3-member cluster, a 45 s SIGKILL outage, a wiped store written past the
//! old revision, metadata keys that die with their publisher's lease, and
//! per-key registration deadlines. Each test prints what it measured
//! (`cargo test -p steadfast-etcd --test faults -- --nocapture`).
//!
//! The two long scenarios (20 s freeze, 45 s outage) run concurrently in
//! one test so the whole binary takes about a minute.

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod leases;
mod single;
