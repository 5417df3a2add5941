//! The directory actor publishes every applied update into the slot its
//! handles read lock-free (from any thread), and answers a patch that does
//! not follow by re-attaching to the app's resolver for its whole state.

use std::time::Duration;

use steadfast_core::{
    BackoffPolicy, Change, DirectoryUpdate, EmptyReason, Endpoint, ResolverMachine, ServiceInfo,
    ServiceInstance, UpdateState, Version,
};

use super::*;
use crate::cache_actor::CacheActor;
use crate::error::EngineError;
use crate::handle::Directory;
use crate::registry_actor::RegistryActor;

/// A weak address on no actor at all (the resolver's registry and cache).
pub(super) fn nowhere<A: Actor<Context = Context<A>>>() -> WeakAddr<A> {
    let (tx, _rx) = actix::dev::channel::channel::<A>(1);
    Addr::new(tx).downgrade()
}

/// Resolver 1 of app `a`, with no registry or cache behind it (the tests
/// drive it with messages).
pub(super) fn lone_resolver(stats: &Arc<EngineStats>) -> Addr<ResolverActor> {
    ResolverActor::new(
        1,
        Arc::new(|| ResolverMachine::new("a", BackoffPolicy::default(), 1)),
        nowhere::<RegistryActor>(),
        nowhere::<CacheActor>(),
        stats.clone(),
    )
    .start()
}

fn endpoint(port: u16) -> Endpoint {
    let svc = ServiceInfo {
        name: "demo.S".into(),
        group: None,
        version: None,
        protocol: "tri".into(),
        port: 1,
        path: "demo.S".into(),
        params: Default::default(),
    };
    Arc::new(ServiceUrl::build(
        &ServiceInstance::new("a", "127.0.0.1", port),
        &svc,
    ))
}

/// An update of app `a` as its resolver would queue it (test input: the
/// tests play the resolver's side of the directory's inbox).
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct AsResolver(pub DirectoryUpdate);

impl Handler<AsResolver> for DirectoryActor {
    type Result = ();
    fn handle(&mut self, msg: AsResolver, ctx: &mut Self::Context) {
        let outbox = self.inboxes[0].sender(ctx.address().downgrade().recipient());
        let n = msg.0.change.len();
        assert!(outbox.send(msg.0, n, 0, &self.stats, || None));
    }
}

fn patch(key: &str, base: u64, version: u64, upserts: Vec<Endpoint>) -> AsResolver {
    AsResolver(DirectoryUpdate {
        app: "a".into(),
        subscribe_key: key.into(),
        change: Change::Delta {
            base: Version::at(base),
            version: Version::at(version),
            upserts,
            removals: Vec::new(),
        },
        state: UpdateState::Resolved,
        stale_since: None,
        held: None,
        closing: Vec::new(),
        snapshot: None,
    })
}

/// Lets the arbiter run until `dir`'s published version reaches `version`
/// (bounded).
async fn until_version(dir: &Directory, version: u64) -> Arc<DirectorySnapshot> {
    for _ in 0..10_000 {
        let s = dir.snapshot().expect("open");
        if s.version() >= version {
            return s;
        }
        actix_rt::task::yield_now().await;
    }
    panic!("version {version} never published");
}

#[actix_rt::test]
async fn publishes_lock_free_and_refetches_a_full_update_on_a_refused_patch() {
    let stats = Arc::new(EngineStats::default());
    let reference = Reference::new("demo.S", "tri", ["a"]);
    let key = reference.subscribe_key();
    let resolver = lone_resolver(&stats);
    let shared = Arc::new(DirectoryShared::default());
    let resolvers = vec![resolver.downgrade()];
    let addr =
        DirectoryActor::new(7, &reference, resolvers, shared.clone(), 1, stats.clone()).start();
    let dir = Directory::new(reference, addr.downgrade(), shared);

    // The resolver answers the attach with a full (empty, pending) update.
    let first = until_version(&dir, 1).await;
    assert_eq!(
        first.status(),
        &DirectoryStatus::Empty(EmptyReason::Pending(Default::default()))
    );
    assert_eq!(dir.select_now(), Ok(None));

    // A patch on a version the directory does not hold is refused, and the
    // directory asks the resolver for the whole state (version 2).
    addr.do_send(patch(&key, 5, 6, vec![endpoint(9)]));
    let refetched = until_version(&dir, 2).await;
    assert!(refetched.is_empty(), "the refused patch left nothing");
    assert_eq!(refetched.version(), 2);
    // Counted and shown in inspect: one ask, answered.
    let mut asks = (0, None);
    for _ in 0..1000 {
        let (_, asked, waiting) = addr
            .send(crate::inspect::collect::InspectTombstones)
            .await
            .expect("answered");
        asks = (asked, waiting);
        if asked > 0 && waiting.is_none() {
            break;
        }
        actix_rt::task::yield_now().await;
    }
    assert_eq!(asks, (1, None));
    assert_eq!(
        stats.snapshot().resets_requested,
        1,
        "the ask is counted in the engine's stats"
    );

    // A patch on the version held applies and is published.
    let ep = endpoint(8);
    addr.do_send(patch(&key, 0, 1, vec![ep.clone()]));
    let ready = dir.ready(Duration::from_secs(5)).await.expect("ready");
    assert!(ready.status().is_ready(), "{:?}", ready.status());
    assert!(
        ready.version() > refetched.version(),
        "the applied patch is published as a newer snapshot"
    );

    // Read from a plain thread, never messaging the actor: a shared handle
    // on the very endpoint the directory holds.
    let reader = dir.clone();
    let picked = std::thread::spawn(move || reader.select_now())
        .join()
        .expect("reader thread");
    assert!(Arc::ptr_eq(&picked.unwrap().unwrap(), &ep));
    assert_eq!(
        dir.status().await.map(|s| s.is_ready()),
        Ok(true),
        "status from the snapshot"
    );
    assert_eq!(dir.view().await.unwrap().endpoints, vec![(*ep).clone()]);

    addr.send(Shutdown).await.expect("delivered");
    assert_eq!(dir.select_now(), Err(EngineError::DirectoryClosed));
    assert_eq!(dir.snapshot().err(), Some(EngineError::DirectoryClosed));
    assert!(!dir.is_open());
}
