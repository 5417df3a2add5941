//! The session-loss fault: trait registrations dropped, watches ended,
//! `SessionEvent::Lost` on every session stream.

use futures::executor::block_on;
use futures::{FutureExt, StreamExt};
use steadfast_core::{Registry, SessionEvent};

use crate::test_support::{inst, next_ok, watch};
use crate::MemoryRegistry;

#[test]
fn losing_the_session_drops_trait_registrations_ends_watches_and_tells_every_stream() {
    let reg = MemoryRegistry::new();
    let mut a = reg.sessions().expect("the memory registry has sessions");
    let mut b = reg.sessions().expect("one stream per caller");
    block_on(reg.register(inst("app", "h1", 1))).unwrap();
    block_on(reg.register(inst("app", "h2", 1))).unwrap();
    block_on(reg.unregister(inst("app", "h2", 1))).unwrap();
    reg.put(inst("app", "other", 1));
    assert_eq!(reg.session_records(), 1);
    let mut w = watch(&reg, "app");
    next_ok(&mut w);

    assert_eq!(reg.lose_session(), 1);
    let ids: Vec<String> = reg.instances("app").into_iter().map(|i| i.id).collect();
    assert_eq!(ids, vec!["other:1".to_string()], "direct puts are kept");
    assert_eq!(reg.session_records(), 0);
    for s in [&mut a, &mut b] {
        assert!(matches!(
            s.next().now_or_never(),
            Some(Some(SessionEvent::Lost { .. }))
        ));
    }
    // The watch saw the removal, then ended.
    let mut ended = false;
    for _ in 0..4 {
        match w.next().now_or_never() {
            Some(None) => {
                ended = true;
                break;
            }
            Some(Some(_)) => {}
            None => break,
        }
    }
    assert!(ended, "the live watch ended");
    assert_eq!(reg.watcher_count("app"), 0);
}

#[test]
fn an_unread_session_stream_holds_one_loss_however_many_happen() {
    let reg = MemoryRegistry::new();
    let mut stream = reg.sessions().expect("a session stream");
    for _ in 0..1000 {
        reg.lose_session();
    }
    let first = block_on(stream.next()).expect("a loss");
    assert!(matches!(first, SessionEvent::Lost { .. }));
    // The rest collapsed into the one pending: nothing else is queued.
    assert!(
        stream.next().now_or_never().is_none(),
        "bounded: no backlog"
    );
    // The stream stays open: the next loss is told.
    reg.lose_session();
    assert!(matches!(
        block_on(stream.next()),
        Some(SessionEvent::Lost { .. })
    ));
}
