//! The whole engine on a real etcd frozen with SIGSTOP for 20 s (longer than
//! the providers' 10 s lease TTL, so etcd expires every lease when it
//! resumes, one revision per lease). The consumer must report stale within
//! its liveness deadline, never go empty while every provider is alive (the
//! mass expiry on resume is held while the providers re-register), resume
//! within its recovery probe's deadline of SIGCONT (well before the
//! backoff), and end with every provider served and nothing held. A second
//! app whose providers died during the freeze (their registry dropped, so
//! nothing re-registers) is held after SIGCONT, says so, is served for at
//! most the grace, and then empties with `RegistryEmpty`. Its leases run
//! out a few seconds after SIGCONT, when the consumer's watch is live
//! again, so etcd's revocations reach it one per revision: the hold must be
//! judged over the recovery window, not one snapshot at a time.
//!
//! Real time on a machine shared with other CPU-heavy work: every bound is
//! derived from the default configuration's deadlines with headroom, and
//! every measured figure is printed.

use std::time::{Duration, Instant};

use steadfast::{DirectoryStatus, DirectoryView, EmptyReason, Engine, Reference, Registry};
use steadfast_etcd::harness::{unique_prefix, EtcdServer};
use steadfast_etcd::{EtcdConfig, EtcdRegistry};
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const APP: &str = "greeter";
const IFACE: &str = "demo.Greeter";
const PROVIDERS: u16 = 3;
/// The app whose providers die during the freeze.
const GONE: &str = "sunset";
/// The default mass-removal grace.
const GRACE: Duration = Duration::from_secs(3);
/// Lease TTL of the second app's providers: granted just before the
/// freeze, their leases expire 3 s after SIGCONT.
const GONE_TTL: Duration = Duration::from_secs(23);
/// How long etcd stays frozen.
const FREEZE: Duration = Duration::from_secs(20);
/// How long the recovery is watched at least (leases expired, providers
/// re-registered, the second app's leases run out and every hold over).
const RECOVERY_WINDOW: Duration = Duration::from_secs(10);
/// Longest a wait polls before failing: it only bounds a failure.
const WAIT: Duration = Duration::from_secs(30);
/// Scheduling slack a bound keeps on a loaded machine.
const SLACK: Duration = Duration::from_secs(1);

/// Longest the default client takes to declare a frozen etcd dead when
/// every step runs to its deadline: the first probe after its cadence
/// (+25 % jitter), then `probe_failures` probes at their deadline, each
/// retried within a cadence.
fn liveness_deadline(c: &EtcdConfig) -> Duration {
    let every = c.liveness_probe_interval.expect("the default probes");
    every * 5 / 4 + (c.probe_timeout + every) * c.probe_failures
}

/// Longest a reported watch takes to deliver again once etcd answers: one
/// recovery probe (cadence +25 % jitter, its deadline) and the re-read
/// (one request deadline).
fn resume_deadline(c: &EtcdConfig) -> Duration {
    c.recover_probe_interval * 5 / 4 + c.probe_timeout + c.request_timeout
}

fn stale(v: &DirectoryView) -> bool {
    matches!(
        v.status,
        DirectoryStatus::Ready {
            stale_since: Some(_),
            ..
        }
    )
}

fn held(v: &DirectoryView) -> bool {
    matches!(&v.status, DirectoryStatus::Ready { held, .. } if !held.is_empty())
}

#[actix_rt::test]
async fn a_20s_freeze_never_empties_the_consumer_and_heals_within_its_resume_deadline() {
    let mut etcd = EtcdServer::start().await.expect("etcd starts");
    let prefix = unique_prefix();
    let providers = EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix))
        .expect("provider registry");
    let info = MetadataBuilder::new(APP)
        .service(IFACE, "tri", 20000)
        .build();
    let gone_info = MetadataBuilder::new(GONE)
        .service(IFACE, "tri", 20000)
        .build();
    let gone_providers = EtcdRegistry::new(
        EtcdConfig::new([etcd.endpoint()])
            .with_prefix(&prefix)
            .with_lease_ttl(GONE_TTL),
    )
    .expect("second provider registry");
    let fetcher = ScriptedFetcher::new();
    fetcher.serve(info.clone());
    fetcher.serve(gone_info.clone());
    let consumer = Engine::builder()
        .registry(
            EtcdRegistry::new(EtcdConfig::new([etcd.endpoint()]).with_prefix(&prefix)).unwrap(),
        )
        .fetcher(fetcher)
        .start()
        .unwrap();
    let dir = consumer
        .subscribe(Reference::new(IFACE, "tri", [APP]))
        .await
        .unwrap();
    let gone_dir = consumer
        .subscribe(Reference::new(IFACE, "tri", [GONE]))
        .await
        .unwrap();
    for port in 8001..8001 + PROVIDERS {
        providers
            .register(instance_for(&info, "127.0.0.1", port))
            .await
            .unwrap();
    }
    let end = Instant::now() + WAIT;
    while dir.view().await.unwrap().endpoints.len() < PROVIDERS as usize {
        assert!(Instant::now() < end, "providers never all served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The second app registers right before the freeze (fresh leases).
    for port in 9001..9001 + PROVIDERS {
        gone_providers
            .register(instance_for(&gone_info, "127.0.0.1", port))
            .await
            .unwrap();
    }
    while gone_dir.view().await.unwrap().endpoints.len() < PROVIDERS as usize {
        assert!(Instant::now() < end, "second app never all served");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    etcd.freeze().unwrap();
    let frozen = Instant::now();
    // The second app's providers die while etcd is frozen: nothing keeps
    // their leases alive, nothing re-registers them.
    drop(gone_providers);
    let mut stale_after = None;
    while frozen.elapsed() < FREEZE {
        let v = dir.view().await.unwrap();
        assert!(!v.endpoints.is_empty(), "a freeze never empties: {v:#?}");
        let g = gone_dir.view().await.unwrap();
        assert_eq!(
            g.endpoints.len(),
            PROVIDERS as usize,
            "stale, served: {g:#?}"
        );
        if stale_after.is_none() && stale(&v) {
            stale_after = Some(frozen.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let defaults = EtcdConfig::default();
    // Twice the liveness deadline plus slack: still within the freeze.
    let stale_bound = liveness_deadline(&defaults) * 2 + SLACK;
    assert!(stale_bound < FREEZE);
    let stale_after = stale_after.expect("the freeze was reported as stale");
    eprintln!("stale reported {stale_after:?} after SIGSTOP (bound {stale_bound:?})");
    assert!(
        stale_after <= stale_bound,
        "stale after {stale_after:?}, bound {stale_bound:?}"
    );

    etcd.thaw().unwrap();
    let thawed = Instant::now();
    let (mut resumed, mut saw_hold, mut fewest) = (None, false, usize::MAX);
    // The second app: when it is first seen held, when it first empties.
    let (mut gone_held, mut gone_empty) = (None, None);
    // Watch long enough for etcd to expire the leases, the providers to
    // re-register, the second app's leases to run out (3 s after SIGCONT)
    // and every hold to end (grace 3 s): at least the recovery window, and
    // on a slow machine until that happened (bounded by `WAIT`).
    loop {
        let v = dir.view().await.unwrap();
        assert!(
            !v.endpoints.is_empty(),
            "providers alive, so never empty after the resume: {v:#?}"
        );
        fewest = fewest.min(v.endpoints.len());
        saw_hold |= held(&v);
        if resumed.is_none() && !stale(&v) {
            resumed = Some(thawed.elapsed());
        }
        let g = gone_dir.view().await.unwrap();
        if gone_held.is_none() && held(&g) {
            gone_held = Some(thawed.elapsed());
        }
        if g.endpoints.is_empty() {
            gone_empty.get_or_insert(thawed.elapsed());
            assert_eq!(
                g.status,
                DirectoryStatus::Empty(EmptyReason::RegistryEmpty),
                "gone for real: {g:#?}"
            );
        } else {
            assert!(gone_empty.is_none(), "nothing comes back: {g:#?}");
        }
        let elapsed = thawed.elapsed();
        let settled = v.endpoints.len() == PROVIDERS as usize && !held(&v) && !stale(&v);
        if elapsed >= RECOVERY_WINDOW && settled && gone_empty.is_some() {
            break;
        }
        assert!(
            elapsed < WAIT,
            "not settled {elapsed:?} after SIGCONT: {v:#?}; second app: {g:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let watched = thawed.elapsed();
    let v = dir.view().await.unwrap();
    assert_eq!(v.endpoints.len(), PROVIDERS as usize, "all served: {v:#?}");
    assert!(!held(&v) && !stale(&v), "settled: {v:#?}");
    let resumed = resumed.unwrap();
    let gone_held = gone_held.expect("the dead providers' mass expiry was held and said");
    let gone_empty = gone_empty.expect("and removed after the grace");
    let served = gone_empty.saturating_sub(gone_held);
    let resume_bound = resume_deadline(&defaults) + SLACK;
    // Held at most the grace and half again (sampling, the spread of the
    // removals of one expiry): a second grace would not fit.
    let hold_bound = GRACE * 3 / 2;
    eprintln!(
        "engine on a 20 s etcd freeze: stale reported {stale_after:?} after SIGSTOP, resumed \
         {resumed:?} after SIGCONT; over the next {watched:?} at least {fewest} of {PROVIDERS} \
         endpoints served (mass expiry held on the way: {saw_hold}), re-registrations {}; \
         dead providers' app held from {gone_held:?} after SIGCONT, empty (RegistryEmpty) \
         from {gone_empty:?}: served held for {served:?} (bounds: resumed {resume_bound:?}, \
         held {hold_bound:?})",
        providers.stats().reregistrations
    );
    // Within the recovery probe's deadline, well before the backoff's cap.
    assert!(resume_bound < defaults.backoff.max);
    assert!(
        resumed <= resume_bound,
        "resumed after {resumed:?}, bound {resume_bound:?}"
    );
    // Held from each removal for the grace; the removals of one expiry and
    // the 10 ms sampling add a little.
    assert!(
        served <= hold_bound,
        "held past the grace: {served:?}, bound {hold_bound:?}"
    );
    consumer.shutdown().await;
}
