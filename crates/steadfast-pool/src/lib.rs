//! Steadfast's client pool: one client per endpoint address, built by a
//! [`ClientFactory`]-style factory, reaped when idle without ever closing a
//! client in use, and drained when the directory drops its endpoint.
//!
//! The decisions (client states, idle scan, rescue, drain deadlines,
//! removal by identity) live in the sans-IO `steadfast_core::pool`
//! machine; this crate is its shell: it owns the reaper task and performs
//! the closes.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
