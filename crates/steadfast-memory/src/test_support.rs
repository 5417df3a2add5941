//! Helpers shared by the crate's unit tests: records, watching and listing
//! through the [`Registry`] trait, and reading events. Streams are polled
//! with `now_or_never`: the registry is synchronous, so an item is either
//! there already or not at all.

use std::sync::Arc;

use futures::executor::block_on;
use futures::{FutureExt, StreamExt};
use steadfast_core::{
    EventStream, Instance, InstanceMap, Listing, Registry, RegistryError, RegistryEvent,
    ServiceInstance, Version,
};

use crate::MemoryRegistry;

/// A record of `app` at `host:port` with revision `r1`.
pub(crate) fn inst(app: &str, host: &str, port: u16) -> ServiceInstance {
    let mut i = ServiceInstance::new(app, host, port);
    i.set_revision("r1");
    i
}

/// An event watch of `app` through the trait.
pub(crate) fn watch(reg: &MemoryRegistry, app: &str) -> EventStream {
    block_on(Registry::watch(reg, app)).expect("watch")
}

/// A listing of `app` through the trait.
pub(crate) fn list(reg: &MemoryRegistry, app: &str) -> Listing {
    block_on(Registry::list(reg, app)).expect("list")
}

/// The next item, which must already be there.
pub(crate) fn next(s: &mut EventStream) -> Result<RegistryEvent, RegistryError> {
    s.next()
        .now_or_never()
        .expect("an item is ready")
        .expect("stream still open")
}

/// The next item, which must be there and `Ok`.
pub(crate) fn next_ok(s: &mut EventStream) -> RegistryEvent {
    next(s).expect("an Ok item")
}

/// Asserts nothing is queued and the stream is still open.
pub(crate) fn assert_quiet(s: &mut EventStream) {
    assert!(s.next().now_or_never().is_none(), "unexpected item");
}

/// Asserts the stream has ended.
pub(crate) fn assert_ended(s: &mut EventStream) {
    assert!(s.next().now_or_never() == Some(None), "ended");
}

/// The ids of `instances`, sorted.
pub(crate) fn sorted_ids<'a>(
    instances: impl IntoIterator<Item = &'a Arc<Instance>>,
) -> Vec<String> {
    let mut ids: Vec<String> = instances.into_iter().map(|i| i.id().to_string()).collect();
    ids.sort();
    ids
}

/// The ids of owned records, in their order.
pub(crate) fn record_ids(records: &[ServiceInstance]) -> Vec<&str> {
    records.iter().map(|i| i.id.as_str()).collect()
}

/// The Reset's version and sorted ids (panics on a Delta).
pub(crate) fn reset(ev: RegistryEvent) -> (Version, Vec<String>) {
    match ev {
        RegistryEvent::Reset { version, items } => (version, sorted_ids(&items)),
        other => panic!("expected a Reset, got {other:?}"),
    }
}

/// The Delta's parts (panics on a Reset).
pub(crate) fn delta(ev: RegistryEvent) -> (Version, Vec<Arc<Instance>>, Vec<Arc<str>>) {
    match ev {
        RegistryEvent::Delta {
            version,
            upserts,
            removals,
            ..
        } => (version, upserts, removals),
        other => panic!("expected a Delta, got {other:?}"),
    }
}

/// Listing instances by id, for comparing with an [`InstanceMap`].
pub(crate) fn same_state(map: &InstanceMap, listing: &Listing) -> bool {
    map.len() == listing.instances.len()
        && listing
            .instances
            .iter()
            .all(|i| map.get(i.id()).is_some_and(|m| m == i))
}

/// Applies the next item of `s` (which must be there and `Ok`) to `map`
/// and returns the event and the map's sorted ids after it.
pub(crate) fn apply_next(
    s: &mut EventStream,
    map: &mut InstanceMap,
) -> (RegistryEvent, Vec<String>) {
    let ev = next_ok(s);
    assert!(apply_to(map, &ev), "a newer event that follows: {ev:?}");
    (ev, sorted_ids(map.iter()))
}

/// Applies `ev` to `map` as the subscription does; whether it applied
/// (not older, no gap).
pub(crate) fn apply_to(map: &mut InstanceMap, ev: &RegistryEvent) -> bool {
    matches!(
        map.apply(ev.clone(), usize::MAX),
        steadfast_core::MapApplied::Changed(_)
    )
}
