//! The heal phase and the end of a schedule. Once the last fault heals the
//! state must reach the fault-free result within a bound computed from the
//! configuration, stay there, and leave no retry pending; then the engine
//! shuts down and nothing may happen any more.
//!
//! The bound after the heal at `H` (every provider answers, the registry
//! answers, silent streams catch up):
//! - a fetch under way at `H` ends by its deadline `D`, and a revision
//!   failing by then is retried within the jittered cap `C' = cap * (1 +
//!   jitter)`; a retry then answers within the provider latency `Lf`: so
//!   `D + C' + 2 Lf`, plus `2 Lr` (registry latency) for the last pushes;
//! - after a registry fault, the registry view is current within
//!   `call_timeout` (a call hung at `H`) + the jittered probe interval + `3
//!   Lr` (probe list, watch open, first item), and a mass expiry seen then
//!   is held for at most the grace: `R = call_timeout + probe' + 3 Lr +
//!   grace` replaces `2 Lr`;
//! - after a missed notification, one jittered resync interval (or the
//!   registry's jittered cap, if longer) `+ 2 Lr` more.
//!
//! With the configuration of the model (engine defaults: backoff 1 s
//! doubling to 30 s +0-25 %, fetch deadline 5 s, registry call timeout 5 s,
//! probe 1 s +0-25 %, grace 3 s; resync every 60 s ±20 %; latencies up to
//! 30 ms (registry) and 50 ms (providers)): 42.66 s after provider faults
//! alone (5 + 37.5 + 0.1 + 0.06), 51.94 s with registry faults (5 + 37.5 +
//! 0.1 + 5 + 1.25 + 0.09 + 3); a missed notification adds 72.06 s (124.00 s
//! with both).

use std::time::Duration;

use rand::Rng;
use steadfast_core::RECONCILE_JITTER;
use steadfast_core::{DirectoryStatus, EmptyReason, Instance, RevisionInterner, ServiceUrl};

use super::registry::Handle;
use super::sim::Sim;
use super::world::{FETCH_LATENCY, REFS, REGISTRY_LATENCY};

/// Convergence watch of the heal phase.
pub struct HealWatch {
    /// Since when the state has matched the fault-free result.
    pub matched_since: Option<Duration>,
}

/// How one schedule converged.
#[derive(Clone, Copy, Debug)]
pub struct Converge {
    /// From the heal to the fault-free result.
    pub took: Duration,
    /// The bound it had to meet.
    pub bound: Duration,
    /// 0: provider faults only; 1: registry faults; 2: missed notifications.
    pub kind: usize,
}

impl Sim {
    /// The convergence bound for this schedule's faults (see the module doc).
    pub fn bound(&self) -> Duration {
        let b = &self.cfg.backoff;
        let sub = &self.cfg.sub;
        let rb = &sub.recover.backoff;
        let mut bound =
            self.cfg.fetch.deadline() + b.cap().mul_f64(1.0 + b.jitter) + FETCH_LATENCY * 2;
        if self.track.reg_faulted {
            let probe = sub.recover.probe_interval.unwrap_or(rb.cap());
            bound += sub.call_timeout
                + probe.mul_f64(1.0 + rb.jitter)
                + REGISTRY_LATENCY * 3
                + sub.mass_removal_grace;
        } else {
            bound += REGISTRY_LATENCY * 2;
        }
        if self.track.missed {
            let resync = sub
                .reconcile_interval
                .mul_f64(1.0 + RECONCILE_JITTER)
                .max(rb.cap().mul_f64(1.0 + rb.jitter));
            bound += resync + REGISTRY_LATENCY * 2;
        }
        bound
    }

    /// Heals every fault, runs to the bound and checks the result; then one
    /// more cap to check it stays and nothing is left pending.
    pub fn heal_and_check(&mut self) -> Option<Converge> {
        let from = self.now;
        self.note(|| "heal: every fault cleared".into());
        self.world.heal();
        self.lose.clear();
        self.registry_up();
        if self.dirs.is_empty() {
            let n = self.rng.gen_range(0..REFS.len());
            self.subscribe(n);
        }
        self.settle();
        let bound = self.bound();
        self.track.heal = Some(HealWatch {
            matched_since: None,
        });
        self.watch_convergence();
        self.run_until(from + bound);
        if self.failed() {
            return None;
        }
        if let Err(e) = self.converged() {
            self.violate(format!(
                "[converge] {:.2}s after the last fault healed: {e}",
                bound.as_secs_f64()
            ));
            return None;
        }
        let took = self
            .track
            .heal
            .as_ref()
            .and_then(|h| h.matched_since)
            .map_or(bound, |t| t.saturating_sub(from));
        let b = &self.cfg.backoff;
        let more = b.cap().mul_f64(1.0 + b.jitter);
        self.run_until(from + bound + more);
        if let Err(e) = self.converged().and_then(|()| self.quiescent()) {
            self.violate(format!("[converge] after converging: {e}"));
            return None;
        }
        let kind = if self.track.missed {
            2
        } else {
            usize::from(self.track.reg_faulted)
        };
        Some(Converge { took, bound, kind })
    }

    /// Follows when the state (last) started to match the fault-free result.
    pub fn watch_convergence(&mut self) {
        if self.track.heal.is_none() {
            return;
        }
        let ok = self.converged().is_ok();
        let now = self.now;
        if let Some(h) = self.track.heal.as_mut() {
            match (ok, h.matched_since) {
                (false, _) => h.matched_since = None,
                (true, None) => h.matched_since = Some(now),
                (true, Some(_)) => {}
            }
        }
    }

    /// The URLs a fault-free engine serves for reference `n`: every serving
    /// instance of the registry's state whose revision exports the key.
    fn expected(&self, n: usize) -> Vec<ServiceUrl> {
        let spec = &REFS[n];
        let mut urls = Vec::new();
        for app in spec.apps {
            for inst in self
                .world
                .apps
                .get(app)
                .into_iter()
                .flat_map(|m| m.values())
            {
                let Some(rev) = inst.revision().filter(|_| inst.is_serving()) else {
                    continue;
                };
                let meta = self.world.metadata.get(&(app.to_string(), rev.to_string()));
                if let Some(svc) = meta.and_then(|m| m.services.get(spec.key)) {
                    urls.push(ServiceUrl::build(inst, svc));
                }
            }
        }
        urls.sort();
        urls
    }

    /// Whether every directory shows the fault-free result, says so, and no
    /// revision is left unresolved.
    pub fn converged(&self) -> Result<(), String> {
        for (n, d) in &self.dirs {
            let mut got = d.m.list();
            got.sort();
            let want = self.expected(*n);
            let ids = |u: &[ServiceUrl]| -> Vec<String> {
                u.iter()
                    .map(|u| {
                        format!(
                            "{}/{}:{} w{}",
                            u.instance_id(),
                            u.path(),
                            u.port(),
                            u.weight()
                        )
                    })
                    .collect()
            };
            if got != want {
                return Err(format!(
                    "directory {} of {:?} serves {:?}, the fault-free result is {:?}",
                    REFS[*n].key,
                    REFS[*n].apps,
                    ids(&got),
                    ids(&want)
                ));
            }
            let status = d.m.status();
            let clean = match &status {
                DirectoryStatus::Ready {
                    stale_since,
                    degraded,
                    held,
                    ..
                } => stale_since.is_none() && degraded.is_empty() && held.is_empty(),
                DirectoryStatus::Empty(r) => matches!(
                    r,
                    EmptyReason::RegistryEmpty
                        | EmptyReason::NoMatchingService
                        | EmptyReason::NotServing(_)
                ),
            };
            if !clean {
                return Err(format!("directory {} says {status}", REFS[*n].key));
            }
        }
        for r in self.resolvers.values() {
            if let Some(u) = r.m.unresolved() {
                return Err(format!("resolver {}: {u}", r.app));
            }
        }
        Ok(())
    }

    /// Whether nothing but watches and periodic resyncs is left.
    fn quiescent(&self) -> Result<(), String> {
        for r in self.resolvers.values() {
            if !r.timers.is_empty() || !r.fetches.is_empty() {
                return Err(format!("resolver {} still retries", r.app));
            }
        }
        if !self.cache.flights.is_empty() {
            return Err("flights still under way".into());
        }
        for (app, h) in self.reg.handles.values() {
            if !matches!(h, Handle::Stream | Handle::List | Handle::Timer(_))
                || matches!(h, Handle::Timer(k) if *k != steadfast_core::TimerKind::Resync)
            {
                return Err(format!("registry {app}: {h:?} still pending"));
            }
        }
        for app in self.reg.m.apps() {
            if self.reg.m.stale_since(app).is_some() {
                return Err(format!("{app} still stale"));
            }
            let received: Option<Vec<Instance>> = self
                .track
                .received
                .get(app)
                .map(|r| r.by_id.values().map(|i| Instance::clone(i)).collect());
            let mut revs = RevisionInterner::default();
            let want: Vec<Instance> = self
                .world
                .snapshot(app)
                .iter()
                .map(|i| Instance::decode(i, &mut revs))
                .collect();
            if received.as_ref() != Some(&want) {
                return Err(format!("the registry view of {app} is not the registry's"));
            }
        }
        Ok(())
    }

    /// Shuts the engine down (if a step did not), feeds the closed machines
    /// stale inputs, runs ten more minutes: nothing may happen.
    pub fn final_shutdown(&mut self) {
        self.shutdown();
        self.poke_closed();
        let until = self.now + Duration::from_secs(600);
        self.run_until(until);
        self.poke_closed();
        let left = !self.reg.handles.is_empty()
            || !self.resolvers.is_empty()
            || !self.cache.flights.is_empty()
            || !self.dirs.is_empty();
        if left {
            self.violate("[after-shutdown] something outlived shutdown".into());
        }
    }
}
