//! Client factories for the pool: reqwest ([`ReqwestFactory`]), and awc
//! ([`AwcFactory`]) behind the `awc` feature.

mod reqwest_factory;
pub use reqwest_factory::{ReqwestConfig, ReqwestFactory};

#[cfg(feature = "awc")]
mod awc_factory;
#[cfg(feature = "awc")]
pub use awc_factory::{AwcClient, AwcConfig, AwcFactory, AwcFactoryError};
