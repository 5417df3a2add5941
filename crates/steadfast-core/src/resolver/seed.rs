//! Seeding a resolver from a disk snapshot at a cold start, and reading
//! back its state for the next snapshot. A snapshot is applied only while
//! the registry has delivered nothing: its instances and the metadata of
//! their revisions become the state (no fetch for those revisions), every
//! update says so ([`SnapshotOrigin`]), and the first registry Reset
//! replaces it entirely (no last-known-good carried over, no delta applied
//! on top of it; see `feed.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ResolverAction, ResolverMachine};
use crate::change::Version;
use crate::snapshot::AppSnapshot;
use crate::SnapshotOrigin;

/// The snapshot the state came from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seeded {
    written_at_ms: u64,
    /// Its age when it was loaded.
    age: Duration,
    loaded_at: Instant,
}

impl ResolverMachine {
    /// Serves `snapshot` (`age` old, as checked by the loader) until the
    /// registry delivers a state. Returns `None`, changing nothing, when a
    /// registry state arrived already, the machine is closed, or the
    /// snapshot is another app's; else the actions (none for the
    /// snapshot's own revisions, which arrive resolved).
    pub fn seed_from_snapshot(
        &mut self,
        snapshot: AppSnapshot,
        age: Duration,
        now: Instant,
    ) -> Option<Vec<ResolverAction>> {
        if self.closed || self.has_state || snapshot.app != self.app {
            return None;
        }
        for (rev, info) in snapshot.metadata {
            self.metadata.entry(rev).or_insert_with(|| Arc::new(info));
        }
        let actions = self.on_snapshot(Version::default(), Arc::new(snapshot.instances), now);
        self.seeded = Some(Seeded {
            written_at_ms: snapshot.written_at_ms,
            age,
            loaded_at: now,
        });
        self.dirty = true;
        Some(actions)
    }

    /// Whether the state is a snapshot's (no registry state yet).
    pub fn is_seeded(&self) -> bool {
        self.seeded.is_some()
    }

    /// Where the URLs come from, while they come from a snapshot: its age
    /// at the machine's latest input.
    pub(super) fn snapshot_origin(&self) -> Option<SnapshotOrigin> {
        let s = self.seeded?;
        let since = self
            .clock
            .map_or(Duration::ZERO, |c| c.saturating_duration_since(s.loaded_at));
        Some(SnapshotOrigin {
            written_at_ms: s.written_at_ms,
            age: s.age.saturating_add(since),
            subscribe: self.subscribe_failure.clone(),
        })
    }

    /// Whether the state may be written as a snapshot: delivered by the
    /// registry (not a snapshot), fresh (watch up, nothing held), every
    /// revision resolved, and at least one instance (an empty state never
    /// overwrites the last good one).
    pub fn snapshot_worthy(&self) -> bool {
        !self.closed
            && self.has_state
            && self.seeded.is_none()
            && self.stale_since.is_none()
            && self.held.is_none()
            && !self.table.is_empty()
            && self.unresolved().is_none()
    }

    /// The state to write, written at `written_at_ms`, when it is
    /// [`snapshot_worthy`](Self::snapshot_worthy): every instance as
    /// registered and the metadata of every revision they advertise.
    pub fn snapshot_state(&self, written_at_ms: u64) -> Option<AppSnapshot> {
        if !self.snapshot_worthy() {
            return None;
        }
        let mut metadata = BTreeMap::new();
        let mut instances = Vec::with_capacity(self.table.len());
        for (_, inst) in self.table.instances() {
            if let Some(rev) = inst.revision() {
                // Resolved, so its metadata is known.
                let info = self.metadata.get(rev)?;
                metadata
                    .entry(rev.to_string())
                    .or_insert_with(|| (**info).clone());
            }
            instances.push(inst.to_record(&self.app));
        }
        Some(AppSnapshot {
            app: self.app.clone(),
            written_at_ms,
            instances,
            metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::backoff::BackoffPolicy;
    use crate::change::{Change, Version};
    use crate::model::{MetadataInfo, ServiceInfo, ServiceInstance};
    use crate::snapshot::AppSnapshot;
    use crate::subscription::Feed;
    use crate::update::{UpdateState, UrlChange};
    use crate::{ResolverAction, ResolverMachine};

    const KEY: &str = "demo.Greeter:tri";

    fn meta(port: u16) -> MetadataInfo {
        MetadataInfo::new(
            "a",
            [ServiceInfo {
                name: "demo.Greeter".into(),
                group: None,
                version: None,
                protocol: "tri".into(),
                port,
                path: "demo.Greeter".into(),
                params: Default::default(),
            }],
        )
    }

    fn inst(m: &MetadataInfo, port: u16) -> ServiceInstance {
        let mut i = ServiceInstance::new("a", "127.0.0.1", port);
        i.set_revision(m.revision.clone());
        i
    }

    fn snap(m: &MetadataInfo, ports: &[u16]) -> AppSnapshot {
        AppSnapshot {
            app: "a".into(),
            written_at_ms: 1,
            instances: ports.iter().map(|p| inst(m, *p)).collect(),
            metadata: BTreeMap::from([(m.revision.clone(), m.clone())]),
        }
    }

    fn ports(change: &UrlChange) -> Vec<u16> {
        let Change::Reset { items: all, .. } = change else {
            panic!("a full list expected, got {change:?}")
        };
        let mut p: Vec<u16> = all.iter().map(|u| u.instance.port()).collect();
        p.sort_unstable();
        p
    }

    fn machine(t0: Instant) -> ResolverMachine {
        let mut m = ResolverMachine::new("a", BackoffPolicy::default(), 1);
        assert!(m.subscribe_at(KEY, t0).is_empty());
        m
    }

    #[test]
    fn a_snapshot_is_served_marked_with_its_age_and_needs_no_fetch() {
        let t0 = Instant::now();
        let m1 = meta(20000);
        let mut r = machine(t0);
        let actions = r
            .seed_from_snapshot(snap(&m1, &[1, 2]), Duration::from_secs(60), t0)
            .expect("applied");
        assert!(actions.is_empty(), "no fetch for a snapshot revision");
        assert!(r.is_seeded() && !r.snapshot_worthy());
        let later = t0 + Duration::from_secs(5);
        r.set_registry_stale(Some(later));
        r.tick(later);
        let u = r.take_updates().pop().expect("an update");
        assert_eq!(ports(&u.change), vec![1, 2]);
        assert_eq!(u.state, UpdateState::Resolved);
        let origin = u.snapshot.expect("from the snapshot");
        assert_eq!(origin.age, Duration::from_secs(65));
        assert_eq!(origin.written_at_ms, 1);
    }

    #[test]
    fn the_first_registry_reset_replaces_the_snapshot_entirely() {
        let t0 = Instant::now();
        let (m1, m2) = (meta(20000), meta(20001));
        let mut r = machine(t0);
        r.seed_from_snapshot(snap(&m1, &[1, 2]), Duration::ZERO, t0)
            .expect("applied");
        r.take_updates();
        // Instance 1 re-registered with a new revision (unresolved), 2 is
        // gone, 3 is new: nothing of the snapshot survives, not even as a
        // last-known-good of instance 1.
        let live = vec![inst(&m2, 1), inst(&m1, 3)];
        let actions = r.on_snapshot(Version::at(4), Arc::new(live), t0);
        assert!(actions.iter().any(
            |a| matches!(a, ResolverAction::Fetch { revision, .. } if *revision == m2.revision)
        ));
        let u = r.take_updates().pop().expect("an update");
        assert_eq!(ports(&u.change), vec![3]);
        assert!(u.snapshot.is_none() && !r.is_seeded());
        // Now authoritative; worthy once every revision resolves.
        assert!(!r.snapshot_worthy());
    }

    #[test]
    fn a_failing_subscription_is_carried_while_a_snapshot_is_served() {
        let t0 = Instant::now();
        let m1 = meta(20000);
        let mut r = machine(t0);
        r.seed_from_snapshot(snap(&m1, &[1]), Duration::ZERO, t0)
            .expect("applied");
        r.take_updates();
        let failing = |attempts| crate::RegistryFailure {
            since: t0,
            attempts,
            last_error: crate::RegistryError::Timeout,
        };
        for attempts in [1, 2] {
            r.set_subscribe_failure(Some(failing(attempts)));
            r.tick(t0);
            let u = r.take_updates().pop().expect("the failure is published");
            assert_eq!(u.state, UpdateState::Resolved);
            let origin = u.snapshot.expect("still the snapshot's");
            assert_eq!(origin.subscribe, Some(failing(attempts)));
        }
        // The live state replaces the snapshot, and the failure with it.
        r.set_subscribe_failure(None);
        r.on_snapshot(Version::at(3), Arc::new(vec![inst(&m1, 1)]), t0);
        let u = r.take_updates().pop().expect("an update");
        assert!(u.snapshot.is_none());
    }

    #[test]
    fn a_delta_never_applies_on_top_of_a_snapshot() {
        let t0 = Instant::now();
        let m1 = meta(20000);
        let mut r = machine(t0);
        r.seed_from_snapshot(snap(&m1, &[1]), Duration::ZERO, t0)
            .expect("applied");
        let delta = Feed::Delta {
            base: Version::default(),
            version: Version::at(1),
            upserts: Vec::new(),
            removals: Vec::new(),
        };
        assert_eq!(r.on_feed(delta, t0), vec![ResolverAction::RequestReset]);
        assert!(r.is_seeded());
    }

    #[test]
    fn a_snapshot_after_a_registry_state_or_of_another_app_is_ignored() {
        let t0 = Instant::now();
        let m1 = meta(20000);
        let mut r = machine(t0);
        let mut other = snap(&m1, &[1]);
        other.app = "b".into();
        assert!(r.seed_from_snapshot(other, Duration::ZERO, t0).is_none());
        r.on_snapshot(Version::at(1), Arc::new(vec![inst(&m1, 7)]), t0);
        assert!(r
            .seed_from_snapshot(snap(&m1, &[1]), Duration::ZERO, t0)
            .is_none());
        assert!(!r.is_seeded());
    }

    #[test]
    fn only_a_fresh_fully_resolved_registry_state_is_written() {
        let t0 = Instant::now();
        let m1 = meta(20000);
        let mut r = machine(t0);
        assert!(r.snapshot_state(5).is_none(), "no state yet");
        let actions = r.on_snapshot(
            Version::at(1),
            Arc::new(vec![inst(&m1, 1), inst(&m1, 2)]),
            t0,
        );
        let token = actions
            .iter()
            .find_map(|a| match a {
                ResolverAction::Fetch { token, .. } => Some(*token),
                _ => None,
            })
            .expect("a fetch");
        assert!(r.snapshot_state(5).is_none(), "unresolved");
        r.on_fetch_result(&m1.revision, token, Ok(Arc::new(m1.clone())), t0);
        let s = r.snapshot_state(5).expect("worthy");
        assert_eq!(s.instances.len(), 2);
        assert_eq!(s.metadata.get(&m1.revision), Some(&m1));
        assert_eq!(s.written_at_ms, 5);
        r.set_registry_stale(Some(t0));
        assert!(r.snapshot_state(5).is_none(), "stale");
        r.set_registry_stale(None);
        r.on_snapshot(Version::at(2), Arc::new(Vec::new()), t0);
        assert!(r.snapshot_state(5).is_none(), "empty");
    }
}
