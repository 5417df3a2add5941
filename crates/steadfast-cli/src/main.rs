//! `steadfast`: the operator's command line of Steadfast.
//!
//! `steadfast inspect --registry etcd://host:port[,host:port] [--prefix P]
//! (or `--registry nacos://host:port[,host:port]`)
//! (--app A | --interface I) [--watch] [--json]` starts an engine against
//! the registry, subscribes to what was named, waits a bounded time for
//! the first resolution, and prints instances -> revisions -> resolution
//! state (attempts, last error, next retry) -> endpoints; `--json` prints
//! the engine's `EngineReport`, `--watch` refreshes until interrupted (or
//! `--count` reports). Logs go to stderr, filtered by `RUST_LOG` (default
//! `warn`), coloured only when stderr is a terminal and `NO_COLOR` is
//! unset or empty. The exit code says whether the report is complete and,
//! if not, why ([`exit::Exit`]; listed by `steadfast inspect --help`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod exit;
mod exported;
mod run;
mod source;
mod text;
mod verdict;

use std::ffi::OsStr;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Self-healing service discovery: see what the engine sees.
#[derive(Debug, Parser)]
#[command(name = "steadfast", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print instances, revisions, their resolution state and endpoints.
    #[command(after_help = exit::help())]
    Inspect(InspectArgs),
}

/// Arguments of `steadfast inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// `etcd://host:port[,host:port...]` (`etcds://`: https with the
    /// built-in roots), `nacos://host:port[,host:port...][?namespace=..&group=..]`
    /// (HTTP addresses; gRPC at port + 1000) or `memory`.
    #[arg(long, env = "STEADFAST_REGISTRY")]
    pub registry: String,
    /// Key prefix of the registry's records in etcd.
    #[arg(long, default_value = "/steadfast", env = "STEADFAST_ETCD_PREFIX")]
    pub prefix: String,
    /// etcd user (auth through the gateway); its password is read from
    /// `STEADFAST_ETCD_PASSWORD`, never from the command line.
    #[arg(long, env = "STEADFAST_ETCD_USER")]
    pub user: Option<String>,
    /// Nacos user (login over HTTP at each server's gRPC port - 1000); its
    /// password is read from `STEADFAST_NACOS_PASSWORD`, never from the
    /// command line.
    #[arg(long, env = "STEADFAST_NACOS_USER")]
    pub nacos_user: Option<String>,
    /// PEM file of the CA the etcd members' certificates chain to.
    #[arg(long, env = "STEADFAST_ETCD_CA_FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// PEM file of the client certificate (with `--key`).
    #[arg(long, env = "STEADFAST_ETCD_CERT_FILE", requires = "key")]
    pub cert: Option<std::path::PathBuf>,
    /// PEM file of the client certificate's private key.
    #[arg(long, env = "STEADFAST_ETCD_KEY_FILE", requires = "cert")]
    pub key: Option<std::path::PathBuf>,
    /// Provider app to inspect (repeatable). With `--interface`: the
    /// reference's provider apps.
    #[arg(long = "app", required_unless_present = "interface")]
    pub apps: Vec<String>,
    /// Interface to inspect; without `--app` its providers are found
    /// through the registry's interface -> app mapping.
    #[arg(long)]
    pub interface: Option<String>,
    /// Protocol of the reference. When its providers export the interface
    /// over other protocols only, the command says which.
    #[arg(long, default_value = "http")]
    pub protocol: String,
    /// Group of the reference.
    #[arg(long)]
    pub group: Option<String>,
    /// Version of the reference.
    #[arg(long = "service-version")]
    pub version: Option<String>,
    /// Longest wait for the first resolution before printing (e.g. `5s`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub wait: Duration,
    /// Keep printing the report, refreshed every `--interval`.
    #[arg(long)]
    pub watch: bool,
    /// Refresh interval of `--watch`.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// With `--watch`: stop after this many reports (default: until ctrl-c).
    #[arg(long)]
    pub count: Option<u64>,
    /// Print the report as JSON (one document per line with `--watch`).
    #[arg(long)]
    pub json: bool,
}

/// Whether to write ANSI colours to a stream: only to a terminal, and
/// not while `NO_COLOR` is set to a non-empty value (no-color.org).
fn colour(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && !matches!(no_color, Some(v) if !v.is_empty())
}

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`), coloured only
/// as [`colour`] says.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Writes `line` to stderr; a stderr that is gone is no reason to fail
/// (the exit code still says it).
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "steadfast inspect: {line}");
}

#[actix_rt::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Inspect(args) => match run::inspect(args).await {
            Ok(exit::Exit::Complete) => ExitCode::SUCCESS,
            Ok(e) => {
                say(format_args!("exit {}: {e}", e.code()));
                e.into()
            }
            Err(f) => {
                say(format_args!("{}", f.message));
                say(format_args!("exit {}: {}", f.exit.code(), f.exit));
                f.exit.into()
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::colour;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(OsStr::new(""))));
    }
}
