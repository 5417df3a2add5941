//! One change in a ready app: the marker restarted (same id, new
//! incarnation), removed, or added back under a new id, in that cycle.
//!
//! - CPU rounds: the engine thread is idle, the change is made, the engine
//!   thread's CPU is read again once it has been quiet for 40 ms (longer than
//!   any timer the change armed); nothing polls the directory meanwhile. The change
//!   is then checked to be visible (off the clock).
//! - Latency rounds: from the registry call until the published snapshot shows the
//!   change, polling every ~20 us from the benchmark's thread.

use std::time::{Duration, Instant};

use crate::fixture::{marker, picked_marker, Fixture};
use crate::BoxError;

/// How long the engine must be quiet to count as idle.
pub const QUIET: Duration = Duration::from_millis(40);
/// CPU per 2 ms slice below which the engine counts as quiet.
pub const NOISE: Duration = Duration::from_micros(20);
/// Bound on one change becoming visible.
const VISIBLE_DEADLINE: Duration = Duration::from_secs(20);

/// The three kinds of change, cycled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Re-registered with a new incarnation.
    Restart,
    /// Unregistered.
    Remove,
    /// Registered under a new id.
    Add,
}

impl Change {
    /// The change of round `i`.
    pub fn of_round(i: usize) -> Self {
        [Change::Restart, Change::Remove, Change::Add][i % 3]
    }
}

/// What the snapshot must show once a change is visible.
#[derive(Clone, Debug)]
pub enum Expect {
    /// The marker `id` at sequence `seq` or later.
    Seq(String, u64),
    /// No marker `id` any more.
    Gone(String),
}

/// One measured round.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Which change.
    pub change: Change,
    /// Engine CPU (CPU rounds) or registry call -> visible (latency rounds).
    pub value: Duration,
    /// How long the registry call itself took (latency rounds only).
    pub call: Duration,
    /// Nacos latency rounds: from the push reaching the client to visible
    /// (the engine's part; the server's push delay is not).
    pub from_push: Option<Duration>,
}

impl Fixture {
    /// Makes `change` through the registry.
    pub async fn change(&mut self, change: Change) -> Result<Expect, BoxError> {
        match change {
            Change::Restart | Change::Add => {
                if change == Change::Add {
                    if self.marker_present {
                        return Err("add while the marker is present".into());
                    }
                    self.marker_gen = self.marker_gen.wrapping_add(1);
                }
                let seq = self.next_seq();
                let m = marker(&self.revisions, self.marker_gen, seq);
                let id = m.id.clone();
                self.writer.put(m).await?;
                self.marker_present = true;
                Ok(Expect::Seq(id, seq))
            }
            Change::Remove => {
                let id = self.marker_id();
                self.writer.remove(&id).await?;
                self.marker_present = false;
                Ok(Expect::Gone(id))
            }
        }
    }

    /// When `expect` holds now: `Some(time of the first confirming pick)`.
    /// A removal is confirmed by 3 picks in a row that are not the marker.
    pub async fn visible(&self, expect: &Expect) -> Result<Option<Instant>, BoxError> {
        match expect {
            Expect::Seq(id, seq) => {
                let seen = picked_marker(&self.dir, id).await?;
                Ok(seen.filter(|s| s >= seq).map(|_| Instant::now()))
            }
            Expect::Gone(id) => {
                let at = Instant::now();
                for _ in 0..3 {
                    if picked_marker(&self.dir, id).await?.is_some() {
                        return Ok(None);
                    }
                }
                Ok(Some(at))
            }
        }
    }

    /// Polls until `expect` holds; returns when it first did.
    pub async fn wait_visible(&self, expect: &Expect) -> Result<Instant, BoxError> {
        let start = Instant::now();
        loop {
            if let Some(at) = self.visible(expect).await? {
                return Ok(at);
            }
            if start.elapsed() > VISIBLE_DEADLINE {
                return Err(format!("{expect:?} not visible after {VISIBLE_DEADLINE:?}").into());
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Blocks until the engine is idle; returns its CPU time then.
    fn idle_cpu(&self) -> Result<u64, BoxError> {
        let (cpu, quiet) = self.engine.wait_idle(QUIET, NOISE, Duration::from_secs(60));
        if quiet {
            Ok(cpu)
        } else {
            Err("engine thread never went idle within 60 s".into())
        }
    }

    /// Engine CPU per idle second, measured over `window`.
    pub fn idle_rate(&self, window: Duration) -> Result<Duration, BoxError> {
        let c0 = self.idle_cpu()?;
        std::thread::sleep(window);
        let c1 = self.engine.cpu().nanos();
        let per_sec = c1.saturating_sub(c0) as f64 / window.as_secs_f64();
        Ok(Duration::from_nanos(per_sec as u64))
    }

    /// `rounds` CPU rounds.
    pub async fn cpu_rounds(&mut self, rounds: usize) -> Result<Vec<Sample>, BoxError> {
        let mut out = Vec::with_capacity(rounds);
        for i in 0..rounds {
            let change = Change::of_round(i);
            let c0 = self.idle_cpu()?;
            let expect = self.change(change).await?;
            let mut c1 = self.idle_cpu()?;
            if self.visible(&expect).await?.is_none() {
                // Not applied yet when the engine went quiet: wait for it
                // and count what it took (plus the polls).
                self.wait_visible(&expect).await?;
                c1 = self.idle_cpu()?;
            }
            out.push(Sample {
                change,
                value: Duration::from_nanos(c1.saturating_sub(c0)),
                call: Duration::ZERO,
                from_push: None,
            });
        }
        Ok(out)
    }

    /// `rounds` latency rounds.
    pub async fn latency_rounds(&mut self, rounds: usize) -> Result<Vec<Sample>, BoxError> {
        let mut out = Vec::with_capacity(rounds);
        for i in 0..rounds {
            let change = Change::of_round(i);
            self.idle_cpu()?;
            let t = Instant::now();
            let expect = self.change(change).await?;
            let call = t.elapsed();
            let at = self.wait_visible(&expect).await?;
            let from_push = self
                .nacos_client
                .as_ref()
                .and_then(|c| c.last_push())
                .filter(|p| *p >= t)
                .map(|p| at.saturating_duration_since(p));
            out.push(Sample {
                change,
                value: at.saturating_duration_since(t),
                call,
                from_push,
            });
        }
        Ok(out)
    }

    /// Puts the marker back if the last change removed it.
    pub async fn ensure_marker(&mut self) -> Result<(), BoxError> {
        if !self.marker_present {
            let e = self.change(Change::Add).await?;
            self.wait_visible(&e).await?;
        }
        Ok(())
    }
}

/// Median of `v` (zero when empty).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Median over all samples, and per change kind.
pub fn medians(s: &[Sample]) -> (Duration, [Duration; 3]) {
    let all = median(s.iter().map(|x| x.value).collect());
    let per = [Change::Restart, Change::Remove, Change::Add].map(|c| {
        median(
            s.iter()
                .filter(|x| x.change == c)
                .map(|x| x.value)
                .collect(),
        )
    });
    (all, per)
}
