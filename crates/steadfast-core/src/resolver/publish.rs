//! Building the [`DirectoryUpdate`] of one subscribe key from the resolver's
//! snapshot, resolved metadata and last-known-good revisions.

use std::sync::Arc;

use super::{ResolverMachine, RevisionState};
use crate::update::{DirectoryUpdate, Unresolved, UpdateState};
use crate::url::ServiceUrl;

impl ResolverMachine {
    pub(super) fn build_update(&self, key: &str) -> DirectoryUpdate {
        let (urls, state) = match &self.instances {
            None => (Vec::new(), UpdateState::Pending),
            Some(instances) if instances.is_empty() => (Vec::new(), UpdateState::RegistryEmpty),
            Some(instances) => {
                let mut urls = Vec::new();
                for inst in instances.iter().filter(|i| i.is_serving()) {
                    let Some(rev) = inst.revision() else { continue };
                    let effective = match self.revisions.get(rev) {
                        Some(RevisionState::Resolved) => Some(rev),
                        _ => self.last_good.get(&inst.id).map(String::as_str),
                    };
                    let service = effective
                        .and_then(|r| self.metadata.get(r))
                        .and_then(|m| m.services.get(key));
                    if let Some(svc) = service {
                        urls.push(ServiceUrl::build(inst, svc));
                    }
                }
                let state = match (self.unresolved(), urls.is_empty()) {
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
            urls: Arc::new(urls),
            state,
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
