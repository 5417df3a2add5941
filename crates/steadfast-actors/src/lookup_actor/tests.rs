//! A handler panic in the lookup actor restarts it with its flights made
//! again: every waiting caller is still answered. Virtual time inside an
//! actix System.

use std::time::Duration;

use steadfast_core::{ServiceInstance, SubscriptionConfig};
use steadfast_memory::MemoryRegistry;

use super::*;
use crate::contain::DrillPanic;

#[actix_rt::test]
async fn a_handler_panic_restarts_the_lookup_actor_and_its_waiters_are_answered() {
    tokio::time::pause();
    let stats = Arc::new(EngineStats::default());
    let memory = MemoryRegistry::new();
    memory.put(ServiceInstance::new("a", "127.0.0.1", 8001));
    memory.delay_calls(Duration::from_millis(100));
    let registry: Arc<dyn Registry> = Arc::new(memory.clone());
    let (r, st) = (registry.clone(), stats.clone());
    let watch =
        Supervisor::start(move |_| RegistryActor::new(r, SubscriptionConfig::default(), 1, st));
    let (r, st, w) = (registry.clone(), stats.clone(), watch.downgrade());
    let config = (LookupConfig::default(), Duration::from_secs(5));
    let lookup = Supervisor::start(move |_| LookupActor::new(r, w, config, 3, st));
    let ask = |l: &Addr<LookupActor>| l.send(Instances { app: "a".into() });
    let first = actix_rt::spawn(ask(&lookup));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The next handler panics after the caller joined the flight.
    lookup.do_send(DrillPanic);
    let second = actix_rt::spawn(ask(&lookup));
    let (a, b) = (
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
    );
    let (a, b) = (a.expect("answered"), b.expect("answered"));
    assert_eq!((a.instances.len(), b.instances.len()), (1, 1));
    let s = stats.snapshot();
    assert_eq!((s.handler_panics, s.restarts), (1, 1), "{s:?}");
    assert_eq!(s.lookup_registry_calls, 2, "the lost call was made again");
    // It keeps serving, from the cache now.
    let c = ask(&lookup).await.unwrap().expect("cached");
    assert_eq!(c.source, Source::Cache);
}
