//! A handler panic in the cache actor re-creates it under its supervisor:
//! waiters are answered or asked again, flights re-run, and the actor keeps
//! serving. Virtual time inside an actix System.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::{self, BoxFuture};
use steadfast_core::MetadataFetcher;

use super::*;

/// Test-only: panics inside the handler; with `half_done`, only after the
/// cache machine took a request whose flight record is never written.
#[derive(Message)]
#[rtype(result = "()")]
struct PanicNow {
    half_done: Option<(CacheKey, WeakRecipient<MetadataFetched>)>,
}

impl Handler<PanicNow> for CacheActor {
    type Result = ();
    fn handle(&mut self, msg: PanicNow, ctx: &mut Self::Context) {
        self.contained(ctx, |act, _| {
            if let Some((key, reply)) = msg.half_done {
                let w = Waiter {
                    resolver: 9,
                    token: 99,
                    reply,
                };
                let _ = act.cache.request(key, w);
            }
            panic!("injected handler panic");
        });
    }
}

/// Serves revision "ok" at once and hangs on every other one.
#[derive(Default)]
struct Fake(AtomicUsize);

impl MetadataFetcher for Fake {
    fn fetch(
        &self,
        _: &ServiceInstance,
        revision: &str,
    ) -> BoxFuture<'static, Result<MetadataInfo, FetchError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        if revision == "ok" {
            let mut info = MetadataInfo::new("app", []);
            info.revision = "ok".into();
            Box::pin(future::ready(Ok(info)))
        } else {
            Box::pin(future::pending())
        }
    }
}

/// Answers received: (token, result).
type Answers = Arc<Mutex<Vec<(u64, Result<Arc<MetadataInfo>, FetchError>)>>>;

/// Collects the answers it gets.
struct Sink(Answers);

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<MetadataFetched> for Sink {
    type Result = ();
    fn handle(&mut self, msg: MetadataFetched, _: &mut Self::Context) {
        self.0.lock().unwrap().push((msg.token, msg.result));
    }
}

fn key(rev: &str) -> CacheKey {
    ("app".into(), rev.into())
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[actix_rt::test]
async fn a_handler_panic_restarts_the_cache_with_its_flights_resynced() {
    tokio::time::pause();
    let stats = Arc::new(EngineStats::default());
    let fetcher = Arc::new(Fake::default());
    let (f, st) = (fetcher.clone(), stats.clone());
    let cache = Supervisor::start(move |_| CacheActor::new(f, 8, FetchPolicy::default(), st));
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = Sink(got.clone()).start();
    let ask = |rev: &str, token: u64| FetchMetadata {
        key: key(rev),
        candidates: vec![ServiceInstance::new("app", "h", 1)],
        resolver: 1,
        token,
        reply: sink.downgrade().recipient(),
    };
    cache.do_send(ask("hung", 1));
    settle().await;
    assert_eq!(fetcher.0.load(Ordering::SeqCst), 1);

    // A panic after the machine took a request but before its flight
    // record existed: the restart answers that waiter instead of leaving it
    // waiting forever, and re-runs the hung flight.
    cache.do_send(PanicNow {
        half_done: Some((key("lost"), sink.downgrade().recipient())),
    });
    settle().await;
    let s = stats.snapshot();
    assert_eq!((s.handler_panics, s.restarts), (1, 1), "{s:?}");
    assert_eq!(fetcher.0.load(Ordering::SeqCst), 2, "hung flight re-run");
    {
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, 99);
        assert!(matches!(got[0].1, Err(FetchError::Panicked(_))));
    }
    // It keeps serving, and its flights keep their deadline.
    cache.do_send(ask("ok", 2));
    settle().await;
    assert!(got
        .lock()
        .unwrap()
        .iter()
        .any(|(t, r)| *t == 2 && r.is_ok()));
    // Past the 5 s whole-fetch deadline, on the paused clock.
    tokio::time::advance(Duration::from_secs(6)).await;
    settle().await;
    let got = got.lock().unwrap();
    let hung: Vec<_> = got.iter().filter(|(t, _)| *t == 1).collect();
    assert_eq!(hung.len(), 1, "{got:?}");
    assert_eq!(hung[0].1, Err(FetchError::Timeout));
    assert_eq!(stats.snapshot().fetch_deadlines, 1);
}
