//! Building the [`DirectoryUpdate`] of one subscribe key from the resolver's
//! snapshot, resolved metadata and last-known-good revisions.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{ResolverMachine, RevisionState, NO_REVISION};
use crate::update::{DirectoryUpdate, NotServing, Unresolved, UpdateState, UrlChange};
use crate::url::{ServiceEndpoint, ServiceUrl};

/// What one revision offers for one subscribe key.
#[derive(Clone)]
enum Offer {
    Service(Arc<ServiceEndpoint>),
    Nothing,
    Unresolved,
}

impl Offer {
    fn endpoint(&self) -> Option<Arc<ServiceEndpoint>> {
        match self {
            Offer::Service(ep) => Some(ep.clone()),
            _ => None,
        }
    }
}

impl ResolverMachine {
    pub(super) fn build_update(&self, key: &str) -> DirectoryUpdate {
        let (urls, state) = match &self.instances {
            None => (Vec::new(), UpdateState::Pending),
            Some(instances) if instances.is_empty() => (Vec::new(), UpdateState::RegistryEmpty),
            Some(instances) => {
                let mut urls = Vec::with_capacity(instances.len());
                // What each revision offers for `key`, looked up once.
                let mut offers: Vec<Option<Offer>> = vec![None; self.rev_names.len()];
                let mut good_offers: FxHashMap<&str, Offer> = FxHashMap::default();
                for (inst, &k) in instances.iter().zip(&self.rev_index) {
                    if k == NO_REVISION || !inst.is_serving() {
                        continue;
                    }
                    let offer = offers[k as usize]
                        .get_or_insert_with(|| self.offer(&self.rev_names[k as usize], key));
                    let endpoint = match offer {
                        Offer::Service(ep) => Some(ep.clone()),
                        Offer::Nothing => None,
                        Offer::Unresolved => match self.last_good.get(&inst.id) {
                            Some(good) => good_offers
                                .entry(good.as_str())
                                .or_insert_with(|| self.offer(good, key))
                                .endpoint(),
                            None => None,
                        },
                    };
                    if let Some(ep) = endpoint {
                        urls.push(Arc::new(ServiceUrl::new(
                            &Arc::new(crate::instance::Instance::decode(
                                inst,
                                &mut Default::default(),
                            )),
                            &ep,
                        )));
                    }
                }
                let state = match (self.unresolved(), urls.is_empty()) {
                    (_, true) if !instances.iter().any(|i| i.is_serving()) => {
                        UpdateState::NotServing(NotServing::count(instances.iter()))
                    }
                    (None, true) => UpdateState::NoMatchingService,
                    (None, false) => UpdateState::Resolved,
                    (Some(u), true) => UpdateState::Unresolved(u),
                    (Some(u), false) => UpdateState::Degraded(u),
                };
                (urls, state)
            }
        };
        DirectoryUpdate {
            app: self.app.clone(),
            subscribe_key: key.to_string(),
            generation: self.generation,
            change: UrlChange::Full(urls),
            state,
            stale_since: self.stale_since,
            held: self.held,
        }
    }

    /// What `rev` offers for `key`: resolved revisions (and last-known-good
    /// ones, whose metadata is kept) answer from their metadata.
    fn offer(&self, rev: &str, key: &str) -> Offer {
        match (self.revisions.get(rev), self.metadata.get(rev)) {
            (Some(RevisionState::Unresolved { .. }), _) | (_, None) => Offer::Unresolved,
            (_, Some(m)) => m
                .services
                .get(key)
                .map_or(Offer::Nothing, |s| Offer::Service(ServiceEndpoint::of(s))),
        }
    }

    /// The unresolved revisions, or `None` when all are resolved.
    pub fn unresolved(&self) -> Option<Unresolved> {
        let mut out: Option<Unresolved> = None;
        for (rev, state) in &self.revisions {
            if let RevisionState::Unresolved {
                since,
                attempts,
                last_error,
                ..
            } = state
            {
                let u = out.get_or_insert_with(|| Unresolved {
                    revisions: Vec::new(),
                    since: *since,
                    attempts: 0,
                    last_error: None,
                });
                u.revisions.push(rev.clone());
                u.since = u.since.min(*since);
                if *attempts >= u.attempts {
                    u.attempts = *attempts;
                    if last_error.is_some() {
                        u.last_error = last_error.clone();
                    }
                }
            }
        }
        out
    }
}
