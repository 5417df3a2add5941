//! Interface -> app mapping on the embedded registry, in virtual time: the
//! provider records its app at export (retried until it lands), a reference
//! without apps follows the mapping (apps appear and are attached, leave and
//! are detached), and while the mapping cannot be read the status says so.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{EmptyReason, Reference, RegistryError};
use steadfast_core::Pending;

/// A reference to `demo.Greeter` over `tri` naming no app.
fn unnamed() -> Reference {
    Reference::new(IFACE, "tri", Vec::<String>::new())
}

/// An export of `app` on `port` serving `demo.Greeter`.
fn spec_of(app: &str, port: u16) -> steadfast::ExportSpec {
    let mut spec = export_spec(port);
    spec.app = app.into();
    spec
}

/// `greeter` exported on 9100, and a ready directory following the
/// mapping of its interface.
async fn exported_and_followed(fx: &Fixture) -> (steadfast::ExportHandle, steadfast::Directory) {
    let export = fx.engine.export(export_spec(9100)).await.unwrap();
    let dir = fx.engine.subscribe(unnamed()).await.unwrap();
    wait_for(&dir, "ready", Duration::from_secs(2), |v| {
        v.status.is_ready()
    })
    .await;
    (export, dir)
}

fn fixture() -> Fixture {
    tokio::time::pause();
    Fixture::start_full(|b, f| b.metadata_publisher(f.clone()))
}

#[actix_rt::test]
async fn export_records_the_app_for_its_interface_retrying_until_it_lands() {
    let fx = fixture();
    settle().await;
    let before = fx.engine.stats().actors_alive;
    fx.registry.set_down(true);
    let _exported = fx.engine.export(export_spec(9100)).await.unwrap();
    advance(Duration::from_secs(3)).await;
    assert!(fx.registry.mapped_apps(IFACE).is_empty());
    let failed = fx.registry.mapping_register_calls();
    assert!(
        (2..=3).contains(&failed),
        "retried on the registry backoff (1 s, 2 s): {failed} call(s)"
    );
    assert_eq!(fx.engine.stats().mapping_write_failures as usize, failed);
    fx.registry.set_down(false);
    advance(Duration::from_secs(5)).await;
    assert_eq!(fx.registry.mapped_apps(IFACE), vec![APP.to_string()]);
    let landed = fx.registry.mapping_register_calls();
    advance(Duration::from_secs(120)).await;
    assert_eq!(
        fx.registry.mapping_register_calls(),
        landed,
        "no call once it landed"
    );
    assert_eq!(
        fx.engine.stats().actors_alive,
        before + 1,
        "the export's actor only: the mapping is a key of the registrar, no actor of its own"
    );
}

#[actix_rt::test]
async fn a_consumer_without_apps_finds_the_provider_and_follows_the_mapping() {
    let fx = fixture();
    let _a = fx.engine.export(spec_of(APP, 9100)).await.unwrap();
    let dir = fx.engine.subscribe(unnamed()).await.unwrap();
    let v = wait_for(&dir, "the mapped provider", Duration::from_secs(2), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![9100]);
    assert_eq!(fx.engine.stats().resolvers_alive, 1);

    // A second app appears in the mapping: added.
    let _b = fx.engine.export(spec_of("greeter-b", 9200)).await.unwrap();
    let v = wait_for(&dir, "both apps", Duration::from_secs(2), |v| {
        ports(v) == vec![9100, 9200]
    })
    .await;
    assert!(v.status.is_ready());
    assert_eq!(fx.engine.stats().resolvers_alive, 2);
    assert_eq!(
        fx.registry.mapped_apps(IFACE),
        vec![APP.to_string(), "greeter-b".to_string()]
    );

    // Removed from the mapping: detached, its resolver released, though its
    // instance is still registered.
    fx.registry.remove_mapping(IFACE, "greeter-b");
    let v = wait_for(&dir, "greeter-b detached", Duration::from_secs(2), |v| {
        ports(v) == vec![9100]
    })
    .await;
    assert!(v.status.is_ready());
    assert_eq!(fx.registry.instances("greeter-b").len(), 1);
    settle().await;
    assert_eq!(fx.engine.stats().resolvers_alive, 1);

    // The last app leaves: the status says the mapping names none.
    fx.registry.remove_mapping(IFACE, APP);
    wait_for(&dir, "no app", Duration::from_secs(2), |v| {
        v.status == steadfast::DirectoryStatus::Empty(EmptyReason::NoProviderApp)
    })
    .await;
    settle().await;
    assert_eq!(fx.engine.stats().resolvers_alive, 0);
    assert_eq!(fx.registry.mapping_watch_calls(), 1, "one watch throughout");
}

#[actix_rt::test]
async fn mapping_unavailable_then_back_and_the_status_says_so_meanwhile() {
    let fx = fixture();
    let _a = fx.engine.export(export_spec(9100)).await.unwrap();
    settle().await;
    assert_eq!(fx.registry.mapped_apps(IFACE), vec![APP.to_string()]);
    fx.registry.set_down(true);
    let dir = fx.engine.subscribe(unnamed()).await.unwrap();
    advance(Duration::from_secs(4)).await;
    let status = dir.view().await.unwrap().status;
    let steadfast::DirectoryStatus::Empty(EmptyReason::Pending(Pending {
        mapping: Some(failure),
        subscribe: None,
    })) = &status
    else {
        panic!("expected a failing mapping read, got {status:?}");
    };
    assert!((2..=3).contains(&failure.attempts), "1 s, 2 s: {failure:?}");
    assert!(matches!(failure.last_error, RegistryError::Unavailable(_)));
    assert!(status
        .to_string()
        .contains("interface mapping read failing"));
    assert_eq!(
        fx.engine.stats().mapping_read_failures,
        failure.attempts as u64
    );
    let calls = fx.registry.mapping_watch_calls();
    assert!((2..=3).contains(&calls), "{calls} mapping watch call(s)");

    fx.registry.set_down(false);
    let v = wait_for(&dir, "back", Duration::from_secs(10), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![9100]);
}

#[actix_rt::test]
async fn known_apps_survive_a_broken_mapping_watch_which_is_watched_again() {
    let fx = fixture();
    let (_a, dir) = exported_and_followed(&fx).await;
    fx.registry.report_mapping_errors(IFACE);
    settle().await;
    assert_eq!(
        fx.registry.mapping_watch_calls(),
        1,
        "an Err item keeps the stream"
    );
    fx.registry.set_down(true);
    fx.registry.end_mapping_watches(IFACE);
    advance(Duration::from_secs(4)).await;
    let v = dir.view().await.unwrap();
    assert_eq!(ports(&v), vec![9100], "apps known stay attached");
    // Served, and the status says the mapping read is failing.
    match &v.status {
        steadfast::DirectoryStatus::Ready {
            mapping: Some(f), ..
        } => assert!(f.attempts >= 1, "{f:?}"),
        other => panic!("ready and naming the failing mapping read: {other:?}"),
    }
    assert!(
        v.status
            .to_string()
            .contains("interface mapping read failing"),
        "{}",
        v.status
    );
    fx.registry.set_down(false);
    fx.registry.put_mapping(IFACE, "late");
    advance(Duration::from_secs(10)).await;
    let v = dir.view().await.unwrap();
    assert!(
        matches!(
            v.status,
            steadfast::DirectoryStatus::Ready { mapping: None, .. }
        ),
        "healthy again: {}",
        v.status
    );
    assert!(fx.registry.mapping_watch_calls() >= 3);
    assert_eq!(
        fx.registry.mapping_watcher_count(IFACE),
        1,
        "watched again, once"
    );
    assert_eq!(
        fx.engine.stats().resolvers_alive,
        2,
        "the late app was read"
    );
}

#[actix_rt::test]
async fn a_reference_without_apps_is_its_own_subscription() {
    let fx = fixture();
    let _a = fx.engine.export(export_spec(9100)).await.unwrap();
    let named = fx.subscribe().await;
    let mapped = fx.engine.subscribe(unnamed()).await.unwrap();
    for d in [&named, &mapped] {
        wait_for(d, "ready", Duration::from_secs(2), |v| v.status.is_ready()).await;
    }
    assert_eq!(fx.engine.stats().directories_alive, 2);
    assert_eq!(fx.engine.stats().resolvers_alive, 1, "one resolver per app");
    assert!(fx.engine.unsubscribe(&unnamed()).await.unwrap());
    settle().await;
    assert_eq!(fx.engine.stats().directories_alive, 1);
    assert_eq!(fx.engine.stats().resolvers_alive, 1, "still counted once");
    assert_eq!(fx.registry.mapping_watcher_count(IFACE), 0, "watch dropped");
    assert!(named.view().await.unwrap().status.is_ready());
    assert!(fx.engine.unsubscribe(&reference()).await.unwrap());
    settle().await;
    assert_eq!(fx.engine.stats().resolvers_alive, 0);

    // Shutdown stops the mapping actors too.
    let again = fx.engine.subscribe(unnamed()).await.unwrap();
    wait_for(&again, "ready", Duration::from_secs(2), |v| {
        v.status.is_ready()
    })
    .await;
    fx.engine.shutdown().await;
    settle().await;
    let s = fx.engine.stats();
    assert_eq!(
        (s.actors_alive, s.watches_active, s.timers_pending),
        (0, 0, 0)
    );
}

#[actix_rt::test]
async fn a_panicking_mapping_watch_is_contained_and_retried() {
    let fx = fixture();
    let _a = fx.engine.export(export_spec(9100)).await.unwrap();
    fx.registry.panic_next_mapping_watches(1);
    let dir = fx.engine.subscribe(unnamed()).await.unwrap();
    settle().await;
    let status = dir.view().await.unwrap().status;
    assert!(
        matches!(&status, steadfast::DirectoryStatus::Empty(EmptyReason::Pending(Pending {
            mapping: Some(f), ..
        })) if matches!(f.last_error, RegistryError::Panicked(_))),
        "{status:?}"
    );
    let v = wait_for(&dir, "ready after the retry", Duration::from_secs(3), |v| {
        v.status.is_ready()
    })
    .await;
    assert_eq!(ports(&v), vec![9100]);
    assert_eq!(fx.registry.mapping_watch_calls(), 2);
    assert_eq!(fx.engine.stats().mapping_read_failures, 1);
}

#[actix_rt::test]
async fn the_mapping_is_a_registrar_key_restored_after_a_session_loss_and_kept_at_shutdown() {
    let fx = fixture();
    let _exported = fx.engine.export(export_spec(9100)).await.unwrap();
    settle().await;
    assert_eq!(fx.registry.mapped_apps(IFACE), vec![APP.to_string()]);
    let regs = fx.engine.registrations().await.unwrap();
    assert!(
        regs.iter()
            .any(|(k, s)| k.kind == steadfast_core::RecordKind::Mapping
                && k.id == IFACE
                && *s == steadfast_core::RegistrationState::Registered),
        "{regs:?}"
    );
    // A wiped backend loses the mapping with the session: the registrar
    // puts it back within the spread, like every registration.
    fx.registry.remove_mapping(IFACE, APP);
    let before = fx.registry.mapping_register_calls();
    fx.registry.lose_session();
    advance(Duration::from_secs(6)).await;
    assert_eq!(fx.registry.mapped_apps(IFACE), vec![APP.to_string()]);
    assert_eq!(fx.registry.mapping_register_calls(), before + 1, "once");
    // Persistent: shutdown unregisters the instance but leaves the mapping.
    fx.engine.shutdown().await;
    assert_eq!(fx.registry.mapped_apps(IFACE), vec![APP.to_string()]);
    assert!(fx.registry.instances(APP).is_empty());
}

#[actix_rt::test]
async fn a_mapping_follower_that_panicked_is_re_created_and_reports_what_changed_meanwhile() {
    let fx = fixture();
    let (_a, dir) = exported_and_followed(&fx).await;
    assert_eq!(fx.engine.stats().resolvers_alive, 1);
    let watches = fx.registry.mapping_watch_calls();
    // The follower's next handler panics: the mapping's next change.
    fx.engine
        .drill_panic(steadfast_actors::RestartTarget::Mapping(IFACE.into()))
        .await
        .unwrap();
    let _b = fx.engine.export(spec_of("other", 9200)).await.unwrap();
    fx.registry.remove_mapping(IFACE, APP);
    advance(Duration::from_secs(2)).await;
    let s = fx.engine.stats();
    assert_eq!((s.handler_panics, s.restarts), (1, 1), "{s:?}");
    // Re-created from its inputs: it watched again and reported exactly
    // the difference from what the coordinator had been told: the first
    // app detached (its resolver stopped), the other attached.
    assert!(fx.registry.mapping_watch_calls() > watches);
    assert_eq!(fx.registry.mapping_watcher_count(IFACE), 1, "one watch");
    let v = wait_for(&dir, "the other app served", Duration::from_secs(5), |v| {
        ports(v) == vec![9200]
    })
    .await;
    assert!(v.status.is_ready(), "{}", v.status);
    assert_eq!(
        fx.engine.stats().resolvers_alive,
        1,
        "the first app's resolver stopped"
    );
}
