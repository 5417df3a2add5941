//! Steadfast's client pool: one client per endpoint address, built by a
//! [`ClientFactory`], reaped when idle without ever closing a client in
//! use, and drained when the directory drops its endpoint.
//!
//! The decisions (client states, idle scan, rescue, drain deadlines,
//! removal by identity) live in the sans-IO [`steadfast_core::pool`]
//! machine; this crate is its shell: it owns the reaper task, builds the
//! clients and performs the closes, each bounded by
//! [`PoolConfig::close_timeout`].
//!
//! ```
//! use steadfast_pool::{ClientFactory, ClientPool, PoolConfig};
//!
//! /// A factory whose "client" is its address (close: drop).
//! struct Named;
//!
//! impl ClientFactory for Named {
//!     type Client = String;
//!     type Error = std::convert::Infallible;
//!     fn build(&self, address: &str) -> Result<String, Self::Error> {
//!         Ok(format!("client for {address}"))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let pool = ClientPool::new(Named, PoolConfig::default());
//! // The directory's feeder says which addresses are still in use.
//! let owner = pool.new_owner();
//! pool.sync_endpoints(owner, ["10.0.0.1:8080".to_string()]);
//! {
//!     let client = pool.acquire("10.0.0.1:8080").expect("built");
//!     // A call: cut with `ClosedWhileInUse` if the pool force-closes it.
//!     let answer = client.until_closed(async { client.len() }).await;
//!     assert!(answer.is_ok());
//! } // the hold drops: the call is no longer in flight
//! pool.drop_owner(owner); // the address drains (nothing in flight: closed now)
//! assert_eq!(pool.stats().drained, 1);
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod error;
mod factory;
mod pool;
mod pooled;
mod reaper;

pub use config::{PoolConfig, MIN_SCAN_INTERVAL};
pub use error::{ClosedWhileInUse, PoolError};
pub use factory::ClientFactory;
pub use pool::{ClientPool, PoolStats};
pub use pooled::PooledClient;
pub use steadfast_core::pool::{ClientId, OwnerId, PoolCounters};
