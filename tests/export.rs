//! Provider export through the engine: the record lands even when the
//! registry refuses the first registers, consumers resolve it, and a
//! graceful shutdown announces closing, unregisters and drains.

mod common;

use std::time::Duration;

use common::*;

#[actix_rt::test]
async fn export_retries_register_until_it_lands_and_consumers_resolve_it() {
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| b.metadata_publisher(f.clone()));
    fx.registry.fail_next_registers(2);
    let exported = fx.engine.export(export_spec(9100)).await.unwrap();
    let dir = fx.subscribe().await;
    settle().await;
    assert!(!exported.is_registered().await.unwrap());
    assert!(fx.registry.instances(APP).is_empty());
    assert_eq!(fx.engine.stats().register_failures, 1);

    // 1 s then 2 s (+jitter) later the third register lands.
    let v = wait_for(
        &dir,
        "exported instance resolved",
        Duration::from_secs(5),
        |v| v.status.is_ready(),
    )
    .await;
    assert!(exported.is_registered().await.unwrap());
    assert_eq!(ports(&v), vec![9100]);
    let record = &fx.registry.instances(APP)[0];
    assert_eq!(
        record.revision(),
        Some(exported.metadata().revision.as_str())
    );
    let inc = record.incarnation().expect("incarnation stamped");
    let url = &v.endpoints[0];
    assert_eq!(
        url.param("steadfast.boot-id"),
        Some(inc.boot_id.to_string()),
        "incarnation reaches the URL"
    );
    assert_eq!(fx.engine.stats().register_failures, 2);
}

#[actix_rt::test]
async fn graceful_shutdown_announces_unregisters_and_drains() {
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| b.metadata_publisher(f.clone()));
    let exported = fx.engine.export(export_spec(9200)).await.unwrap();
    let dir = fx.subscribe().await;
    wait_for(&dir, "ready", Duration::from_secs(1), |v| {
        v.status.is_ready()
    })
    .await;

    let request = exported.in_flight().enter().expect("serving");
    let handle = exported.clone();
    let stop = actix_rt::spawn(async move { handle.shutdown(Duration::from_secs(10)).await });
    settle().await;
    assert!(
        exported.in_flight().enter().is_none(),
        "closing refuses new requests"
    );
    assert!(
        fx.registry.instances(APP).is_empty(),
        "unregistered before draining"
    );
    let v = dir.view().await.unwrap();
    assert!(v.endpoints.is_empty(), "consumers stop picking it");
    assert!(!stop.is_finished(), "waits for the in-flight request");
    advance(Duration::from_secs(2)).await;
    drop(request);
    let report = stop.await.unwrap().unwrap();
    assert!(report.unregistered && report.drained);
    settle().await;
    let alive = fx.engine.stats().actors_alive;
    assert_eq!(
        alive, 7,
        "export actor gone: registry, registrar, cache, lookup, engine, resolver, directory"
    );
}

#[actix_rt::test]
async fn drain_is_bounded() {
    let fx = Fixture::start();
    let exported = fx.engine.export(export_spec(9300)).await.unwrap();
    settle().await;
    let _stuck = exported.in_flight().enter().unwrap();
    let report = exported.shutdown(Duration::from_secs(3)).await.unwrap();
    assert!(report.unregistered);
    assert!(!report.drained, "gave up after the drain limit");
    settle().await;
    assert_eq!(
        fx.engine.stats().actors_alive,
        5,
        "registry, registrar, cache, lookup, engine only"
    );
}

#[actix_rt::test]
async fn identical_instances_share_one_revision_and_one_fetch_per_consumer() {
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| b.metadata_publisher(f.clone()));
    let dir = fx.subscribe().await;
    let mut exports = Vec::new();
    for port in [9401, 9402, 9403] {
        let mut s = export_spec(9400);
        s.port = port;
        exports.push(fx.engine.export(s).await.unwrap());
    }
    let v = wait_for(&dir, "three endpoints", Duration::from_secs(5), |v| {
        v.endpoints.len() == 3
    })
    .await;
    let revisions: std::collections::BTreeSet<String> = exports
        .iter()
        .map(|e| e.metadata().revision.clone())
        .collect();
    assert_eq!(revisions.len(), 1, "identical definitions, one revision");
    let revision = revisions.into_iter().next().unwrap();
    assert_eq!(fx.fetcher.calls(&revision), 1, "one fetch for all three");
    let boots: std::collections::BTreeSet<Option<String>> = v
        .endpoints
        .iter()
        .map(|u| u.param("steadfast.boot-id"))
        .collect();
    assert_eq!(boots.len(), 3, "each boot keeps its own incarnation");

    // A boot that deploys the same definitions again costs no fetch.
    exports
        .pop()
        .unwrap()
        .shutdown(Duration::ZERO)
        .await
        .unwrap();
    let mut again = export_spec(9400);
    again.port = 9403;
    fx.engine.export(again).await.unwrap();
    wait_for(&dir, "restarted boot served", Duration::from_secs(5), |v| {
        v.endpoints.len() == 3
    })
    .await;
    assert_eq!(
        fx.fetcher.calls(&revision),
        1,
        "a same-definition restart is cached"
    );
}

#[actix_rt::test]
async fn stopping_one_of_identical_exports_keeps_their_shared_revision_served() {
    use steadfast::MetadataFetcher;
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| b.metadata_publisher(f.clone()));
    let mut exports = Vec::new();
    for port in [9501, 9502] {
        let mut s = export_spec(9500);
        s.port = port;
        exports.push(fx.engine.export(s).await.unwrap());
    }
    settle().await;
    let revision = exports[0].metadata().revision.clone();
    let record = exports[1].instance().clone();
    exports[0].shutdown(Duration::ZERO).await.unwrap();
    // A consumer with a cold cache still resolves the live instance.
    let cold = steadfast::Engine::builder()
        .registry(fx.registry.clone())
        .fetcher(fx.fetcher.clone())
        .seed(9)
        .start()
        .unwrap();
    let dir = cold.subscribe(reference()).await.unwrap();
    let v = wait_for(
        &dir,
        "the live twin resolved",
        Duration::from_secs(5),
        |v| v.status.is_ready(),
    )
    .await;
    assert_eq!(ports(&v), vec![9500]);
    assert!(fx.fetcher.fetch(&record, &revision).await.is_ok());
    // The last one to stop withdraws it.
    exports[1].shutdown(Duration::ZERO).await.unwrap();
    assert!(
        fx.fetcher.fetch(&record, &revision).await.is_err(),
        "withdrawn with the last export"
    );
    cold.shutdown().await;
}

/// A publisher refusing its first `n` publishes (then the scripted one).
struct Refusing {
    left: std::sync::atomic::AtomicUsize,
    inner: steadfast_testkit::ScriptedFetcher,
}

impl steadfast::MetadataPublisher for Refusing {
    fn publish(
        &self,
        info: steadfast::MetadataInfo,
    ) -> futures::future::BoxFuture<'static, Result<(), steadfast::PublishError>> {
        use std::sync::atomic::Ordering;
        let refused = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refused {
            return Box::pin(async { Err(steadfast::PublishError::Unavailable("refused".into())) });
        }
        self.inner.publish(info)
    }

    fn withdraw(
        &self,
        app: &str,
        revision: &str,
    ) -> futures::future::BoxFuture<'static, Result<(), steadfast::PublishError>> {
        self.inner.withdraw(app, revision)
    }
}

#[actix_rt::test]
async fn an_export_restarted_after_a_panic_asserts_its_record_on_a_clean_schedule() {
    tokio::time::pause();
    let fx = Fixture::start_full(|b, f| {
        b.metadata_publisher(Refusing {
            left: 5.into(),
            inner: f.clone(),
        })
    });
    let exported = fx.engine.export(export_spec(9100)).await.unwrap();
    // Four refusals: the retries wait 1, 2, 4, then 8 s (+0-25 %).
    advance(Duration::from_secs(9)).await;
    assert!(!exported.is_registered().await.unwrap());
    assert_eq!(fx.engine.stats().register_failures, 4);
    // Re-created: a fresh schedule asserts the record at once; that fifth
    // publish is refused too, and the next try comes after the initial
    // delay (1 s), not after the grown one (16 s).
    fx.engine
        .force_restart(steadfast_actors::RestartTarget::Export(exported.id()))
        .await
        .unwrap();
    settle().await;
    assert_eq!(fx.engine.stats().register_failures, 5);
    advance(Duration::from_millis(1300)).await;
    assert!(
        exported.is_registered().await.unwrap(),
        "registered 1 s later"
    );
    assert_eq!(fx.registry.instances(APP).len(), 1);
    assert_eq!(fx.engine.stats().restarts, 1);
}
