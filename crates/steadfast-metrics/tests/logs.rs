//! Log levels an operator expects: a revision that keeps failing warns once
//! (its state changed), its retries log at debug, its recovery at info.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use steadfast_actors::Engine;
use steadfast_core::Reference;
use steadfast_memory::MemoryRegistry;
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn lines(&self, level: &str, message: &str) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).to_string();
        text.lines()
            .filter(|l| l.contains(level) && l.contains(message))
            .count()
    }
}

#[actix_rt::test]
async fn a_failing_revision_warns_once_and_its_retries_log_at_debug() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let fetcher = ScriptedFetcher::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(7)
        .start()
        .unwrap();
    let info = MetadataBuilder::new("app")
        .service("demo.A", "tri", 20000)
        .build();
    fetcher.serve(info.clone());
    fetcher.fail_always(&info.revision);
    let dir = engine
        .subscribe(Reference::new("demo.A", "tri", ["app"]))
        .await
        .unwrap();
    registry.put(instance_for(&info, "127.0.0.1", 8001));
    // 1 s doubling to 30 s: 1 + 2 + 4 + 8 + 16 = 31 s are 5 retries.
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let attempts = fetcher.calls(&info.revision);
    assert!(attempts >= 5, "retried: {attempts}");
    assert_eq!(buf.lines("WARN", "metadata unresolved; retrying"), 1);
    assert!(buf.lines("DEBUG", "metadata still unresolved; retrying") >= 4);
    assert!(buf.lines("DEBUG", "metadata fetch failed") >= 5);
    // Each attempt has its span, with its candidate and outcome.
    let attempt = "fetch{candidate=127.0.0.1:8001 hedged=false outcome=\"unreachable\"}";
    assert!(buf.lines("TRACE", attempt) >= 5);

    fetcher.heal(&info.revision);
    for _ in 0..400 {
        if dir.select().is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(dir.select().is_ok());
    assert_eq!(buf.lines("INFO", "metadata resolved after failures"), 1);
    assert_eq!(buf.lines("WARN", "metadata unresolved; retrying"), 1);
    engine.shutdown().await;
}
