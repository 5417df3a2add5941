//! [`init_logging`]: the `tracing-subscriber` the examples and the CLI
//! install, filtered by `RUST_LOG`.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// The filter used when `RUST_LOG` is unset or invalid: warnings and errors
/// of every crate (a failure is logged at `warn` once per state change).
pub const DEFAULT_FILTER: &str = "warn";

/// Installs a formatting subscriber on stderr filtered by `RUST_LOG`
/// (`EnvFilter` syntax, e.g. `RUST_LOG=steadfast=debug,info`; default
/// [`DEFAULT_FILTER`]). Returns false, and changes nothing, when a global
/// subscriber is already installed.
pub fn init_logging() -> bool {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .is_ok()
}
