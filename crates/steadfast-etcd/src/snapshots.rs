//! The snapshot view of an event stream, for the core's snapshot
//! [`steadfast_core::Registry::watch`] until it takes events: a thin adapter
//! that keeps the app's instances by id (shared `Arc`s, applied from each
//! Reset and Delta) and yields the whole set as owned records, ordered by
//! id, after each event. `Err` items pass through.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use steadfast_core::{Instance, RegistryEvent, SnapshotStream};

use crate::watch_stream::EventStream;

/// `events` of `app` as full snapshots.
pub(crate) fn snapshots(app: String, events: EventStream) -> SnapshotStream {
    let mut held: BTreeMap<Arc<str>, Arc<Instance>> = BTreeMap::new();
    events
        .map(move |item| {
            item.map(|event| {
                match event {
                    RegistryEvent::Reset { instances, .. } => {
                        held = instances
                            .into_iter()
                            .map(|i| (i.id_arc().clone(), i))
                            .collect();
                    }
                    RegistryEvent::Delta {
                        upserts, removals, ..
                    } => {
                        for id in &removals {
                            held.remove(id);
                        }
                        for i in upserts {
                            held.insert(i.id_arc().clone(), i);
                        }
                    }
                }
                Arc::new(held.values().map(|i| i.to_record(&app)).collect())
            })
        })
        .boxed()
}
