//! [`LinkMachine`]: the sans-IO decisions of the client's one connection
//! to a Nacos cluster. Time and randomness are inputs; the driver task
//! (`client`) performs its [`LinkAction`]s and feeds back what happened.
//!
//! - Down: connect to the next server in rotation, at once the first time
//!   and on the backoff of the one retry primitive ([`Recover`]) after
//!   each failure; while down, subscribers hold their last state and are
//!   told it is stale.
//! - Up: redo every registration and subscription (a new connection has a
//!   new id: the server forgot the old one's instances and subscriptions),
//!   check the connection every `health_interval`, and list every
//!   subscribed service in full every `resync_interval`.
//! - A connection that fails `health_failures` checks in a row, or whose
//!   stream ends, is dropped: subscribers are told at once, and the next
//!   server is tried.

use std::time::{Duration, Instant};

use rand::Rng;
use steadfast_core::{ErrorClass, Recover, RecoverPolicy, Retry};

use crate::config::NacosConfig;

/// The longest token life the link plans with (a server's TTL above it is
/// renewed this early).
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// The shortest health and resync intervals the link runs (a zero from a
/// config file would loop).
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkAction {
    /// Connect to this server (`host:port` of its gRPC port).
    Connect(String),
    /// The connection is up: register and subscribe everything again.
    Redo,
    /// Tell every subscriber its state is stale (the connection is gone).
    ReportStale,
    /// Send a health check on the connection.
    CheckHealth,
    /// List every subscribed service in full.
    Resync,
    /// Log in again: the token expires soon.
    Login,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting to connect at `at`.
    Down { at: Instant },
    /// A connect is under way.
    Connecting,
    /// Connected; a health check is due at `health`, a resync at `resync`.
    Up {
        health: Instant,
        resync: Instant,
        checking: bool,
        failed_checks: u32,
    },
}

/// The connection's state machine.
#[derive(Debug)]
pub struct LinkMachine {
    servers: Vec<String>,
    next: usize,
    state: State,
    recover: Recover,
    policy: RecoverPolicy,
    health_interval: Duration,
    health_failures: u32,
    resync_interval: Duration,
    connects: u64,
    /// When the token must be renewed (a tenth of its life early).
    token_due: Option<Instant>,
}

impl LinkMachine {
    /// A machine that connects at `now`.
    pub fn new(config: &NacosConfig, now: Instant) -> Self {
        Self {
            servers: config.servers.clone(),
            next: 0,
            state: State::Down { at: now },
            recover: Recover::new(),
            policy: RecoverPolicy::new(config.backoff),
            health_interval: config.health_interval.max(MIN_INTERVAL),
            health_failures: config.health_failures.max(1),
            resync_interval: config.resync_interval.max(MIN_INTERVAL),
            connects: 0,
            token_due: None,
        }
    }

    /// Whether the connection is up.
    pub fn is_up(&self) -> bool {
        matches!(self.state, State::Up { .. })
    }

    /// Connections made so far (the first one included).
    pub fn connects(&self) -> u64 {
        self.connects
    }

    /// When [`LinkMachine::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            // No server to connect to: nothing will ever be due.
            State::Down { .. } if self.servers.is_empty() => None,
            State::Down { at } => Some(at),
            State::Connecting => None,
            State::Up {
                health,
                resync,
                checking,
                ..
            } => {
                let next = if checking { resync } else { health.min(resync) };
                Some(self.token_due.map_or(next, |t| t.min(next)))
            }
        }
    }

    /// What is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<LinkAction> {
        let mut actions = Vec::new();
        match &mut self.state {
            State::Down { at } if *at <= now => {
                if self.servers.is_empty() {
                    return actions;
                }
                let server = self.servers[self.next % self.servers.len()].clone();
                self.state = State::Connecting;
                actions.push(LinkAction::Connect(server));
            }
            State::Up {
                health,
                resync,
                checking,
                ..
            } => {
                if !*checking && *health <= now {
                    *checking = true;
                    actions.push(LinkAction::CheckHealth);
                }
                if *resync <= now {
                    *resync = now + self.resync_interval;
                    actions.push(LinkAction::Resync);
                }
                if self.token_due.is_some_and(|t| t <= now) {
                    self.token_due = None;
                    actions.push(LinkAction::Login);
                }
            }
            _ => {}
        }
        actions
    }

    /// The connect asked for succeeded at `now`.
    pub fn on_connected(&mut self, now: Instant) -> Vec<LinkAction> {
        // The backoff starts over only once the connection proved healthy
        // (a health check answered): one that breaks right after it is
        // made keeps backing off instead of reconnecting at network speed.
        self.connects = self.connects.saturating_add(1);
        self.state = State::Up {
            health: now + self.health_interval,
            resync: now + self.resync_interval,
            checking: false,
            failed_checks: 0,
        };
        vec![LinkAction::Redo]
    }

    /// A login answered at `now` with a token living `ttl`: renew it when
    /// a tenth of its life is left.
    pub fn on_logged_in(&mut self, now: Instant, ttl: Duration) {
        // A TTL from the server: bounded, and added without overflow.
        let early = ttl.min(MAX_TOKEN_TTL).mul_f64(0.9);
        self.token_due = Some(now.checked_add(early).unwrap_or(now + MAX_TOKEN_TTL));
    }

    /// A renewal failed at `now`: try again after a health interval (the
    /// old token may still be good; a refused call says when it is not).
    pub fn on_login_failed(&mut self, now: Instant) {
        self.token_due = Some(now + self.health_interval);
    }

    /// The connect asked for failed at `now`: the next server, after the
    /// backoff.
    pub fn on_connect_failed(&mut self, now: Instant, rng: &mut impl Rng) -> Vec<LinkAction> {
        self.rotate();
        let delay = self.backoff(now, rng);
        let first = self.recover.failures() == 1 && self.connects == 0;
        self.state = State::Down { at: now + delay };
        // A start-up that cannot connect is reported once: subscribers
        // wait with a reason (an outage after a connection was reported
        // when it was lost).
        if first {
            vec![LinkAction::ReportStale]
        } else {
            Vec::new()
        }
    }

    /// A health check answered (`ok`) or failed at `now`.
    pub fn on_health(&mut self, ok: bool, now: Instant, rng: &mut impl Rng) -> Vec<LinkAction> {
        let State::Up {
            health,
            checking,
            failed_checks,
            ..
        } = &mut self.state
        else {
            return Vec::new();
        };
        *checking = false;
        *health = now + self.health_interval;
        if ok {
            *failed_checks = 0;
            self.recover.on_success();
            return Vec::new();
        }
        *failed_checks = failed_checks.saturating_add(1);
        if *failed_checks < self.health_failures {
            // Check again soon rather than a whole interval later.
            *health = now + self.health_interval / 2;
            return Vec::new();
        }
        self.on_lost(now, rng)
    }

    /// The connection broke at `now` (its stream ended, the server reset
    /// it, health checks failed): report, then move to the next server at
    /// once (a reset is not a failure of the next one).
    pub fn on_lost(&mut self, now: Instant, rng: &mut impl Rng) -> Vec<LinkAction> {
        if !self.is_up() {
            return Vec::new();
        }
        self.rotate();
        // Reconnect at once the first time; a connection that keeps
        // breaking right after it is made backs off.
        let delay = if self.recover.failures() == 0 {
            let _ = self.backoff(now, rng);
            Duration::ZERO
        } else {
            self.backoff(now, rng)
        };
        self.state = State::Down { at: now + delay };
        vec![LinkAction::ReportStale]
    }

    fn rotate(&mut self) {
        if !self.servers.is_empty() {
            self.next = (self.next + 1) % self.servers.len();
        }
    }

    fn backoff(&mut self, now: Instant, rng: &mut impl Rng) -> Duration {
        match self
            .recover
            .on_failure(&self.policy, ErrorClass::Transient, now, rng)
        {
            Retry::After(d) => d,
            Retry::GiveUp => self.policy.backoff.max,
        }
    }
}

#[cfg(test)]
mod tests;
