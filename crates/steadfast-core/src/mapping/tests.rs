//! Unit tests of the mapping follower on a hand-stepped clock.

use super::*;
use crate::backoff::BackoffPolicy;

fn policy() -> RecoverPolicy {
    RecoverPolicy::new(BackoffPolicy {
        jitter: 0.0,
        ..BackoffPolicy::default()
    })
}

fn set(version: u64, apps: &[&str]) -> Result<MappingEvent, RegistryError> {
    Ok(MappingEvent {
        version: Version::at(version),
        apps: apps.iter().map(|a| a.to_string()).collect(),
    })
}

fn down() -> RegistryError {
    RegistryError::Unavailable("down".into())
}

fn open_token(actions: &[MappingAction]) -> MappingToken {
    match actions {
        [MappingAction::OpenWatch { token }] => *token,
        other => panic!("expected one open, got {other:?}"),
    }
}

fn timer(actions: &[MappingAction]) -> (MappingToken, Duration) {
    actions
        .iter()
        .find_map(|a| match a {
            MappingAction::ArmTimer { token, delay } => Some((*token, *delay)),
            _ => None,
        })
        .expect("a timer")
}

fn add(a: &str) -> MappingAction {
    MappingAction::AddApp(a.into())
}

fn remove(a: &str) -> MappingAction {
    MappingAction::RemoveApp(a.into())
}

#[test]
fn diffs_each_whole_set_into_adds_and_removes() {
    let t0 = Instant::now();
    let mut m = MappingMachine::new(policy(), 1);
    assert_eq!(m.pending(), Some(Pending::waiting()), "nothing read yet");
    let w = open_token(&m.start());
    assert!(m.on_opened(w).is_empty());
    assert_eq!(
        m.on_item(w, set(3, &["a"]), t0),
        vec![add("a"), MappingAction::StatusChanged]
    );
    assert_eq!(m.pending(), None);
    assert_eq!(m.on_item(w, set(4, &["a", "b"]), t0), vec![add("b")]);
    assert_eq!(m.on_item(w, set(5, &["b"]), t0), vec![remove("a")]);
    assert!(
        m.on_item(w, set(2, &["x"]), t0).is_empty(),
        "older than held"
    );
    assert_eq!(m.apps().collect::<Vec<_>>(), vec!["b"]);
    assert_eq!(
        m.on_item(w, set(6, &[]), t0),
        vec![remove("b")],
        "an empty set removes everything"
    );
    assert_eq!(m.pending(), None, "an empty, healthy read is the truth");
}

#[test]
fn open_failures_retry_on_the_policy_and_the_status_names_them() {
    let t0 = Instant::now();
    let mut m = MappingMachine::new(policy(), 1);
    let w = open_token(&m.start());
    let a = m.on_open_failed(w, down(), t0);
    assert!(a.contains(&MappingAction::StatusChanged));
    let (t, delay) = timer(&a);
    assert_eq!(delay, Duration::from_secs(1));
    let p = m.pending().expect("pending");
    let f = p.mapping.expect("the mapping read is failing");
    assert_eq!((f.since, f.attempts, f.last_error), (t0, 1, down()));
    assert!(m.on_timer(t + 100).is_empty(), "a stale timer");
    let t1 = t0 + delay;
    let w2 = open_token(&m.on_timer(t));
    assert!(m.on_open_failed(w, down(), t1).is_empty(), "a stale open");
    let (t2, delay) = timer(&m.on_open_failed(w2, RegistryError::Timeout, t1));
    assert_eq!(delay, Duration::from_secs(2), "the schedule grows");
    let f = m.pending().unwrap().mapping.unwrap();
    assert_eq!((f.since, f.attempts), (t0, 2), "since the first failure");
    assert_eq!(f.last_error, RegistryError::Timeout);
    let w3 = open_token(&m.on_timer(t2));
    m.on_opened(w3);
    let a = m.on_item(w3, set(1, &["a"]), t1 + delay);
    assert_eq!(a, vec![add("a"), MappingAction::StatusChanged]);
    assert_eq!(m.failure(), None);
    assert_eq!(m.pending(), None);
}

#[test]
fn err_items_keep_the_stream_and_the_apps_an_end_reopens() {
    let t0 = Instant::now();
    let mut m = MappingMachine::new(policy(), 1);
    let w = open_token(&m.start());
    m.on_opened(w);
    m.on_item(w, set(1, &["a"]), t0);
    assert_eq!(
        m.on_item(w, Err(down()), t0),
        vec![MappingAction::StatusChanged],
        "unhealthy: no reopen, no removal"
    );
    assert_eq!(m.apps().collect::<Vec<_>>(), vec!["a"]);
    // The apps are kept and served; the status still names the failing
    // read (it used to hide it once apps were known).
    let failing = m.pending().and_then(|p| p.mapping).expect("named");
    assert_eq!(failing.last_error, down());
    assert_eq!(Some(&failing), m.failure());
    assert_eq!(
        m.on_item(w, set(2, &["a"]), t0),
        vec![MappingAction::StatusChanged],
        "healed"
    );
    let a = m.on_end(w, t0);
    let (t, delay) = timer(&a);
    assert_eq!(delay, Duration::from_secs(1));
    assert!(m.on_item(w, set(3, &[]), t0).is_empty(), "the old stream");
    let w2 = open_token(&m.on_timer(t));
    assert_ne!(w, w2);
    m.on_opened(w2);
    // A new stream may start below the old one's version (a wiped store).
    assert_eq!(m.on_item(w2, set(1, &["b"]), t0), {
        vec![remove("a"), add("b"), MappingAction::StatusChanged]
    });
}

#[test]
fn an_empty_mapping_that_then_fails_is_pending_again() {
    let t0 = Instant::now();
    let mut m = MappingMachine::new(policy(), 1);
    let w = open_token(&m.start());
    m.on_opened(w);
    m.on_item(w, set(1, &[]), t0);
    assert_eq!(m.pending(), None);
    m.on_end(w, t0);
    let p = m.pending().expect("no app and the read fails");
    assert!(p.mapping.is_some());
}

#[test]
fn final_errors_give_up_and_close_detaches_everything() {
    let t0 = Instant::now();
    let mut m = MappingMachine::new(policy(), 1);
    let w = open_token(&m.start());
    let unsupported = RegistryError::Unsupported("interface mappings".into());
    let a = m.on_open_failed(w, unsupported.clone(), t0);
    assert_eq!(a, vec![MappingAction::StatusChanged], "no retry");
    assert!(m.gave_up());
    let f = m.pending().unwrap().mapping.unwrap();
    assert_eq!(f.last_error, unsupported);
    assert!(m.start().is_empty(), "a restart does not retry either");

    let mut m = MappingMachine::new(policy(), 1);
    let w = open_token(&m.start());
    m.on_opened(w);
    m.on_item(w, set(1, &["a", "b"]), t0);
    assert_eq!(
        m.close(),
        vec![
            MappingAction::DropWatch { token: w },
            remove("a"),
            remove("b")
        ]
    );
    assert!(m.on_item(w, set(2, &["c"]), t0).is_empty());
    assert!(m.start().is_empty());
    assert_eq!(
        m.on_opened(w),
        vec![MappingAction::DropWatch { token: w }],
        "a late open after close is dropped"
    );
}

#[test]
fn a_restart_keeps_the_apps_and_reopens() {
    let t0 = Instant::now();
    let mut m = MappingMachine::new(policy(), 1);
    let w = open_token(&m.start());
    m.on_opened(w);
    m.on_item(w, set(1, &["a"]), t0);
    let w2 = open_token(&m.start());
    assert!(m.on_item(w, set(2, &[]), t0).is_empty(), "the old stream");
    m.on_opened(w2);
    assert!(m.on_item(w2, set(2, &["a"]), t0).is_empty(), "no change");
}

#[test]
fn a_re_created_follower_reports_only_what_changed_since_its_predecessor_reported() {
    let t0 = Instant::now();
    let mut old = MappingMachine::new(policy(), 1);
    let w = open_token(&old.start());
    old.on_opened(w);
    old.on_item(w, set(3, &["a", "b"]), t0);
    // The old actor panicked; its replacement knows what it told the
    // coordinator and nothing else (no stream, no schedule).
    let apps = old.apps().map(str::to_string);
    let mut m = MappingMachine::new(policy(), 1).resuming(apps, old.answered());
    assert_eq!(m.pending(), None, "answered before: no pending state");
    let w = open_token(&m.start());
    assert!(m.on_opened(w).is_empty());
    // While it was down, a left and c came: exactly that is reported.
    assert_eq!(
        m.on_item(w, set(5, &["b", "c"]), t0),
        vec![remove("a"), add("c")]
    );
    // An unanswered predecessor: the first read still says so.
    let mut m = MappingMachine::new(policy(), 1).resuming(Vec::new(), false);
    let w = open_token(&m.start());
    m.on_opened(w);
    assert_eq!(
        m.on_item(w, set(1, &["a"]), t0),
        vec![add("a"), MappingAction::StatusChanged]
    );
}
