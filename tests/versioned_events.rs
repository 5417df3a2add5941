//! Versioned registry events through the whole engine: a replay of an
//! older state is never served, a delta moves the directory by what it
//! changed, and a later epoch (a wiped store) is newer whatever its
//! revision.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::channel::mpsc;
use futures::future::{BoxFuture, FutureExt};
use futures::StreamExt;
use steadfast::{
    EventStream, Instance, Listing, Registry, RegistryError, RegistryEvent, ServiceInstance,
    Version,
};
use steadfast_core::RevisionInterner;

/// The receiving end of the scripted watch stream.
type Events = mpsc::UnboundedReceiver<Result<RegistryEvent, RegistryError>>;

/// A registry whose one watch stream the test scripts event by event.
#[derive(Clone, Default)]
struct Scripted {
    events: Arc<Mutex<Option<Events>>>,
}

impl Registry for Scripted {
    fn list(&self, _app: &str) -> BoxFuture<'static, Result<Listing, RegistryError>> {
        // Resyncs learn nothing new: a listing older than anything pushed.
        futures::future::ready(Ok(Listing::default())).boxed()
    }
    fn watch(&self, _app: &str) -> BoxFuture<'static, Result<EventStream, RegistryError>> {
        let rx = self.events.lock().unwrap().take();
        async move {
            let rx = rx.ok_or_else(|| RegistryError::Unavailable("one watch only".into()))?;
            Ok(rx.boxed())
        }
        .boxed()
    }
    fn register(&self, _: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        futures::future::ready(Ok(())).boxed()
    }
    fn unregister(&self, _: ServiceInstance) -> BoxFuture<'static, Result<(), RegistryError>> {
        futures::future::ready(Ok(())).boxed()
    }
}

fn decoded(records: &[ServiceInstance]) -> Vec<Arc<Instance>> {
    let mut revs = RevisionInterner::default();
    records
        .iter()
        .map(|r| Arc::new(Instance::decode(r, &mut revs)))
        .collect()
}

fn reset(version: Version, records: &[ServiceInstance]) -> RegistryEvent {
    RegistryEvent::Reset {
        version,
        items: decoded(records),
    }
}

#[actix_rt::test]
async fn an_older_state_is_never_served_and_a_later_epoch_is_newer() {
    let (tx, rx) = mpsc::unbounded();
    let reg = Scripted::default();
    *reg.events.lock().unwrap() = Some(rx);
    let r = reg.clone();
    let fx = Fixture::start_with(move |b| b.registry(r));
    let m = metadata(APP, 20000, "t1");
    fx.fetcher.serve(m.clone());
    let dir = fx.subscribe().await;
    let at = Version::at;
    let step = Duration::from_millis(200);

    tx.unbounded_send(Ok(reset(at(5), &[instance(&m, 8001), instance(&m, 8002)])))
        .unwrap();
    wait_for(&dir, "the first state", step, |v| {
        ports(v) == [20000, 20000]
    })
    .await;

    // A replay of an older state (a lagging member, a late resync).
    tx.unbounded_send(Ok(reset(at(3), &[instance(&m, 8009)])))
        .unwrap();
    advance(step).await;
    let v = dir.view().await.unwrap();
    let ids: Vec<&str> = v.endpoints.iter().map(|u| u.instance_id()).collect();
    assert_eq!(ids.len(), 2, "the older state is not served: {ids:?}");
    assert!(!ids.contains(&"127.0.0.1:8009"));
    assert_eq!(fx.engine.stats().older_events_ignored, 1);

    // A delta moves the directory by exactly what it changed.
    tx.unbounded_send(Ok(RegistryEvent::Delta {
        base: at(5),
        version: at(6),
        upserts: decoded(&[instance(&m, 8003)]),
        removals: vec![Arc::from("127.0.0.1:8001")],
    }))
    .unwrap();
    wait_for(&dir, "the delta applied", step, |v| {
        let mut ids: Vec<&str> = v.endpoints.iter().map(|u| u.instance_id()).collect();
        ids.sort_unstable();
        ids == ["127.0.0.1:8002", "127.0.0.1:8003"]
    })
    .await;

    // A wiped store starts again at revision 1, in a later epoch: newer.
    tx.unbounded_send(Ok(reset(Version::of(1, 1), &[instance(&m, 8004)])))
        .unwrap();
    wait_for(&dir, "the post-wipe state", step, |v| {
        v.endpoints.len() == 1 && v.endpoints[0].instance_id() == "127.0.0.1:8004"
    })
    .await;
    assert_eq!(fx.engine.stats().older_events_ignored, 1);
    fx.engine.shutdown().await;
}
