//! [`GracefulShutdown`]: the provider's stop sequence in the right order,
//! run on SIGTERM / ctrl-c or on an explicit [`ShutdownTrigger`], every step
//! bounded:
//!
//! 1. every export announces closing (its [`InFlight`](steadfast_actors::InFlight)
//!    tracker refuses new requests: the [`InFlightGate`](super::InFlightGate)
//!    answers 503 + `Retry-After`; the record is marked closing so consumers
//!    stop picking it), unregisters, and drains its requests in flight within
//!    `drain_timeout`; all exports at once, each bounded by
//!    `drain_timeout + step_timeout`;
//! 2. every actix-web server stops gracefully within `step_timeout`
//!    (then forcibly, bounded again; a server already stopping gracefully
//!    ends within its own `shutdown_timeout` in the background, so set that
//!    at most `step_timeout`);
//! 3. the engine shuts down within `step_timeout`.
//!
//! The whole sequence takes at most `drain_timeout + 4 x step_timeout`
//! (30 s with the defaults, 10 s + 4 x 5 s).
//!
//! The order is fixed and nothing in it is retried (a failed unregister is
//! retried by the engine's registrar until the engine stops), so it is a
//! straight sequence of bounded steps rather than a state machine.
//! Build the servers with `.disable_signals()`: otherwise actix-web reacts to
//! SIGTERM itself and stops the server before the export has announced
//! closing.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use futures::future::join_all;
use steadfast_actors::{Engine, EngineError, ExportHandle, ShutdownReport};
use tokio::sync::watch;
use tokio::time::timeout;

/// Default longest wait for requests in flight: 10 s.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound of each other step (export announce + unregister beyond
/// the drain, graceful server stop, forced server stop, engine shutdown):
/// 5 s. With the defaults the whole sequence takes at most
/// `drain + 4 x step` = 30 s, Kubernetes' default termination grace.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// What started the shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownCause {
    /// SIGTERM (unix).
    Terminate,
    /// ctrl-c (SIGINT).
    CtrlC,
    /// [`ShutdownTrigger::fire`] or [`GracefulShutdown::run_now`].
    Trigger,
}

impl fmt::Display for ShutdownCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Terminate => "SIGTERM",
            Self::CtrlC => "ctrl-c",
            Self::Trigger => "trigger",
        })
    }
}

/// Why one export's graceful stop did not report.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportStopError {
    /// The stop did not finish within its bound (`drain_timeout +
    /// step_timeout`); the engine shutdown that follows still stops it.
    #[error("export stop did not finish within {0:?}")]
    TimedOut(Duration),
    /// The engine refused the stop (it was shut down already).
    #[error("export stop refused")]
    Engine(#[source] EngineError),
}

/// What a graceful shutdown did.
#[derive(Clone, Debug)]
pub struct GracefulReport {
    /// What started it.
    pub cause: ShutdownCause,
    /// Per export, in the order they were added: unregistered and drained,
    /// or why not.
    pub exports: Vec<Result<ShutdownReport, ExportStopError>>,
    /// Whether every server stopped gracefully within `step_timeout`
    /// (false: it was stopped forcibly).
    pub servers_stopped: bool,
    /// Whether the engine shutdown finished within `step_timeout`.
    pub engine_stopped: bool,
    /// Wall time of the whole sequence.
    pub elapsed: Duration,
}

impl GracefulReport {
    /// Every step finished in its bound: every export unregistered and
    /// drained, every server and the engine stopped.
    pub fn is_clean(&self) -> bool {
        self.servers_stopped
            && self.engine_stopped
            && self
                .exports
                .iter()
                .all(|e| matches!(e, Ok(r) if r.unregistered && r.drained))
    }
}

/// Starts a [`GracefulShutdown`] from elsewhere (tests, an admin endpoint,
/// a supervisor). Cheap to clone; firing twice is harmless.
#[derive(Clone, Debug)]
pub struct ShutdownTrigger {
    tx: Arc<watch::Sender<bool>>,
}

impl ShutdownTrigger {
    /// Starts the shutdown.
    pub fn fire(&self) {
        self.tx.send_replace(true);
    }

    /// Whether it was fired.
    pub fn is_fired(&self) -> bool {
        *self.tx.borrow()
    }
}

/// The provider's graceful stop: announce closing, unregister, drain within
/// a bound, stop the server(s), shut the engine down.
///
/// ```no_run
/// # async fn demo(engine: steadfast_actors::Engine, export: steadfast_actors::ExportHandle,
/// #               server: actix_web::dev::ServerHandle) {
/// use std::time::Duration;
/// use steadfast_web::GracefulShutdown;
/// let report = GracefulShutdown::new(engine)
///     .export(export)
///     .server(server)
///     .drain_timeout(Duration::from_secs(10))
///     .run_on_signal()          // waits for SIGTERM, ctrl-c or the trigger
///     .await;
/// assert!(report.is_clean());
/// # }
/// ```
pub struct GracefulShutdown {
    engine: Engine,
    exports: Vec<ExportHandle>,
    servers: Vec<ServerHandle>,
    drain_timeout: Duration,
    step_timeout: Duration,
    trigger: ShutdownTrigger,
    fired: watch::Receiver<bool>,
}

impl GracefulShutdown {
    /// A shutdown of `engine` (add its exports and servers).
    pub fn new(engine: Engine) -> Self {
        let (tx, fired) = watch::channel(false);
        Self {
            engine,
            exports: Vec::new(),
            servers: Vec::new(),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            step_timeout: DEFAULT_STEP_TIMEOUT,
            trigger: ShutdownTrigger { tx: Arc::new(tx) },
            fired,
        }
    }

    /// Adds an export to stop (all exports stop at once, in step 1).
    pub fn export(mut self, export: ExportHandle) -> Self {
        self.exports.push(export);
        self
    }

    /// Adds an actix-web server to stop after the exports drained.
    pub fn server(mut self, server: ServerHandle) -> Self {
        self.servers.push(server);
        self
    }

    /// Longest wait for requests in flight (default 10 s).
    pub fn drain_timeout(mut self, limit: Duration) -> Self {
        self.drain_timeout = limit;
        self
    }

    /// Bound of each other step (default 5 s). The engine bounds its own
    /// shutdown too (`shutdown_timeout`, 15 s): a shorter step stops waiting
    /// for it, the engine still stops in the background.
    pub fn step_timeout(mut self, limit: Duration) -> Self {
        self.step_timeout = limit;
        self
    }

    /// A trigger that starts [`GracefulShutdown::run_on_signal`] at once.
    pub fn trigger(&self) -> ShutdownTrigger {
        self.trigger.clone()
    }

    /// Waits for SIGTERM, ctrl-c or the trigger, then runs the sequence.
    /// The signal listeners are installed by this call (inside the tokio
    /// runtime, e.g. the actix System), before the future is first polled,
    /// so call it as soon as the export exists and spawn or await the
    /// future. When a listener cannot be installed, only the other causes
    /// start it.
    pub fn run_on_signal(mut self) -> impl Future<Output = GracefulReport> {
        let signals = Signals::install();
        async move {
            let cause = wait_for_cause(&mut self.fired, signals).await;
            self.run(cause).await
        }
    }

    /// Runs the sequence now (cause [`ShutdownCause::Trigger`]).
    pub async fn run_now(self) -> GracefulReport {
        self.run(ShutdownCause::Trigger).await
    }

    async fn run(self, cause: ShutdownCause) -> GracefulReport {
        let start = Instant::now();
        tracing::info!(%cause, exports = self.exports.len(), "graceful shutdown");
        let export_limit = self.drain_timeout.saturating_add(self.step_timeout);
        let drain = self.drain_timeout;
        let exports = join_all(self.exports.iter().map(|e| async move {
            match timeout(export_limit, e.shutdown(drain)).await {
                Ok(Ok(report)) => Ok(report),
                Ok(Err(err)) => Err(ExportStopError::Engine(err)),
                Err(_) => Err(ExportStopError::TimedOut(export_limit)),
            }
        }))
        .await;
        let step = self.step_timeout;
        let servers = join_all(self.servers.iter().map(|s| async move {
            if timeout(step, s.stop(true)).await.is_ok() {
                return true;
            }
            tracing::warn!(?step, "server did not stop gracefully in time; forcing");
            let _ = timeout(step, s.stop(false)).await;
            false
        }))
        .await;
        let engine_stopped = timeout(step, self.engine.shutdown()).await.is_ok();
        let report = GracefulReport {
            cause,
            exports,
            servers_stopped: servers.iter().all(|s| *s),
            engine_stopped,
            elapsed: start.elapsed(),
        };
        tracing::info!(clean = report.is_clean(), elapsed = ?report.elapsed, "graceful shutdown done");
        report
    }
}

/// The signal listeners, installed when created (so a signal sent right
/// after `run_on_signal()` returned is not missed).
struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the SIGTERM and SIGINT listeners (unix; elsewhere ctrl-c is
    /// listened to from the first poll). One that cannot be installed (e.g.
    /// outside a tokio runtime) is logged and never fires.
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, signal = name, "cannot listen to the signal");
                    None
                }
            };
            Self {
                terminate: listen(SignalKind::terminate(), "SIGTERM"),
                interrupt: listen(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }
}

/// Resolves when `signal` arrives; never when it is not listened to.
#[cfg(unix)]
async fn arrival(signal: Option<&mut tokio::signal::unix::Signal>) {
    if let Some(s) = signal {
        if s.recv().await.is_some() {
            return;
        }
    }
    std::future::pending::<()>().await
}

/// The first of SIGTERM, ctrl-c and the trigger.
async fn wait_for_cause(fired: &mut watch::Receiver<bool>, signals: Signals) -> ShutdownCause {
    let trigger = async {
        // The sender lives in `self.trigger`, so this only ends on a fire.
        let _ = fired.wait_for(|f| *f).await;
    };
    #[cfg(unix)]
    {
        let Signals {
            mut terminate,
            mut interrupt,
        } = signals;
        tokio::select! {
            _ = trigger => ShutdownCause::Trigger,
            _ = arrival(interrupt.as_mut()) => ShutdownCause::CtrlC,
            _ = arrival(terminate.as_mut()) => ShutdownCause::Terminate,
        }
    }
    #[cfg(not(unix))]
    {
        let Signals {} = signals;
        let ctrl_c = async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await
            }
        };
        tokio::select! {
            _ = trigger => ShutdownCause::Trigger,
            _ = ctrl_c => ShutdownCause::CtrlC,
        }
    }
}
