//! What a reference's providers export under its interface name, read
//! when no endpoint matches it, so the command can say which protocols
//! (or groups and versions) it found instead of only "no provider exports
//! this service". The instances come from the engine (a subscribed app's
//! live watch state: no registry call), the metadata from the engine's
//! own fetcher, each fetch bounded; what was read is kept per app and
//! revision, so `--watch` reads each revision once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use steadfast_actors::Engine;
use steadfast_core::{check_metadata, MetadataFetcher, ServiceInfo};

use crate::source::SharedFetcher;

/// Longest one metadata fetch of this lookup may take.
const FETCH_LIMIT: Duration = Duration::from_secs(5);

/// Most revisions one lookup fetches (a bound on what a hostile registry
/// can make the command do).
const MAX_FETCHES: usize = 16;

/// Metadata read so far: the services of each `(app, revision)` whose
/// name is the interface looked up.
#[derive(Default)]
pub(crate) struct Exported {
    read: BTreeMap<(String, String), Vec<ServiceInfo>>,
}

impl Exported {
    /// The services named `interface` that `apps` export, or `None` when
    /// no revision of theirs could be read.
    pub(crate) async fn lookup(
        &mut self,
        engine: &Engine,
        fetcher: &SharedFetcher,
        apps: &[String],
        interface: &str,
    ) -> Option<Vec<ServiceInfo>> {
        let mut found = Vec::new();
        let mut read_any = false;
        let mut fetches = 0usize;
        for app in apps {
            let Ok(answer) = engine.instances(app).await else {
                continue;
            };
            let mut seen = BTreeSet::new();
            for instance in &answer.instances {
                let Some(revision) = instance.revision() else {
                    continue;
                };
                if !seen.insert(revision.to_string()) {
                    continue;
                }
                let key = (app.clone(), revision.to_string());
                if let Some(services) = self.read.get(&key) {
                    found.extend(services.iter().cloned());
                    read_any = true;
                    continue;
                }
                if fetches >= MAX_FETCHES {
                    continue;
                }
                fetches = fetches.saturating_add(1);
                let fetch = fetcher.fetch(&instance.to_record(app), revision);
                let Ok(Ok(info)) = tokio::time::timeout(FETCH_LIMIT, fetch).await else {
                    continue;
                };
                if check_metadata(app, revision, &info).is_err() {
                    continue;
                }
                let services: Vec<ServiceInfo> = info
                    .services
                    .into_values()
                    .filter(|s| s.name == interface)
                    .collect();
                found.extend(services.iter().cloned());
                self.read.insert(key, services);
                read_any = true;
            }
        }
        read_any.then_some(found)
    }
}
