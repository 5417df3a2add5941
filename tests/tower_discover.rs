//! `Directory::discover` (feature `tower`): the directory as a tower
//! discovery stream, driven through the engine and its embedded registry.
//! Endpoints arriving are inserts, leaving are removes, a restart of an
//! instance (a new incarnation) is both, and a closed directory removes
//! everything and ends the stream.

#![cfg(feature = "tower")]

mod common;

use std::time::Duration;

use futures::StreamExt;
use steadfast::{Endpoint, Incarnation, Registry};
use tower::discover::Change;

use common::{instance, metadata, settle, Fixture};

type Discover = steadfast::DirectoryDiscover<fn(&Endpoint) -> u16, u16>;

/// The next change, within a bounded (virtual) wait.
async fn next(d: &mut Discover) -> Option<Change<String, u16>> {
    tokio::time::timeout(Duration::from_secs(5), d.next())
        .await
        .expect("a change within 5 s")
        .map(|c| c.unwrap())
}

fn port_of(endpoint: &Endpoint) -> u16 {
    endpoint.instance.port()
}

#[actix_rt::test]
async fn inserts_removes_restarts_and_the_end() {
    let fx = Fixture::start();
    let info = metadata(common::APP, 9000, "a");
    fx.fetcher.serve(info.clone());
    let dir = fx.subscribe().await;
    let mut d: Discover = dir.discover(port_of as fn(&Endpoint) -> u16);

    fx.registry.register(instance(&info, 8001)).await.unwrap();
    fx.registry.register(instance(&info, 8002)).await.unwrap();
    settle().await;
    let mut inserted = Vec::new();
    while inserted.len() < 2 {
        match next(&mut d).await {
            Some(Change::Insert(_, port)) => inserted.push(port),
            other => panic!("expected inserts, got {other:?}"),
        }
    }
    inserted.sort_unstable();
    assert_eq!(inserted, vec![8001, 8002]);

    // One leaves: one remove, nothing else.
    fx.registry.unregister(instance(&info, 8002)).await.unwrap();
    settle().await;
    assert!(
        matches!(next(&mut d).await, Some(Change::Remove(k)) if k.starts_with("127.0.0.1:8002 "))
    );

    // 8001 restarts (a new incarnation): its old endpoint goes, the new comes.
    let mut restarted = instance(&info, 8001);
    let mut rng = rand::thread_rng();
    Incarnation::new(42, &mut rng).stamp(&mut restarted.metadata);
    fx.registry.register(restarted).await.unwrap();
    settle().await;
    assert!(
        matches!(next(&mut d).await, Some(Change::Remove(k)) if k.starts_with("127.0.0.1:8001 "))
    );
    assert!(
        matches!(next(&mut d).await, Some(Change::Insert(k, 8001)) if k.contains("export-ms=42"))
    );

    // The engine stops: everything is removed, then the stream ends.
    fx.engine.shutdown().await;
    settle().await;
    assert!(matches!(next(&mut d).await, Some(Change::Remove(_))));
    assert!(next(&mut d).await.is_none());
}
