//! What the logs say through a registry outage: one WARN when it starts
//! (not one per app or per retry), and one INFO when every watch is current
//! again, on virtual time.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use steadfast::Reference;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every event at INFO or above: level and message.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<(Level, String)>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for Lines {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let level = *event.metadata().level();
        if level <= Level::INFO {
            let mut m = Message(String::new());
            event.record(&mut m);
            self.0.lock().unwrap().push((level, m.0));
        }
    }
}

#[actix_rt::test]
async fn an_outage_warns_once_and_its_end_is_an_info_line() {
    let lines = Lines::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let fx = Fixture::start();
    let apps = [APP, "other", "third"];
    let mut dirs = Vec::new();
    for (i, app) in apps.into_iter().enumerate() {
        let m = metadata(app, 20000, "t1");
        fx.fetcher.serve(m.clone());
        let dir = fx
            .engine
            .subscribe(Reference::new(IFACE, "tri", [app]))
            .await
            .unwrap();
        fx.registry.put(instance(&m, 8001 + i as u16));
        dirs.push(dir);
    }
    for dir in &dirs {
        wait_for(dir, "ready", Duration::from_millis(50), |v| {
            v.status.is_ready()
        })
        .await;
    }
    let before = lines.0.lock().unwrap().len();
    // Down for 60 s: every watch breaks, every re-open and probe fails.
    fx.registry.fail_next_watches(usize::MAX);
    fx.registry.fail_next_lists(usize::MAX);
    for app in apps {
        fx.registry.error_watches(app);
    }
    advance(Duration::from_secs(60)).await;
    for dir in &dirs {
        assert!(stale(&dir.view().await.unwrap()));
    }
    fx.registry.fail_next_watches(0);
    fx.registry.fail_next_lists(0);
    for dir in &dirs {
        wait_for(dir, "current", Duration::from_secs(5), |v| !stale(v)).await;
    }
    settle().await;
    let outage: Vec<(Level, String)> = lines.0.lock().unwrap()[before..].to_vec();
    eprintln!("{outage:#?}");
    let warns: Vec<_> = outage.iter().filter(|(l, _)| *l == Level::WARN).collect();
    assert_eq!(warns.len(), 1, "one WARN for the outage: {outage:#?}");
    assert!(
        warns[0].1.contains("serving the last known state"),
        "{warns:?}"
    );
    let recovered: Vec<_> = outage
        .iter()
        .filter(|(l, m)| *l == Level::INFO && m.contains("registry answering again"))
        .collect();
    assert_eq!(recovered.len(), 1, "one INFO at its end: {outage:#?}");
    fx.engine.shutdown().await;
}

/// A mapping read that keeps failing warns once (its retries at debug), and
/// the first read that answers says so at INFO.
#[actix_rt::test]
async fn a_failing_mapping_read_warns_once_and_its_recovery_is_an_info_line() {
    let lines = Lines::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let fx = Fixture::start();
    fx.registry.put_mapping(IFACE, APP);
    fx.registry.fail_next_mapping_watches(5);
    let _dir = fx
        .engine
        .subscribe(Reference::new(IFACE, "tri", Vec::<String>::new()))
        .await
        .unwrap();
    advance(Duration::from_secs(120)).await;
    let all: Vec<(Level, String)> = lines.0.lock().unwrap().clone();
    let count = |level: Level, text: &str| {
        all.iter()
            .filter(|(l, m)| *l == level && m.contains(text))
            .count()
    };
    assert_eq!(
        count(Level::WARN, "interface mapping read failed"),
        1,
        "{all:#?}"
    );
    assert_eq!(
        count(Level::INFO, "interface mapping readable again"),
        1,
        "{all:#?}"
    );
    fx.engine.shutdown().await;
}
