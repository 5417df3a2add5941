//! Client factories for the pool: reqwest, and awc behind the `awc` feature.
